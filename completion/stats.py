"""Counters of the completion pipeline, and the one percentile helper the project uses."""
from __future__ import annotations

from collections import OrderedDict, deque
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
    round_tokens: int = 0          # tokens those calls made (a first token from the prefill's pass is not)
    prefill_tokens: int = 0
    reused_tokens: int = 0
    draft_prefill_tokens: int = 0
    draft_reused_tokens: int = 0
    prompt_tokens: int = 0
    prompt_shared_tokens: int = 0  # longest common prefix with the previous prompt of the document
    background_runs: int = 0       # model runs for no request (prefetch): not in requests or latencies
    background_cancelled: int = 0  # of those, stopped mid-decode (a request came elsewhere)
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))
    model_latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))

    def add_model_run(self, run: dict, latency_ms: float, background: bool = False) -> None:
        """Count one model run from its stats (the dict a Completion carries). A background run's
        tokens count (the draft acceptance is the engine's), its latency and cancellation do not."""
        if background:
            self.background_runs += 1
            self.background_cancelled += run["stop_reason"] == "cancelled"
        else:
            self.model_requests += 1
            self.model_latencies_ms.append(latency_ms)
            self.cancelled += run["stop_reason"] == "cancelled"
        self.drafted += run["drafted"]
        self.accepted += run["accepted"]
        self.new_tokens += run["new_tokens"]
        self.shown_tokens += run["shown_tokens"]
        self.decode_calls += run["rounds"]   # one target forward per round; prefill excluded
        self.round_tokens += run["new_tokens"] - run.get("first_from_prefill", 0)
        self.prefill_tokens += run["prefill_tokens"]
        self.reused_tokens += run["reused_tokens"]
        self.draft_prefill_tokens += run["draft_prefill_tokens"]
        self.draft_reused_tokens += run["draft_reused_tokens"]
        self.prompt_tokens += run["prompt_tokens"]
        self.prompt_shared_tokens += run["prompt_shared_tokens"]

    def summary(self) -> dict:
        return {
            "requests": self.requests, "shown": self.shown, "empty": self.empty,
            "background_runs": self.background_runs, "background_cancelled": self.background_cancelled,
            "cancelled": self.cancelled, "cache_hits": self.cache_hits,
            "typed_through": self.typed_through, "cache_hit_rate": _ratio(self.cache_hits, self.requests),
            "latency_ms": _percentiles(self.latencies_ms),
            "model_latency_ms": _percentiles(self.model_latencies_ms),
            "acceptance_rate": _ratio(self.accepted, self.drafted),
            "tokens_per_target_call": _ratio(self.round_tokens, self.decode_calls),
            "decoded_per_shown_token": _ratio(self.new_tokens, self.shown_tokens),
            "kv_reuse": _ratio(self.reused_tokens, self.reused_tokens + self.prefill_tokens),
            "draft_kv_reuse": _ratio(self.draft_reused_tokens, self.draft_reused_tokens + self.draft_prefill_tokens),
            "prompt_reuse": _ratio(self.prompt_shared_tokens, self.prompt_tokens),
            "drafted": self.drafted, "accepted": self.accepted, "new_tokens": self.new_tokens,
            "decoded_tokens": self.new_tokens, "shown_tokens": self.shown_tokens,
            "prefill_tokens": self.prefill_tokens, "reused_tokens": self.reused_tokens,
        }


# ---------------------------------------------------------------- what the user did with them

@dataclass
class _Offer:
    length: int                # characters (code points) of the suggestion as the server sent it
    state: str = "offered"     # offered | shown | dismissed | partly | fully
    accepted: int = 0          # characters the user took, at most `length`


_COUNTED = {"shown": "pending", "dismissed": "dismissed", "partly": "accepted_partly",
            "fully": "accepted_fully"}


@dataclass
class UserAcceptance:
    """What users did with the suggestions their editor showed, as the editor reports it
    (specfill/shown, specfill/accepted or the item's accept command, specfill/dismissed).

    Not the draft-token acceptance of speculative decoding (PipelineStats.acceptance_rate),
    which counts how many drafted tokens the target model kept. Each suggestion counts once,
    in its latest state: shown and still on screen (pending), dismissed, accepted partly,
    accepted fully (its last character inserted). Nothing here leaves the machine."""

    max_offers: int = 4096                 # suggestions remembered for later reports
    pending: int = 0
    dismissed: int = 0
    accepted_partly: int = 0
    accepted_fully: int = 0
    shown_chars: int = 0
    accepted_chars: int = 0
    unknown_reports: int = 0               # reports about ids the server never sent (or forgot)
    _offers: "OrderedDict[int, _Offer]" = field(default_factory=OrderedDict)
    _next_id: int = 1

    def offer(self, length: int) -> int:
        """A suggestion of `length` characters goes to the editor: its id for the reports."""
        sid = self._next_id
        self._next_id += 1
        self._offers[sid] = _Offer(length=length)
        while len(self._offers) > self.max_offers:
            self._offers.popitem(last=False)
        return sid

    def _get(self, sid: int) -> _Offer | None:
        offer = self._offers.get(sid)
        if offer is None:
            self.unknown_reports += 1
        return offer

    def _move(self, offer: _Offer, state: str) -> None:
        if offer.state == "offered":
            self.shown_chars += offer.length
        else:
            setattr(self, _COUNTED[offer.state], getattr(self, _COUNTED[offer.state]) - 1)
        offer.state = state
        setattr(self, _COUNTED[state], getattr(self, _COUNTED[state]) + 1)

    def on_shown(self, sid: int) -> bool:
        offer = self._get(sid)
        if offer is None:
            return False
        if offer.state == "offered":
            self._move(offer, "shown")
        return True

    def on_accepted(self, sid: int, length: int, full: bool) -> bool:
        """The user inserted the suggestion's first `length` characters (in all, so far);
        `full`: up to its end. A report that takes less than an earlier one changes nothing."""
        offer = self._get(sid)
        if offer is None:
            return False
        length = max(0, min(length, offer.length))
        if full:
            length = offer.length
        if length > offer.accepted:
            self.accepted_chars += length - offer.accepted
            offer.accepted = length
        if offer.accepted >= offer.length:
            state = "fully"
        elif offer.accepted > 0:
            state = "partly"
        else:
            state = "shown" if offer.state == "offered" else offer.state
        if state != offer.state:
            self._move(offer, state)
        return True

    def on_dismissed(self, sid: int) -> bool:
        """The suggestion went away unused (a dismiss key, other typing, leaving insert mode).
        After a partial accept the suggestion stays counted as partly accepted."""
        offer = self._get(sid)
        if offer is None:
            return False
        if offer.state in ("offered", "shown"):
            self._move(offer, "dismissed")
        return True

    def summary(self) -> dict:
        shown = self.pending + self.dismissed + self.accepted_partly + self.accepted_fully
        accepted = self.accepted_partly + self.accepted_fully
        # "displayed", not "shown": the pipeline's `shown` counts answers with text, whether or
        # not an editor drew them; the rates say whose acceptance they are.
        return {
            "displayed": shown, "acceptedFully": self.accepted_fully,
            "acceptedPartly": self.accepted_partly, "dismissed": self.dismissed,
            "pending": self.pending, "userAcceptanceRate": _ratio(accepted, shown),
            "fullAcceptanceRate": _ratio(self.accepted_fully, shown),
            "displayedChars": self.shown_chars, "acceptedChars": self.accepted_chars,
            "charAcceptanceRate": _ratio(self.accepted_chars, self.shown_chars),
            "unknownReports": self.unknown_reports,
        }
