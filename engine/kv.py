"""KV sessions: a model's cache that lives across requests.

A session remembers which token ids its cache holds. A new request finds the longest common
prefix with them, crops the cache back to it and computes only the rest, so an edit near
the end of a prompt costs only the tokens after the edit. A pool keeps a few sessions per
model (say, one per open document) within one token budget for all of them: a session that
needs room takes it from the least recently used others (`KVPool.make_room`).

A session runs its model through one of the forwards in engine/forward/ (`Forward`): the lean
one where the architecture has one, else the transformers one.
"""
from __future__ import annotations

import logging
import time

import torch

from .forward.forwards import Forward, make_forward, model_max_positions
from .forward.lean import lean_for

log = logging.getLogger("specfill.engine")


class ContextTooLong(ValueError):
    pass


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
    def __init__(self, model: torch.nn.Module, max_tokens: int, forward: Forward | None = None,
                 pool: "KVPool | None" = None):
        """`forward` runs the model (default: the lean forward where the model has one); `pool`
        gives the session room within the budget it shares with the pool's other sessions."""
        self.model = model
        positions = model_max_positions(model)
        self.max_tokens = min(max_tokens, positions) if positions else max_tokens
        self.ids: list[int] = []   # the tokens the cache holds
        self.forward = forward if forward is not None else make_forward(model, lean_for(model), limit=self.max_tokens)
        self.pool = pool
        self.last_used = time.monotonic()
        self.forward_calls = 0
        self.forward_ms = 0.0   # time inside the model, to separate it from engine overhead

    def crop(self, length: int) -> None:
        """Keep the first `length` cached tokens."""
        if length >= len(self.ids):
            return
        if length <= 0:
            self.ids = []
            self.forward.reset()
        else:
            self.forward.crop(length)
            del self.ids[length:]

    def _room(self, total: int) -> None:
        """Room for `total` tokens, within the session's limit and the pool's budget."""
        if total > self.max_tokens:
            raise ContextTooLong(f"{total} tokens exceed the limit of {self.max_tokens} "
                                 "(the model's context or the KV session budget)")
        if self.pool is not None:
            self.pool.make_room(self, total)

    def _forward(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        self._room(len(self.ids) + len(new_ids))
        t0 = time.perf_counter()
        if torch.is_inference_mode_enabled():   # the engine's rounds already are: no nested mode
            logits = self.forward(new_ids, n_logits)
        else:
            with torch.inference_mode():
                logits = self.forward(new_ids, n_logits)
        self.ids.extend(new_ids)
        self.forward_calls += 1
        self.forward_ms += (time.perf_counter() - t0) * 1000
        return logits

    def sync(self, ids: list[int]) -> tuple[int, int]:
        """Make the cache hold exactly `ids`. Returns (reused, computed) token counts."""
        self.last_used = time.monotonic()
        reused = common_prefix_len(self.ids, ids)
        self.crop(reused)
        if reused < len(ids):
            self._forward(ids[reused:], n_logits=1)
        return reused, len(ids) - reused

    def append(self, new_ids: list[int], n_logits: int = 1) -> torch.Tensor:
        """`new_ids` after what the cache holds: advance(self.ids + new_ids) without comparing
        the whole sequence (a draft model's steps, one token after another)."""
        return self._forward(new_ids, n_logits)

    def advance(self, ids: list[int], n_logits: int = 1) -> torch.Tensor:
        """Make the cache hold `ids` and return logits [n_logits, vocab] for its last
        n_logits positions (logits[i] predicts the token after ids[len(ids)-n_logits+i]).
        At least those positions are recomputed."""
        self.last_used = time.monotonic()
        n = len(self.ids)
        if not (n <= len(ids) - n_logits and self.ids == ids[:n]):
            self.crop(min(common_prefix_len(self.ids, ids), len(ids) - n_logits))
        return self._forward(ids[len(self.ids):], n_logits)


class KVPool:
    """A few KV sessions for one model; a request goes to the one sharing most of its prompt.
    `max_tokens` is the budget of all of them together: the most tokens one session holds, and
    the most the pool's caches hold room for at once."""

    def __init__(self, model: torch.nn.Module, max_sessions: int = 4, max_tokens: int = 8192, lean: bool = True,
                 static: bool = False, cuda_graphs: bool = False, quantize: str = "none"):
        """`static`: the lean forward's static mode (StaticLeanForward), each session's cache
        reserved whole; `cuda_graphs`: that, replayed as CUDA graphs (on a CUDA model only:
        elsewhere the plain lean forward runs, with a warning); `quantize`: the lean forward's
        weights (engine/forward/quantize.py)."""
        self.model = model
        if quantize != "none" and not lean:
            raise ValueError(f"quantize {quantize!r} needs the lean forward")
        self.lean_model = lean_for(model, quantize) if lean else None   # decided (and logged) once per model
        self.max_sessions = max(1, max_sessions)
        self.max_tokens = max_tokens
        if cuda_graphs and next(model.parameters()).device.type != "cuda":
            log.warning("CUDA graphs need a CUDA device: %s runs the lean forward without them",
                        type(model).__name__)
            cuda_graphs = False
        self.cuda_graphs = cuda_graphs
        self.static = (static or cuda_graphs) and self.lean_model is not None
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
            capacity = None
            if self.static:
                positions = model_max_positions(self.model)
                capacity = min(self.max_tokens, positions) if positions else self.max_tokens
            forward = make_forward(self.model, self.lean_model, capacity, self.cuda_graphs, self.max_tokens)
            s = KVSession(self.model, self.max_tokens, forward, pool=self)
            self.sessions.append(s)
            return s
        return min(self.sessions, key=lambda s: s.last_used)

    def make_room(self, session: KVSession, total: int) -> None:
        """Before `session` grows to `total` tokens: drop the caches of the least recently used
        other sessions until all of them together fit the budget."""
        want = session.forward.held_after(total)
        others = sorted((s for s in self.sessions if s is not session and s.forward.held()),
                        key=lambda s: s.last_used)
        held = sum(s.forward.held() for s in others)
        for s in others:
            if held + want <= self.max_tokens:
                break
            held -= s.forward.held()
            s.crop(0)

    def held_tokens(self) -> int:
        """Tokens the sessions' caches hold room for, together."""
        return sum(s.forward.held() for s in self.sessions)

    def forward_ms(self) -> float:
        """Time inside the model's forward passes, over all sessions so far."""
        return sum(s.forward_ms for s in self.sessions)

    def clear(self) -> None:
        self.sessions.clear()

    def cached_tokens(self) -> int:
        return sum(len(s.ids) for s in self.sessions)
