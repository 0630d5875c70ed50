"""Turning logits into the distribution that is sampled from, and the verification rules.

Every rule here keeps the target's output exactly what it would be alone:
greedy accepts the longest prefix agreeing with the target's argmax; rejection sampling
(Leviathan et al. 2023) accepts x with min(1, p(x)/q(x)) and resamples from max(0, p - q);
sample-and-compare (for drafts without a usable q: n-grams, another vocabulary) samples
from p at each position and accepts the draft token only when it is the sampled one.
"""
from __future__ import annotations

import torch

# dtypes numpy reads as they are (bfloat16 it does not)
_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16)


def greedy_ids(logits: torch.Tensor) -> list[int]:
    """The argmax of each row of [n, V] logits (of a 1-D vector: a list of one). On the CPU
    through numpy: timed warm with one thread, torch's CPU argmax took ~10 us a row of the
    shipped target's 4,096 logits (150 us for a 17-token verify pass), numpy's ~0.5 us; right
    after a forward pass (cold caches) the gap is far smaller at narrow widths. Both take the
    first index of the maximum, a NaN counting as the maximum, so the choice is the same. A
    tensor that records gradients cannot be read by numpy: it stays on torch's path."""
    if logits.device.type == "cpu" and logits.dtype in _NUMPY_DTYPES and not logits.requires_grad:
        return logits.numpy().argmax(-1).reshape(-1).tolist()
    return logits.argmax(-1).reshape(-1).tolist()


def target_probs(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """[n, V] logits -> [n, V] probabilities after temperature, top-k and top-p."""
    logits = logits / max(temperature, 1e-6)
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest set whose mass reaches top_p (the token crossing it included)
        drop = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, gen: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=gen).item())


def verify_greedy(cand: list[int], logits: torch.Tensor) -> tuple[int, int]:
    """logits [len(cand)+1, V]. Returns (n accepted, the target's own next token)."""
    best = greedy_ids(logits)
    n = 0
    while n < len(cand) and cand[n] == best[n]:
        n += 1
    return n, best[n]


def verify_rejection(cand: list[int], q: torch.Tensor, p: torch.Tensor, gen) -> tuple[int, int]:
    """Standard speculative sampling. q [len(cand), V] draft probs, p [len(cand)+1, V]."""
    for i, x in enumerate(cand):
        px, qx = float(p[i, x]), float(q[i, x])
        u = float(torch.rand((), generator=gen))
        if qx > 0 and u < min(1.0, px / qx):
            continue
        residual = torch.clamp(p[i] - q[i], min=0.0)
        total = float(residual.sum())
        return i, sample(residual / total, gen) if total > 0 else sample(p[i], gen)
    return len(cand), sample(p[len(cand)], gen)


def verify_sample_compare(cand: list[int], p: torch.Tensor, gen) -> tuple[int, int]:
    """Lossless without draft probabilities: sample the target at each position in order."""
    for i, x in enumerate(cand):
        t = sample(p[i], gen)
        if t != x:
            return i, t
    return len(cand), sample(p[len(cand)], gen)
