"""KV sessions: a model's cache that lives across requests.

A session remembers which token ids its cache holds. A new request finds the longest common
prefix with them, crops the cache back to it and computes only the rest, so an edit near
the end of a prompt costs only the tokens after the edit. A pool keeps a few sessions per
model (say, one per open document) within a fixed token budget.
"""
from __future__ import annotations

import time

import torch
from transformers import DynamicCache

from .lean import make_lean


class ContextTooLong(ValueError):
    pass


def model_max_positions(model) -> int | None:
    cfg = model.config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # binary search on equal slices: C-speed compares instead of a Python loop
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class KVSession:
    def __init__(self, model: torch.nn.Module, max_tokens: int, lean: bool = True):
        self.model = model
        positions = model_max_positions(model)
        self.max_tokens = min(max_tokens, positions) if positions else max_tokens
        param = next(model.parameters())
        self.device = param.device
        self.ids: list[int] = []
        self.cache = None  # a LeanKV with the lean forward, else a transformers DynamicCache
        self.lean = make_lean(model) if lean and not getattr(model, "hf_device_map", None) else None
        self.dtype = param.dtype
        self.last_used = time.monotonic()
        self.forward_calls = 0
        self.forward_ms = 0.0   # time inside the model, to separate it from engine overhead

    def crop(self, keep: int) -> None:
        if keep >= len(self.ids):
            return
        if keep <= 0 or self.cache is None:
            self.ids, self.cache = [], None
        elif self.lean is not None:
            self.cache.length = keep
            del self.ids[keep:]
        else:
            self.cache.crop(keep - len(self.ids))
            del self.ids[keep:]

    def _forward(self, new_ids: list[int], logits_to_keep: int) -> torch.Tensor:
        if len(self.ids) + len(new_ids) > self.max_tokens:
            raise ContextTooLong(
                f"{len(self.ids) + len(new_ids)} tokens exceed the limit of {self.max_tokens} "
                "(the model's context or the KV session budget)")
        t0 = time.perf_counter()
        with torch.inference_mode():
            logits = self._run(new_ids, logits_to_keep)
        self.ids.extend(new_ids)
        self.forward_calls += 1
        self.forward_ms += (time.perf_counter() - t0) * 1000
        return logits

    def _run(self, new_ids: list[int], logits_to_keep: int) -> torch.Tensor:
        if self.lean is not None:
            if self.cache is None:
                self.cache = self.lean.new_cache(self.dtype, self.device)
            x = torch.tensor(new_ids, dtype=torch.long, device=self.device)
            logits = self.lean(x, self.cache, min(logits_to_keep, len(new_ids))).float()
        else:
            if self.cache is None:
                self.cache = DynamicCache()
            x = torch.tensor([new_ids], dtype=torch.long, device=self.device)
            out = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=logits_to_keep)
            self.cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            logits = out.logits[0].float()
        return logits

    def sync(self, ids: list[int]) -> tuple[int, int]:
        """Make the cache hold exactly `ids`. Returns (reused, computed) token counts."""
        self.last_used = time.monotonic()
        keep = common_prefix_len(self.ids, ids)
        self.crop(keep)
        if keep < len(ids):
            self._forward(ids[keep:], logits_to_keep=1)
        return keep, len(ids) - keep

    def advance(self, ids: list[int], n_logits: int = 1) -> torch.Tensor:
        """Make the cache hold `ids` and return logits [n_logits, vocab] for its last
        n_logits positions (logits[i] predicts the token after ids[len(ids)-n_logits+i]).
        At least those positions are recomputed."""
        self.last_used = time.monotonic()
        n = len(self.ids)
        if not (n <= len(ids) - n_logits and self.ids == ids[:n]):
            self.crop(min(common_prefix_len(self.ids, ids), len(ids) - n_logits))
        return self._forward(ids[len(self.ids):], logits_to_keep=n_logits)


class KVPool:
    """A few KV sessions for one model; a request goes to the one sharing most of its prompt."""

    def __init__(self, model: torch.nn.Module, max_sessions: int = 4, max_tokens: int = 4096, lean: bool = True):
        self.model = model
        self.lean = lean
        self.max_sessions = max(1, max_sessions)
        self.max_tokens = max_tokens
        self.sessions: list[KVSession] = []

    def session_for(self, ids: list[int]) -> KVSession:
        best, best_len = None, -1
        for s in self.sessions:
            n = common_prefix_len(s.ids, ids)
            if n > best_len:
                best, best_len = s, n
        # Reuse a session when it shares a real part of the prompt; otherwise keep it for
        # its own document and take a fresh one (or the least recently used when full).
        if best is not None and best_len >= max(1, min(len(ids), len(best.ids)) // 2):
            return best
        if len(self.sessions) < self.max_sessions:
            s = KVSession(self.model, self.max_tokens, self.lean)
            self.sessions.append(s)
            return s
        return min(self.sessions, key=lambda s: s.last_used)

    def clear(self) -> None:
        self.sessions.clear()

    def cached_tokens(self) -> int:
        return sum(len(s.ids) for s in self.sessions)
