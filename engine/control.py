"""Which drafter, and how many tokens, each round: the choice that maximises expected new tokens
per millisecond, from acceptance and costs measured online.

For a draft of k tokens whose i-th token is accepted with probability p_i (given the ones
before it were), a round yields E[k] = 1 + p_1 + p_1 p_2 + ... + p_1...p_k tokens (the target
adds one of its own) and costs draft(k) + verify(k + 1) ms. With one acceptance rate a this is
the familiar (1 - a^(k+1)) / (1 - a). The controller keeps, per way of drafting, the acceptance
by draft position and the cost of one draft step (and for the draft model the cost of bringing
its cache up to the request's prompt, paid by the first round of a request that uses it), and
for the target the cost of verifying w tokens; each round it compares "no draft" (1 token for
verify(1)), every k of the draft model, and the prompt lookup's proposal cut to every length,
and takes the best rate. A drafter that
loses is probed again every PROBE_EVERY rounds, so the estimates follow the text, and a single
slow measurement (a page fault, another process) moves a cost estimate by a bounded step, so one
hiccup cannot shut drafting off for good.
"""
from __future__ import annotations

from dataclasses import dataclass, field

MAX_K = 16
PROBE_EVERY = 48        # rounds without a drafter before it is tried again
DECAY = 0.97            # weight of older rounds in the acceptance counts (follows the text)
COST_EMA = 0.1          # weight of a new cost measurement
MAX_JUMP = 4.0          # a cost measurement counts as at most this many times the current estimate
PRIOR_ROUNDS = 2.0      # pseudo-rounds behind the prior acceptance


def _ema(current: float | None, measured: float) -> float:
    """The first measurement is taken as it is; later ones move the estimate a bounded step."""
    if current is None:
        return measured
    if current > 0:
        measured = min(measured, MAX_JUMP * current)
    return current + COST_EMA * (measured - current)


@dataclass
class DrafterEstimate:
    """What the controller has measured of one way of drafting."""
    prior: float                       # acceptance assumed before anything is measured
    step_ms: float | None = None       # drafting cost per proposed token (None: not measured yet)
    begin_ms: float | None = None      # the draft model's prefill for a request (None: not measured yet)
    evaluated: list[float] = field(default_factory=lambda: [0.0] * MAX_K)
    accepted: list[float] = field(default_factory=lambda: [0.0] * MAX_K)
    rounds: int = 0

    def p(self, i: int) -> float:
        """Probability that draft token i is accepted, given that the ones before it were."""
        return (self.accepted[i] + self.prior * PRIOR_ROUNDS) / (self.evaluated[i] + PRIOR_ROUNDS)

    def expected_tokens(self, k: int) -> float:
        total, chain = 1.0, 1.0
        for i in range(k):
            chain *= self.p(i)
            total += chain
        return total

    def record(self, asked: int, drafted: int, accepted: int, draft_ms: float) -> None:
        """A round that asked for `asked` tokens, got `drafted` and had `accepted` of them
        accepted. Position i counts once every earlier one was accepted: a draft that stopped
        short (nothing to propose, low confidence) failed at the position where it stopped."""
        for i in range(MAX_K):
            self.evaluated[i] *= DECAY
            self.accepted[i] *= DECAY
        for i in range(min(asked, accepted + 1, MAX_K)):
            self.evaluated[i] += 1
            self.accepted[i] += i < accepted
        self.step_ms = _ema(self.step_ms, draft_ms / max(1, drafted))

    def record_begin(self, ms: float) -> None:
        self.begin_ms = _ema(self.begin_ms, ms)
        self.rounds += 1

    def summary(self) -> dict:
        ms = lambda v: None if v is None else round(v, 3)  # noqa: E731
        return {"acceptance_by_position": [round(self.p(i), 3) for i in range(8)],
                "step_ms": ms(self.step_ms), "begin_ms": ms(self.begin_ms), "rounds": self.rounds}


