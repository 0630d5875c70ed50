"""Lean forward passes for the architectures specfill runs most (Llama/Qwen2, GPTBigCode).

At completion-model sizes on a CPU, a transformers forward call spends most of its time in
framework overhead (config lookups, mask builders, output objects, a torch.cat per layer per
step to grow the cache). These functions run the same math on the model's own weights with a
preallocated KV cache, nanoGPT-style. Any other architecture, or an unusual config, falls back
to the transformers forward: `lean_unsupported` says why, and `make_lean` logs it and returns
None. Tests check both agree (allclose).
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from transformers import GPTBigCodeForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM

log = logging.getLogger("specfill.engine")


class LeanKV:
    """Per-layer key/value tensors [kv_heads, capacity, head_dim]; `length` tokens are valid."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype, device):
        self.shape = (layers, kv_heads, head_dim)
        self.dtype, self.device = dtype, device
        self.capacity = 0
        self.length = 0
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []

    def reserve(self, total: int) -> None:
        if total <= self.capacity:
            return
        cap = max(256, self.capacity)
        while cap < total:
            cap *= 2  # doubling: growth copies are rare, steps never copy
        layers, heads, hd = self.shape
        new = lambda: torch.zeros(heads, cap, hd, dtype=self.dtype, device=self.device)  # noqa: E731
        if not self.k:
            self.k = [new() for _ in range(layers)]
            self.v = [new() for _ in range(layers)]
        else:
            for i in range(layers):
                k, v = new(), new()
                k[:, :self.length] = self.k[i][:, :self.length]
                v[:, :self.length] = self.v[i][:, :self.length]
                self.k[i], self.v[i] = k, v
        self.capacity = cap


def _causal_mask(past: int, n: int, device) -> torch.Tensor | None:
    if n == 1:
        return None  # one new token may attend to everything before it
    rows = torch.arange(n, device=device)[:, None] + past
    cols = torch.arange(past + n, device=device)[None, :]
    return cols <= rows


def _attend(q, kv: LeanKV, layer: int, k, v, mask, scale):
    """q [heads, n, hd], k/v [kv_heads, n, hd]: write k/v at the cache tail, attend over all."""
    start, end = kv.length, kv.length + k.shape[1]
    kv.k[layer][:, start:end] = k
    kv.v[layer][:, start:end] = v
    keys, values = kv.k[layer][:, :end], kv.v[layer][:, :end]
    out = F.scaled_dot_product_attention(q[None], keys[None], values[None], attn_mask=mask, scale=scale,
                                         enable_gqa=q.shape[0] != keys.shape[0])
    return out[0].transpose(0, 1).reshape(q.shape[1], -1)


class LeanLlama:
    """Llama-family decoder (Llama, Qwen2): RMSNorm, rotary positions, grouped-query attention."""

    def __init__(self, model):
        cfg = model.config
        self.model = model
        self.inner = model.model
        self.heads = cfg.num_attention_heads
        self.kv_heads = getattr(cfg, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.eps = cfg.rms_norm_eps
        rot = self.inner.rotary_emb
        self.inv_freq = rot.inv_freq.float()
        self.rope_scale = float(getattr(rot, "attention_scaling", 1.0))
        self.act = self.inner.layers[0].mlp.act_fn

    def new_cache(self, dtype, device) -> LeanKV:
        return LeanKV(len(self.inner.layers), self.kv_heads, self.head_dim, dtype, device)

    def _norm(self, x, weight):
        xf = x.float()
        return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)

    def __call__(self, ids: torch.Tensor, kv: LeanKV, n_logits: int) -> torch.Tensor:
        n = ids.shape[0]
        kv.reserve(kv.length + n)
        x = self.inner.embed_tokens(ids)
        pos = torch.arange(kv.length, kv.length + n, device=ids.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * self.rope_scale).to(x.dtype)
        sin = (emb.sin() * self.rope_scale).to(x.dtype)
        mask = _causal_mask(kv.length, n, ids.device)
        half = self.head_dim // 2

        def rope(t):
            rotated = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
            return t * cos + rotated * sin

        for i, layer in enumerate(self.inner.layers):
            att = layer.self_attn
            h = self._norm(x, layer.input_layernorm.weight)
            q = rope(att.q_proj(h).view(n, self.heads, self.head_dim).transpose(0, 1))
            k = rope(att.k_proj(h).view(n, self.kv_heads, self.head_dim).transpose(0, 1))
            v = att.v_proj(h).view(n, self.kv_heads, self.head_dim).transpose(0, 1)
            x = x + att.o_proj(_attend(q, kv, i, k, v, mask, self.head_dim ** -0.5))
            h = self._norm(x, layer.post_attention_layernorm.weight)
            x = x + layer.mlp.down_proj(self.act(layer.mlp.gate_proj(h)) * layer.mlp.up_proj(h))
        kv.length += n
        return self.model.lm_head(self._norm(x[-n_logits:], self.inner.norm.weight))


