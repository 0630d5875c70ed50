"""Lean forward passes for the architectures specfill runs most (Llama/Qwen2, GPTBigCode).

At completion-model sizes on a CPU, a transformers forward call spends most of its time in
framework overhead (config lookups, mask builders, output objects, a torch.cat per layer per
step to grow the cache). These functions run the same math on the model's own weights with a
preallocated KV cache, nanoGPT-style. Any other architecture, or an unusual config, falls back
to the transformers forward: `lean_unsupported` says why, and `make_lean` logs it and returns
None. Tests check both agree (allclose).

What a step costs here is mostly the number of tensor operations (each is a few microseconds
of dispatch on a CPU, a kernel launch on a GPU), so the forward keeps that number low:
- per model, not per call: rope cos/sin tables and causal-mask bands for all positions so far
  (sliced, never rebuilt), weights looked up once (no module calls), transposed views for
  matmuls that also add the residual (addmm);
- small models get fused copies of the q/k/v and gate/up weights (one matmul instead of
  three or two). The model's own parameters stay as they are; the copies are taken when the
  lean forward is made, and only while they cost little memory (`FUSE_MAX_BYTES`);
- rope is applied to queries and keys together, in place, and one copy writes a step's keys
  and values into the cache (token-major layout);
- the cache for all layers is one tensor; a step writes to it in place and attends over a
  slice of it, so shapes depend only on the number of new tokens and the cache length (the
  structure CUDA graphs need, apart from the length: see LeanKV).

The new tokens may also form a draft tree (`TreeLayout`, engine/tree.py): each node takes the
rope angle (or learned position) of its depth and a mask row that sees the cache and its own
ancestors; `LeanKV.keep` then moves the accepted path's keys and values into place.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import GPTBigCodeForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM

log = logging.getLogger("specfill.engine")

# Packed weight copies (see _Linear) are made only while they add at most this much memory:
# they pay where per-operation overhead and small matmuls dominate (completion-sized models);
# a big model's memory matters more.
PACK_MAX_BYTES = 64 * 2**20

# Causal masks for up to this many new tokens are slices of one precomputed band (verify
# widths); longer inputs (prompt prefill) build their mask.
MASK_BAND_WIDTH = 64


def _grown(capacity: int, total: int, minimum: int = 256) -> int:
    cap = max(minimum, capacity)
    while cap < total:
        cap *= 2  # doubling: growth copies are rare, steps never copy
    return cap


class LeanKV:
    """The keys and values of all layers in one tensor, [layers, capacity, 2, kv_heads,
    head_dim] (token-major: one copy writes a step's keys and values); `length` tokens are
    valid. `keys[i]`/`values[i]` are [1, kv_heads, capacity, head_dim] views for attention.

    The capacity grows by doubling. For CUDA graphs, reserve the session's whole budget once
    (`reserve(max_tokens)`): then no step allocates or moves the cache."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype, device):
        self.shape = (layers, kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.capacity = 0
        self.length = 0
        self.data: torch.Tensor | None = None
        self.slots: list[torch.Tensor] = []    # [capacity, 2, kv_heads, head_dim] per layer
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def reserve(self, total: int) -> None:
        if total <= self.capacity:
            return
        cap = _grown(self.capacity, total)
        layers, heads, hd = self.shape
        data = torch.zeros(layers, cap, 2, heads, hd, dtype=self.dtype, device=self.device)
        if self.data is not None:
            data[:, :self.length] = self.data[:, :self.length]
        self.data, self.capacity = data, cap
        self.slots = list(data.unbind(0))
        self.keys = [s[:, 0].transpose(0, 1)[None] for s in self.slots]
        self.values = [s[:, 1].transpose(0, 1)[None] for s in self.slots]

    def keep(self, dest: int, sources: list[int]) -> None:
        """Move the keys and values at positions `sources` (ascending, each >= its new place)
        to dest, dest + 1, ...; the cache then ends there. After a tree pass this keeps the
        accepted path and drops the other branches, without computing anything again."""
        if sources != list(range(dest, dest + len(sources))):
            idx = torch.tensor(sources, device=self.data.device)
            self.data[:, dest:dest + len(sources)] = self.data.index_select(1, idx)
        self.length = dest + len(sources)


@dataclass
class TreeLayout:
    """New tokens that form a tree rather than a chain (engine/tree.py): each sits at the
    position of its depth below the first one and sees the cache and its own ancestors only."""
    depths: torch.Tensor      # [n] long, 0 for the root
    ancestors: torch.Tensor   # [n, n] bool: row i is True at i and at i's ancestors


class _Positions:
    """Tables indexed by position, grown by doubling and sliced per call: the causal-mask band
    and (for rotary models) cos and sign-folded sin. A band row i is True up to column
    C - W + i, so rows [:n], columns [C - W - past:][:past + n] are the mask for n tokens
    after `past` cached ones."""

    def __init__(self, inv_freq: torch.Tensor | None = None, rope_scale: float = 1.0):
        self.inv_freq, self.rope_scale = inv_freq, rope_scale
        self.capacity = 0
        self.band: torch.Tensor | None = None
        self.cos = self.sin = None

    def ensure(self, total: int, dtype, device) -> None:
        if total <= self.capacity and self.band.device == device and (
                self.cos is None or self.cos.dtype == dtype):
            return
        cap = _grown(self.capacity, total)
        w = MASK_BAND_WIDTH
        cols = torch.arange(cap + w, device=device)
        self.band = cols[None, :] <= torch.arange(w, device=device)[:, None] + cap
        if self.inv_freq is not None:
            pos = torch.arange(cap, device=device, dtype=torch.float32)
            freqs = pos[:, None] * self.inv_freq.to(device)[None, :]
            half = freqs.shape[-1]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos() * self.rope_scale
            sin = emb.sin() * self.rope_scale
            # rotate_half(t) * sin == (t with its halves swapped) * (sin, first half negated)
            sin[:, :half] = -sin[:, :half]
            self.cos = cos.to(dtype)[:, None, :]   # [capacity, 1, head_dim]
            self.sin = sin.to(dtype)[:, None, :]
        self.capacity = cap

    def mask(self, past: int, n: int, device, tree: TreeLayout | None = None) -> torch.Tensor | None:
        """Bool [n, past + n]: True where a new token may attend (None for one token)."""
        if tree is not None:    # every node sees the cache, and of the new tokens its ancestors
            return torch.cat([tree.ancestors.new_ones(n, past), tree.ancestors], dim=1)
        if n == 1:
            return None  # one new token may attend to everything before it
        if n > MASK_BAND_WIDTH:
            rows = torch.arange(n, device=device)[:, None] + past
            return torch.arange(past + n, device=device)[None, :] <= rows
        off = self.band.shape[1] - MASK_BAND_WIDTH - past
        return self.band[:n, off:off + past + n]


def _attend(q: torch.Tensor, kv: LeanKV, layer: int, end: int, mask, scale: float) -> torch.Tensor:
    """q [n, heads, hd] over the first `end` cached positions: [n, heads * hd]."""
    n, heads, hd = q.shape
    keys, values = kv.keys[layer][:, :, :end], kv.values[layer][:, :, :end]
    kv_heads = keys.shape[1]
    if n == 1:
        # One query per head and no mask: the heads sharing a kv head are that head's query
        # rows (exact, and no GQA expansion).
        out = F.scaled_dot_product_attention(q.view(1, kv_heads, heads // kv_heads, hd), keys, values,
                                             scale=scale)
        return out.view(1, heads * hd)
    # torch's CPU flash kernel needs unit stride in the head dim (else it takes the slow math
    # path); queries from a wide packed matmul come transposed.
    q = q.transpose(0, 1)[None] if q.stride(-1) == 1 else q.transpose(0, 1)[None].contiguous()
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=scale,
                                         enable_gqa=heads != kv_heads)
    return out[0].transpose(0, 1).reshape(n, heads * hd)


def _fused_bias(modules) -> torch.Tensor | None:
    if all(m.bias is None for m in modules):
        return None
    return torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in modules])