@dataclass
class VerifyCost:
    """The target's cost of scoring w tokens in one pass: width-1 cost plus a slope per extra token."""
    one_ms: float = 0.0
    per_token_ms: float = 0.0
    seen: bool = False

    def __call__(self, width: int) -> float:
        return self.one_ms + self.per_token_ms * (width - 1)

    def record(self, width: int, ms: float) -> None:
        if not self.seen:
            self.one_ms, self.per_token_ms, self.seen = ms, 0.05 * ms, True
        elif width == 1:
            self.one_ms = _ema(self.one_ms, ms)
        else:
            slope = max(0.0, (ms - self.one_ms) / (width - 1))
            self.per_token_ms = _ema(max(self.per_token_ms, 0.01 * self.one_ms), slope)


@dataclass
class Plan:
    drafter: str      # "none", "lookup" or "model"
    k: int            # tokens to draft (the lookup's proposal is cut to k)
    expected_rate: float   # expected new tokens per ms (0 before any cost is known)


@dataclass
class DraftController:
    """Kept by the Engine across requests: what worked on the last request is where the next starts."""
    lookup: DrafterEstimate = field(default_factory=lambda: DrafterEstimate(prior=0.5, step_ms=0.0))
    model: DrafterEstimate = field(default_factory=lambda: DrafterEstimate(prior=0.6))
    verify: VerifyCost = field(default_factory=VerifyCost)
    since_model: int = 0     # rounds since each drafter was last used (for probing)
    since_lookup: int = 0
    rounds: int = 0          # rounds measured, over all requests

    def plan(self, lookup_tokens: int, has_model: bool, max_k: int, model_ready: bool = True) -> Plan:
        """The best round given a lookup proposal of `lookup_tokens` (0: none), whether a draft
        model is there, and whether it has already begun this request (else its prefill is part
        of this round's cost)."""
        max_k = min(max_k, MAX_K)
        model_unmeasured = self.model.step_ms is None or self.model.begin_ms is None
        if has_model and max_k > 0 and model_unmeasured:   # measure the draft model once first
            return Plan("model", min(4, max_k), 0.0)
        if not self.verify.seen:    # no costs known yet: measure a round first
            return Plan("lookup", min(lookup_tokens, max_k), 0.0) if lookup_tokens else Plan("none", 0, 0.0)
        best = Plan("none", 0, 1.0 / max(self.verify(1), 1e-6))
        for k in range(1, min(lookup_tokens, max_k) + 1):
            rate = self.lookup.expected_tokens(k) / max(self.verify(k + 1), 1e-6)
            if rate > best.expected_rate or (self.since_lookup >= PROBE_EVERY and best.drafter == "none"):
                best = Plan("lookup", k, rate)
        best_model = None
        if has_model:
            begin = 0.0 if model_ready else self.model.begin_ms
            for k in range(1, max_k + 1):
                cost = begin + k * self.model.step_ms + self.verify(k + 1)
                rate = self.model.expected_tokens(k) / max(cost, 1e-6)
                if best_model is None or rate > best_model.expected_rate:
                    best_model = Plan("model", k, rate)
            if best_model.expected_rate > best.expected_rate or self.since_model >= PROBE_EVERY:
                best = best_model
        return best

    def record(self, plan: Plan, drafted: int, accepted: int, draft_ms: float, verify_ms: float,
               begin_ms: float | None = None) -> None:
        """What a round of `plan` gave: `drafted` tokens verified, `accepted` of them; `begin_ms`
        when the round began the draft model for its request."""
        self.rounds += 1
        self.verify.record(drafted + 1, verify_ms)
        if begin_ms is not None:
            self.model.record_begin(begin_ms)
        self.since_model = 0 if plan.drafter == "model" else self.since_model + 1
        self.since_lookup = 0 if plan.drafter == "lookup" else self.since_lookup + 1
        if plan.drafter == "model":
            self.model.record(plan.k, drafted, accepted, draft_ms)
        elif plan.drafter == "lookup":
            self.lookup.record(plan.k, drafted, accepted, draft_ms)

    def summary(self) -> dict:
        return {"rounds": self.rounds, "verify_ms": {"width_1": round(self.verify(1), 3), "per_extra_token": round(self.verify.per_token_ms, 3)},
                "lookup": self.lookup.summary(), "model": self.model.summary()}
