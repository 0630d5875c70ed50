"""Counters of the completion pipeline, and the one percentile helper the project uses."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


def percentile(values, q: float):
    """Linear-interpolated percentile (q in 0-100); None for no values."""
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _percentiles(values) -> dict:
    return {f"p{q}": (None if (p := percentile(values, q)) is None else round(p, 3)) for q in (50, 95, 99)}


def _ratio(a, b) -> float:
    return round(a / b, 4) if b else 0.0


@dataclass
class PipelineStats:
    requests: int = 0
    cache_hits: int = 0
    typed_through: int = 0
    shown: int = 0
    empty: int = 0
    cancelled: int = 0
    model_requests: int = 0
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0            # tokens the target decoded (all of them: decoded_tokens)
    shown_tokens: int = 0          # of those, the tokens behind the text that was shown
    decode_calls: int = 0          # target calls after prefill
    prefill_tokens: int = 0
    reused_tokens: int = 0
    draft_prefill_tokens: int = 0
    draft_reused_tokens: int = 0
    prompt_tokens: int = 0
    prompt_shared_tokens: int = 0  # longest common prefix with the previous prompt of the document
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))
    model_latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))

    def add_model_run(self, run: dict, latency_ms: float) -> None:
        """Count one model run from its stats (the dict a Completion carries)."""
        self.model_requests += 1
        self.model_latencies_ms.append(latency_ms)
        self.drafted += run["drafted"]
        self.accepted += run["accepted"]
        self.new_tokens += run["new_tokens"]
        self.shown_tokens += run["shown_tokens"]
        self.decode_calls += run["rounds"]   # one target forward per round; prefill excluded
        self.prefill_tokens += run["prefill_tokens"]
        self.reused_tokens += run["reused_tokens"]
        self.draft_prefill_tokens += run["draft_prefill_tokens"]
        self.draft_reused_tokens += run["draft_reused_tokens"]
        self.prompt_tokens += run["prompt_tokens"]
        self.prompt_shared_tokens += run["prompt_shared_tokens"]
        self.cancelled += run["stop_reason"] == "cancelled"

    def summary(self) -> dict:
        return {
            "requests": self.requests, "shown": self.shown, "empty": self.empty,
            "cancelled": self.cancelled, "cache_hits": self.cache_hits,
            "typed_through": self.typed_through, "cache_hit_rate": _ratio(self.cache_hits, self.requests),
            "latency_ms": _percentiles(self.latencies_ms),
            "model_latency_ms": _percentiles(self.model_latencies_ms),
            "acceptance_rate": _ratio(self.accepted, self.drafted),
            "tokens_per_target_call": _ratio(self.new_tokens, self.decode_calls),
            "decoded_per_shown_token": _ratio(self.new_tokens, self.shown_tokens),
            "kv_reuse": _ratio(self.reused_tokens, self.reused_tokens + self.prefill_tokens),
            "draft_kv_reuse": _ratio(self.draft_reused_tokens, self.draft_reused_tokens + self.draft_prefill_tokens),
            "prompt_reuse": _ratio(self.prompt_shared_tokens, self.prompt_tokens),
            "drafted": self.drafted, "accepted": self.accepted, "new_tokens": self.new_tokens,
            "decoded_tokens": self.new_tokens, "shown_tokens": self.shown_tokens,
            "prefill_tokens": self.prefill_tokens, "reused_tokens": self.reused_tokens,
        }
