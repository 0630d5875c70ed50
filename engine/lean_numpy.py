"""The lean forward's narrow passes (decode steps, verify chains and trees) in numpy.

A completion model's decode step on a CPU is a hundred or so small operations on one row, and
what each costs is mostly its dispatch: a torch eager op takes 2-5 us before it computes
anything (18 us for rms_norm on one row), a numpy op on the same arrays 0.5-2 us, and numpy's
BLAS multiplies one row as a vector (gemv). On the AVX2 EPYC VM the shipped target's one-token
step ran 1.45-1.58x faster this way, its verify passes of 4-16 tokens 1.07-1.49x (`python -m
bench.forward_cost --baseline e8c8812`, README "Engine benchmark"); the 0.46M draft's step was
a tie, and the measurement keeps torch where it is. So a packed float32 model on the CPU can run
a pass here: the same math as LeanLlama.run / LeanBigCode.run (engine/lean.py), on numpy views
of the packed weights and of the LeanKV cache (no copies: the keys and values it writes are the
torch cache's), with numpy's BLAS held to one thread (engine/matmul.py, _openblas_ready). It is one of the kernels
`choose_kernels` measures for each class of row counts (NUMPY): where it is not faster, it is
not taken; prefills, whose work is in big matmuls and attention, are not offered to it.

The results equal the torch passes up to float rounding (the tests hold both to transformers'
forward, allclose), as the matmul kernels do among themselves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

_GELU_C = float(np.sqrt(2.0 / np.pi))
GEMV_ROWS = 3   # passes of up to this many rows multiply row by row (_Map)


@dataclass
class _Map:
    """A packed Linear as numpy: the [in, out] weight and the bias (None: none)."""
    weight: np.ndarray
    bias: np.ndarray | None

    def vector(self, h: np.ndarray) -> np.ndarray:
        """One row as a vector, [in] -> [out]."""
        out = h @ self.weight
        if self.bias is not None:
            out += self.bias
        return out

    def __call__(self, h: np.ndarray) -> np.ndarray:
        # A few rows as vectors: numpy's BLAS then takes its matrix-vector product (gemv) for
        # each, whose weights the next row finds in the cache; its matrix product of 2-3 rows
        # ran 1.6-2.3x slower than as many vector products here (the target's shapes, weights
        # cached, a throwaway timing), and from 4 rows its matrix product wins.
        if h.shape[0] <= GEMV_ROWS:
            out = np.empty((h.shape[0], self.weight.shape[1]), dtype=h.dtype)
            for i, row in enumerate(h):
                np.matmul(row, self.weight, out=out[i])
        else:
            out = h @ self.weight
        if self.bias is not None:
            out += self.bias
        return out


def _map(linear) -> _Map:
    return _Map(linear.weight_np, None if linear.bias is None else linear.bias.detach().numpy())


def supported(lean) -> bool:
    """Whether `lean` can run its narrow passes here: packed float32 weights on the CPU (their
    numpy views exist), and the activations written here: SiLU with the norms folded into the
    maps (Llama family), GELU's tanh form (GPTBigCode)."""
    if not getattr(lean, "packed", False) or any(m.weight_np is None for m in lean.linears()):
        return False
    if hasattr(lean, "layers"):
        return lean.folded and lean.act is torch.nn.functional.silu
    return getattr(lean.model.config, "activation_function", "") in ("gelu_pytorch_tanh", "gelu_new")