def _weight_bytes(modules) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in modules)


# From this many rows on, a packed matmul multiplies the [out, in] weight by the transposed
# input (see _Linear).
WIDE_ROWS = 4


class _Linear:
    """One or more linear maps of the same input, their outputs concatenated.

    Packed (small models): one matmul on copies of the weights owned here, concatenated, in
    both layouts, because on this kind of CPU MKL's speed for a few rows depends on it: one to
    three rows run 1.5-2x faster as x @ [in, out]; four to sixteen 1.3-1.6x faster as
    ([out, in] @ x^T)^T (measured on the shipped pair, bench/forward_cost.py). The transposed
    result is returned as a view: the next matmul takes it transposed again, contiguous.
    Unpacked: the model's own weights, one matmul per map, no extra memory. The model's
    parameters are never touched either way."""

    def __init__(self, modules: list[torch.nn.Linear], packed: bool):
        self.bias = _fused_bias(modules)
        self.bias_column = None if self.bias is None else self.bias[:, None]
        self.packed = packed
        if packed:
            self.weight = torch.cat([m.weight for m in modules]) if len(modules) > 1 else modules[0].weight
            self.weight_t = self.weight.t().contiguous()
            self.parts = None
        else:
            self.weight = modules[0].weight if len(modules) == 1 else None
            self.weight_t = None if self.weight is None else self.weight.t()
            self.parts = [(m.weight, m.bias) for m in modules]

    @staticmethod
    def extra_bytes(modules: list[torch.nn.Linear]) -> int:
        """Memory of the packed copies."""
        return _weight_bytes(modules) * (2 if len(modules) > 1 else 1)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        if self.packed and h.shape[0] >= WIDE_ROWS:
            if self.bias is None:
                return torch.mm(self.weight, h.t()).t()
            return torch.addmm(self.bias_column, self.weight, h.t()).t()
        if self.weight_t is not None:
            return torch.mm(h, self.weight_t) if self.bias is None else torch.addmm(self.bias, h, self.weight_t)
        return torch.cat([F.linear(h, w, b) for w, b in self.parts], dim=-1)

    def add_to(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x + self(h), one addmm where there is no bias (single maps only)."""
        if self.bias is not None:
            x = x + self.bias
        if self.packed and h.shape[0] >= WIDE_ROWS:
            return torch.addmm(x.t(), self.weight, h.t()).t()
        return torch.addmm(x, h, self.weight_t)


def _packs(model, linears: list[list[torch.nn.Linear]], groups, pack_max_bytes: int) -> bool:
    """Whether packed copies of these maps (grouped as the forward fuses them) and the output
    head fit in `pack_max_bytes`."""
    total = sum(_Linear.extra_bytes([m[i] for i in g]) for m in linears for g in groups)
    return total + _Linear.extra_bytes([model.lm_head]) <= pack_max_bytes


@dataclass
class _LlamaLayer:
    norm1: torch.Tensor
    qkv: _Linear
    o_proj: _Linear
    norm2: torch.Tensor
    gate_up: _Linear
    down_proj: _Linear


class LeanLlama:
    """Llama-family decoder (Llama, Qwen2): RMSNorm, rotary positions, grouped-query attention."""

    def __init__(self, model, pack_max_bytes: int = PACK_MAX_BYTES):
        cfg = model.config
        self.model = model
        self.inner = model.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.hidden = cfg.hidden_size
        self.eps = cfg.rms_norm_eps
        rot = self.inner.rotary_emb
        self.positions = _Positions(rot.inv_freq.float().clone(), float(getattr(rot, "attention_scaling", 1.0)))
        self.act = _activation(self.inner.layers[0].mlp.act_fn)
        # tensors read every call, looked up once (a module attribute is a Python call each time)
        self.embed_weight = self.inner.embed_tokens.weight
        self.norm_weight = self.inner.norm.weight
        linears = [[l.self_attn.q_proj, l.self_attn.k_proj, l.self_attn.v_proj, l.self_attn.o_proj,
                    l.mlp.gate_proj, l.mlp.up_proj, l.mlp.down_proj] for l in self.inner.layers]
        self.packed = _packs(model, linears, [(0, 1, 2), (3,), (4, 5), (6,)], pack_max_bytes)
        self.layers = [
            _LlamaLayer(l.input_layernorm.weight, _Linear(m[:3], self.packed), _Linear(m[3:4], self.packed),
                        l.post_attention_layernorm.weight, _Linear(m[4:6], self.packed),
                        _Linear(m[6:], self.packed))
            for l, m in zip(self.inner.layers, linears)]
        self.lm_head = _Linear([model.lm_head], self.packed)

    def new_cache(self, dtype, device) -> LeanKV:
        return LeanKV(len(self.layers), self.kv_heads, self.head_dim, dtype, device)

    def _norm(self, x, weight):
        if x.dtype == torch.float32:
            return torch.rms_norm(x, (x.shape[-1],), weight, self.eps)
        # Half precision: normalise in float32 and round before the weight, as transformers does.
        return weight * torch.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)

    def __call__(self, ids: torch.Tensor, kv: LeanKV, n_logits: int, tree: TreeLayout | None = None) -> torch.Tensor:
        n = ids.shape[0]
        start = kv.length
        end = start + n
        kv.reserve(end)
        x = torch.embedding(self.embed_weight, ids)
        pos = self.positions
        pos.ensure(end, x.dtype, x.device)
        if tree is None:
            cos, sin = pos.cos[start:end], pos.sin[start:end]
        else:   # a node's position is its depth below the root
            cos, sin = pos.cos[start + tree.depths], pos.sin[start + tree.depths]
        mask = pos.mask(start, n, ids.device, tree)
        heads, kvh, hd, half = self.heads, self.kv_heads, self.head_dim, self.head_dim // 2
        qk_heads = heads + kvh
        scale = hd ** -0.5

        for i, layer in enumerate(self.layers):
            qkv = layer.qkv(self._norm(x, layer.norm1)).view(n, qk_heads + kvh, hd)
            qk = qkv[:, :qk_heads]
            # rope on queries and keys together, in place; rolling by half a head swaps halves
            torch.addcmul(qk * cos, qk.roll(half, -1), sin, out=qk)
            kv.slots[i][start:end] = qkv[:, heads:].view(n, 2, kvh, hd)
            x = layer.o_proj.add_to(x, _attend(qkv[:, :heads], kv, i, end, mask, scale))
            gate, up = layer.gate_up(self._norm(x, layer.norm2)).chunk(2, dim=-1)
            x = layer.down_proj.add_to(x, self.act(gate).mul_(up))
        kv.length = end
        return self.lm_head(self._norm(x[-n_logits:], self.norm_weight))


@dataclass
class _BigCodeBlock:
    ln_1: tuple
    c_attn: _Linear
    attn_proj: _Linear
    ln_2: tuple
    c_fc: _Linear
    mlp_proj: _Linear
    act: object


def _ln(ln: torch.nn.LayerNorm) -> tuple:
    """A LayerNorm's arguments, looked up once."""
    return ln.normalized_shape, ln.weight, ln.bias, ln.eps


def _layer_norm(x, ln: tuple):
    shape, weight, bias, eps = ln
    return torch.layer_norm(x, shape, weight, bias, eps, torch.backends.cudnn.enabled)


def _activation(module: torch.nn.Module):
    """The function a transformers activation module calls, where it only wraps one (one or two
    Python calls less per layer); else the module's forward."""
    if isinstance(module, torch.nn.SiLU) or type(module).__name__ == "SiLUActivation":
        return F.silu
    act = getattr(module, "act", None)
    if type(module).__name__ == "GELUTanh" and isinstance(act, functools.partial):
        return act
    return module.forward


class LeanBigCode:
    """GPTBigCode (StarCoder family): LayerNorm, learned positions, multi-query attention."""

    def __init__(self, model, pack_max_bytes: int = PACK_MAX_BYTES):
        cfg = model.config
        self.model = model
        self.inner = model.transformer
        self.heads = cfg.n_head
        self.embed = cfg.n_embd
        self.head_dim = self.embed // self.heads
        self.mq = cfg.multi_query
        self.kv_heads = 1 if self.mq else self.heads
        self.scale = self.head_dim ** -0.5 if cfg.scale_attn_weights else 1.0
        self.positions = _Positions()
        linears = [[b.attn.c_attn, b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj] for b in self.inner.h]
        self.packed = _packs(model, linears, [(0,), (1,), (2,), (3,)], pack_max_bytes)
        self.blocks = [_BigCodeBlock(_ln(b.ln_1), *(_Linear([m], self.packed) for m in mods[:2]), _ln(b.ln_2),
                                     *(_Linear([m], self.packed) for m in mods[2:]), _activation(b.mlp.act))
                       for b, mods in zip(self.inner.h, linears)]
        self.lm_head = _Linear([model.lm_head], self.packed)
        self.wte, self.wpe, self.ln_f = self.inner.wte.weight, self.inner.wpe.weight, _ln(self.inner.ln_f)

    def new_cache(self, dtype, device) -> LeanKV:
        return LeanKV(len(self.blocks), self.kv_heads, self.head_dim, dtype, device)

    def __call__(self, ids: torch.Tensor, kv: LeanKV, n_logits: int, tree: TreeLayout | None = None) -> torch.Tensor:
        n, hd, heads = ids.shape[0], self.head_dim, self.heads
        start = kv.length
        end = start + n
        kv.reserve(end)
        wpe = self.wpe
        x = torch.embedding(self.wte, ids) + (wpe[start:end] if tree is None else wpe[start + tree.depths])
        self.positions.ensure(end, x.dtype, x.device)
        mask = self.positions.mask(start, n, ids.device, tree)
        for i, b in enumerate(self.blocks):
            qkv = b.c_attn(_layer_norm(x, b.ln_1))
            if self.mq:
                q = qkv[:, :self.embed].view(n, heads, hd)
                kv.slots[i][start:end] = qkv[:, self.embed:].view(n, 2, 1, hd)
            else:
                per_head = qkv.view(n, heads, 3, hd)
                q = per_head[:, :, 0]
                kv.slots[i][start:end] = per_head[:, :, 1:].transpose(1, 2)
            x = b.attn_proj.add_to(x, _attend(q, kv, i, end, mask, self.scale))
            x = b.mlp_proj.add_to(x, b.act(b.c_fc(_layer_norm(x, b.ln_2))))
        kv.length = end
        return self.lm_head(_layer_norm(x[-n_logits:], self.ln_f))


LeanModel = LeanLlama | LeanBigCode


def lean_unsupported(model) -> str | None:
    """Why `model` cannot run a lean forward, or None when it can. The lean classes read the
    module layout of these transformers classes, so the check is on the class itself."""
    if getattr(model, "hf_device_map", None):
        return "the model is split across devices (device_map)"
    cfg = model.config
    if isinstance(model, (LlamaForCausalLM, Qwen2ForCausalLM)):
        if getattr(cfg, "use_sliding_window", False):
            return "sliding-window attention"
        if getattr(cfg, "mlp_bias", False):
            return "MLP biases"
        rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
        rope_type = rope.get("rope_type", "default") if isinstance(rope, dict) else "default"
        if rope_type not in ("default", "linear", "llama3"):
            return f"rope type {rope_type!r} (dynamic scalings change inv_freq with length)"
        return None
    if isinstance(model, GPTBigCodeForCausalLM):
        return None
    return f"no lean forward for {type(model).__name__}"


def make_lean(model, pack_max_bytes: int = PACK_MAX_BYTES) -> LeanModel | None:
    """A lean forward for `model`, or None (logged with the reason) when it is not covered.
    The lean forward packs copies of the weights when they take at most `pack_max_bytes`
    (0: never; it then reads the model's own weights)."""
    reason = lean_unsupported(model)
    if reason is not None:
        log.info("%s runs the transformers forward, not the lean one: %s", type(model).__name__, reason)
        return None
    if isinstance(model, GPTBigCodeForCausalLM):
        return LeanBigCode(model, pack_max_bytes)
    return LeanLlama(model, pack_max_bytes)


def _float_rows(logits: torch.Tensor) -> torch.Tensor:
    """Logits as float32 rows in memory order (a wide packed matmul returns them transposed)."""
    if logits.dtype == torch.float32 and logits.is_contiguous():
        return logits
    return logits.float().contiguous()


class LeanForward:
    """A lean model and its preallocated cache: one of the two forwards a KV session runs
    (engine/kv.py has the other one and their interface, `Forward`)."""

    supports_tree = True

    def __init__(self, lean: LeanModel, dtype: torch.dtype, device: torch.device):
        self.lean = lean
        self.dtype, self.device = dtype, device
        self.cache: LeanKV | None = None
        self.tree_root = 0    # where the last tree pass put its root
        # Every id once, on the device: a one-token step takes a slice of it instead of building
        # a tensor from a list (and, on a GPU, copying it from the host).
        self.token_ids = torch.arange(lean.model.get_input_embeddings().weight.shape[0], device=device)

    def _ids(self, new_ids: list[int]) -> torch.Tensor:
        if len(new_ids) == 1 and 0 <= new_ids[0] < len(self.token_ids):
            return self.token_ids[new_ids[0]:new_ids[0] + 1]
        return torch.tensor(new_ids, dtype=torch.long, device=self.device)

    def __call__(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        if self.cache is None:
            self.cache = self.lean.new_cache(self.dtype, self.device)
        return _float_rows(self.lean(self._ids(new_ids), self.cache, n_logits))

    def tree(self, new_ids: list[int], depths: list[int], ancestors: torch.Tensor) -> torch.Tensor:
        if self.cache is None:
            self.cache = self.lean.new_cache(self.dtype, self.device)
        x = torch.tensor(new_ids, dtype=torch.long, device=self.device)
        layout = TreeLayout(torch.tensor(depths, dtype=torch.long, device=self.device), ancestors.to(self.device))
        self.tree_root = self.cache.length
        logits = _float_rows(self.lean(x, self.cache, len(new_ids), layout))
        self.cache.length = self.tree_root + 1    # the root; keep_path brings back the accepted nodes
        return logits

    def keep_path(self, nodes: list[int]) -> None:
        root = self.tree_root
        self.cache.keep(root + 1, [root + i for i in nodes])

    def crop(self, length: int) -> None:
        self.cache.length = length   # the next call overwrites what lies past `length`

    def reset(self) -> None:
        self.cache = None