class LeanBigCode:
    """GPTBigCode (StarCoder family): LayerNorm, learned positions, multi-query attention."""

    def __init__(self, model):
        cfg = model.config
        self.model = model
        self.inner = model.transformer
        self.heads = cfg.n_head
        self.embed = cfg.n_embd
        self.head_dim = self.embed // self.heads
        self.mq = cfg.multi_query
        self.kv_heads = 1 if self.mq else self.heads
        self.scale = self.head_dim ** -0.5 if cfg.scale_attn_weights else 1.0

    def new_cache(self, dtype, device) -> LeanKV:
        return LeanKV(len(self.inner.h), self.kv_heads, self.head_dim, dtype, device)

    def __call__(self, ids: torch.Tensor, kv: LeanKV, n_logits: int) -> torch.Tensor:
        n, hd = ids.shape[0], self.head_dim
        kv.reserve(kv.length + n)
        pos = torch.arange(kv.length, kv.length + n, device=ids.device)
        x = self.inner.wte(ids) + self.inner.wpe(pos)
        mask = _causal_mask(kv.length, n, ids.device)
        for i, block in enumerate(self.inner.h):
            qkv = block.attn.c_attn(block.ln_1(x))
            if self.mq:
                q = qkv[:, :self.embed].view(n, self.heads, hd).transpose(0, 1)
                k = qkv[:, self.embed:self.embed + hd][None]
                v = qkv[:, self.embed + hd:][None]
            else:
                q, k, v = qkv.view(n, self.heads, 3 * hd).transpose(0, 1).split(hd, dim=-1)
            x = x + block.attn.c_proj(_attend(q, kv, i, k, v, mask, self.scale))
            x = x + block.mlp.c_proj(block.mlp.act(block.mlp.c_fc(block.ln_2(x))))
        kv.length += n
        return self.model.lm_head(self.inner.ln_f(x[-n_logits:]))


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


def make_lean(model) -> LeanModel | None:
    """A lean forward for `model`, or None (logged with the reason) when it is not covered."""
    reason = lean_unsupported(model)
    if reason is not None:
        log.info("%s runs the transformers forward, not the lean one: %s", type(model).__name__, reason)
        return None
    if isinstance(model, GPTBigCodeForCausalLM):
        return LeanBigCode(model)
    return LeanLlama(model)


class LeanForward:
    """A lean model and its preallocated cache: one of the two forwards a KV session runs
    (engine/kv.py has the other one and their interface, `Forward`)."""

    def __init__(self, lean: LeanModel, dtype: torch.dtype, device: torch.device):
        self.lean = lean
        self.dtype, self.device = dtype, device
        self.cache: LeanKV | None = None

    def __call__(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        if self.cache is None:
            self.cache = self.lean.new_cache(self.dtype, self.device)
        x = torch.tensor(new_ids, dtype=torch.long, device=self.device)
        return self.lean(x, self.cache, n_logits).float()

    def crop(self, length: int) -> None:
        self.cache.length = length   # the next call overwrites what lies past `length`

    def reset(self) -> None:
        self.cache = None