def _arrays(lean):
    """The model's weights as numpy views (and a Llama's norm floor as a float), made once per
    lean model (its packed copies do not change after it is made)."""
    arrays = getattr(lean, "_numpy_arrays", None)
    if arrays is None:
        if hasattr(lean, "layers"):     # LeanLlama
            arrays = ([(_map(l.qkv), _map(l.o_proj), _map(l.gate_up), _map(l.down_proj)) for l in lean.layers],
                      lean.embed_weight.detach().numpy(), lean.norm_weight.detach().numpy(), _map(lean.lm_head),
                      float(lean.norm_floor))
        else:                           # LeanBigCode
            ln = lambda t: (t[1].detach().numpy(), 0.0 if t[2] is None else t[2].detach().numpy(), t[3])  # noqa: E731
            arrays = ([(ln(b.ln_1), _map(b.c_attn), _map(b.attn_proj), ln(b.ln_2), _map(b.c_fc), _map(b.mlp_proj))
                       for b in lean.blocks],
                      lean.wte.detach().numpy(), lean.wpe.detach().numpy(), ln(lean.ln_f), _map(lean.lm_head))
        lean._numpy_arrays = arrays
    return arrays


def _mask(start: int, n: int, tree) -> np.ndarray | None:
    """Additive [n, start + n]: 0 where a new row may attend (the cache, and the earlier rows of
    a chain or the row's ancestors in a tree), -inf elsewhere; None for one row."""
    if n == 1:
        return None
    if tree is None:
        seen = np.arange(start + n)[None, :] <= np.arange(start, start + n)[:, None]
    else:
        seen = np.concatenate([np.ones((n, start), dtype=bool), tree.ancestors.cpu().numpy()], axis=1)
    return np.where(seen, np.float32(0.0), np.float32(-np.inf))


def _attend_row(q: np.ndarray, keys: np.ndarray, values: np.ndarray, scale: float) -> np.ndarray:
    """One query row q [heads, hd] over all of keys and values [kv_heads, L, hd]: [heads * hd]."""
    kv_heads, hd = keys.shape[0], keys.shape[2]
    scores = np.matmul(q.reshape(kv_heads, -1, hd) * scale, keys.transpose(0, 2, 1))   # [kv_heads, group, L]
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.matmul(scores, values).reshape(-1)


def _attend(q: np.ndarray, keys: np.ndarray, values: np.ndarray, mask: np.ndarray | None,
            scale: float, chain_start: int | None = None) -> np.ndarray:
    """q [n, heads, hd] over keys and values [kv_heads, L, hd]: [n, heads * hd]. The heads that
    share a kv head are stacked as its query rows, so each kv head is one matrix product. A short
    chain (`chain_start`: its first row's slot) attends row by row, each over the slots up to
    its own, with no mask: fewer and smaller operations than the masked product."""
    n, heads, hd = q.shape
    if chain_start is not None and n <= GEMV_ROWS:
        out = np.empty((n, heads * hd), dtype=q.dtype)
        for i in range(n):
            end = chain_start + i + 1
            out[i] = _attend_row(q[i], keys[:, :end], values[:, :end], scale)
        return out
    kv_heads = keys.shape[0]
    group = heads // kv_heads
    rows = (q * scale).reshape(n, kv_heads, group, hd).transpose(1, 2, 0, 3).reshape(kv_heads, group * n, hd)
    scores = np.matmul(rows, keys.transpose(0, 2, 1))          # [kv_heads, group * n, L]
    if mask is not None:
        scores = scores.reshape(kv_heads, group, n, -1)
        scores += mask
        scores = scores.reshape(kv_heads, group * n, -1)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    out = np.matmul(scores, values)                            # [kv_heads, group * n, hd]
    return out.reshape(kv_heads, group, n, hd).transpose(2, 0, 1, 3).reshape(n, heads * hd)


def _row_squares(x: np.ndarray) -> np.ndarray:
    """The sum of squares of each row, [n, 1]."""
    return np.einsum("ij,ij->i", x, x)[:, None] if x.shape[0] > 1 else (x[0] @ x[0]).reshape(1, 1)


def _unit_rows(x: np.ndarray, floor: float) -> np.ndarray:
    """LeanLlama._unit_norm on rows: RMSNorm with its weight and sqrt(hidden) folded into the next map."""
    return x / np.hypot(np.sqrt(_row_squares(x)), floor)


def _place(kv, n: int, tree) -> tuple[int, np.ndarray, np.ndarray]:
    """Room in the cache for n new rows: (their first slot, the cache as numpy, their positions)."""
    start = kv.length
    kv.reserve(start + n)
    where = np.arange(start, start + n) if tree is None else start + tree.depths.cpu().numpy()
    return start, kv.data.numpy(), where


def _llama_step(lean, token: int, kv) -> torch.Tensor:
    """llama_pass for one new token, on vectors: a decode step, the commonest pass, written
    with the fewest operations (in a throwaway timing of the shipped target at 300 cached
    tokens, 1.6 ms a step this way against 2.3-2.5 ms through the rows of llama_pass)."""
    layers, embed, norm_weight, lm_head, floor = _arrays(lean)
    pos = kv.length
    kv.reserve(pos + 1)
    data = kv.data.numpy()
    lean.positions.ensure(pos + 1, torch.float32, kv.data.device)
    cos, sin = lean.positions.cos.numpy()[pos], lean.positions.sin.numpy()[pos]    # [1, hd]
    heads, kv_heads, hd = lean.heads, lean.kv_heads, lean.head_dim
    qk_heads, half, scale = heads + kv_heads, hd // 2, hd ** -0.5
    x = embed[token].copy()
    for i, (qkv_map, o_proj, gate_up, down) in enumerate(layers):
        qkv = qkv_map.vector(x / np.hypot(np.sqrt(x @ x), floor)).reshape(qk_heads + kv_heads, hd)
        qk = qkv[:qk_heads]
        qk[:] = qk * cos + np.concatenate((qk[:, half:], qk[:, :half]), axis=-1) * sin
        data[i, :, :, pos] = qkv[heads:].reshape(2, kv_heads, hd)
        x += o_proj.vector(_attend_row(qkv[:heads], data[i, 0, :, :pos + 1], data[i, 1, :, :pos + 1], scale))
        gu = gate_up.vector(x / np.hypot(np.sqrt(x @ x), floor))
        gate, up = gu[:gu.shape[0] // 2], gu[gu.shape[0] // 2:]
        x += down.vector(gate / (1.0 + np.exp(-gate)) * up)
    x = x / np.sqrt((x @ x) / x.shape[0] + lean.eps) * norm_weight
    kv.length = pos + 1
    return torch.from_numpy(lm_head.vector(x)[None])


def llama_pass(lean, ids: torch.Tensor, kv, n_logits: int, tree=None) -> torch.Tensor:
    """LeanLlama's pass of `ids` (a few rows) in numpy: logits for the last n_logits rows."""
    if ids.shape[0] == 1 and tree is None:
        return _llama_step(lean, int(ids[0]), kv)
    layers, embed, norm_weight, lm_head, floor = _arrays(lean)
    n = ids.shape[0]
    start, data, where = _place(kv, n, tree)
    lean.positions.ensure(start + n, torch.float32, kv.data.device)
    cos, sin = lean.positions.cos.numpy()[where], lean.positions.sin.numpy()[where]   # [n, 1, hd]
    heads, kv_heads, hd = lean.heads, lean.kv_heads, lean.head_dim
    qk_heads, half, scale = heads + kv_heads, hd // 2, hd ** -0.5
    chain = start if tree is None else None
    mask = None if chain is not None and n <= GEMV_ROWS else _mask(start, n, tree)
    end = start + n
    x = embed[ids.numpy()]
    for i, (qkv_map, o_proj, gate_up, down) in enumerate(layers):
        qkv = qkv_map(_unit_rows(x, floor)).reshape(n, qk_heads + kv_heads, hd)
        qk = qkv[:, :qk_heads]
        # rope: sin comes sign-folded, so rotate_half is a swap of the halves (np.roll is slower)
        qk[:] = qk * cos + np.concatenate((qk[..., half:], qk[..., :half]), axis=-1) * sin
        data[i, 0, :, start:end] = qkv[:, heads:qk_heads].transpose(1, 0, 2)
        data[i, 1, :, start:end] = qkv[:, qk_heads:].transpose(1, 0, 2)
        x = x + o_proj(_attend(qkv[:, :heads], data[i, 0, :, :end], data[i, 1, :, :end], mask, scale, chain))
        gu = gate_up(_unit_rows(x, floor))
        gate, up = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        x += down(gate / (1.0 + np.exp(-gate)) * up)           # silu(gate) * up
    x = x[n - n_logits:]
    x = x / np.sqrt(_row_squares(x) / x.shape[-1] + lean.eps) * norm_weight
    kv.length = end
    return torch.from_numpy(lm_head(x))


def _layer_norm(x: np.ndarray, ln) -> np.ndarray:
    weight, bias, eps = ln
    centred = x - x.mean(axis=-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps) * weight + bias


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + 0.044715 * x * x * x)))


def _bigcode_step(lean, token: int, kv) -> torch.Tensor:
    """bigcode_pass for one new token, on vectors (as _llama_step)."""
    blocks, wte, wpe, ln_f, lm_head = _arrays(lean)
    pos = kv.length
    kv.reserve(pos + 1)
    data = kv.data.numpy()
    heads, hd, embed = lean.heads, lean.head_dim, lean.embed
    x = wte[token] + wpe[pos]
    for i, (ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj) in enumerate(blocks):
        qkv = c_attn.vector(_layer_norm(x, ln_1))
        if lean.mq:
            q = qkv[:embed].reshape(heads, hd)
            data[i, :, 0, pos] = qkv[embed:].reshape(2, hd)
        else:
            per_head = qkv.reshape(heads, 3, hd)
            q = per_head[:, 0]
            data[i, :, :, pos] = per_head[:, 1:].transpose(1, 0, 2)
        x = x + attn_proj.vector(_attend_row(q, data[i, 0, :, :pos + 1], data[i, 1, :, :pos + 1], lean.scale))
        x += mlp_proj.vector(_gelu_tanh(c_fc.vector(_layer_norm(x, ln_2))))
    kv.length = pos + 1
    return torch.from_numpy(lm_head.vector(_layer_norm(x, ln_f))[None])


def bigcode_pass(lean, ids: torch.Tensor, kv, n_logits: int, tree=None) -> torch.Tensor:
    """LeanBigCode's pass of `ids` (a few rows) in numpy: logits for the last n_logits rows."""
    if ids.shape[0] == 1 and tree is None:
        return _bigcode_step(lean, int(ids[0]), kv)
    blocks, wte, wpe, ln_f, lm_head = _arrays(lean)
    n = ids.shape[0]
    start, data, where = _place(kv, n, tree)
    heads, hd, embed = lean.heads, lean.head_dim, lean.embed
    chain = start if tree is None else None
    mask = None if chain is not None and n <= GEMV_ROWS else _mask(start, n, tree)
    end = start + n
    x = wte[ids.numpy()] + wpe[where]
    for i, (ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj) in enumerate(blocks):
        qkv = c_attn(_layer_norm(x, ln_1))
        if lean.mq:
            q = qkv[:, :embed].reshape(n, heads, hd)
            new_kv = qkv[:, embed:].reshape(n, 2, 1, hd)
        else:
            per_head = qkv.reshape(n, heads, 3, hd)
            q, new_kv = per_head[:, :, 0], per_head[:, :, 1:].transpose(0, 2, 1, 3)
        data[i, :, :, start:end] = new_kv.transpose(1, 2, 0, 3)
        x = x + attn_proj(_attend(q, data[i, 0, :, :end], data[i, 1, :, :end], mask, lean.scale, chain))
        x += mlp_proj(_gelu_tanh(c_fc(_layer_norm(x, ln_2))))
    kv.length = end
    return torch.from_numpy(lm_head(_layer_norm(x[n - n_logits:], ln_f)))
