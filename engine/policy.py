"""What each round verifies: the chain, and how long, that gives the most new tokens per
millisecond by what the engine has measured so far.

A chain of k tokens whose i-th is accepted with probability p_i (given the ones before it were)
yields E(k) = 1 + p_1 + p_1 p_2 + ... + p_1...p_k tokens (the target adds one of its own) and costs
draft(k) + verify(k + 1) ms. Each round weighs no draft (1 token for verify(1)), each free proposal
(prompt lookup, the datastore, a copy: found before the plan, any prefix of it) and the draft model
at every k, and takes the best rate.

What it measures:
- acceptance by position (`Acceptance`): the draft model's, and a free drafter's per source and
  bucket of match length (`key`). Unmeasured, a proposal that followed m matched ids is trusted
  m / (m + 1) at every position (the rule of succession), the draft model MODEL_PRIOR. Free
  proposals are scored every round against what the target wrote, verified or not.
- verify(w), the target's cost to score w tokens in one pass (`VerifyCost`);
- the draft model's prefill (paid by the first round of a request that uses it), its first pass
  of a round (which catches up on the text written without it) and its further steps. It drafts
  once before anything is known of it, and again every PROBE_EVERY rounds it sits out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .drafters import Draft
from .kv import common_prefix_len
from .settings import MAX_COPY_LENGTH, MAX_DRAFT_LENGTH

PROBE_EVERY = 64      # rounds without the draft model before it drafts again
DECAY = 0.97          # weight of an estimate's older observations (it follows the text)
PRIOR_WEIGHT = 2.0    # observations the prior acceptance counts as
MODEL_PRIOR = 0.5     # a draft model's acceptance before it is measured
RATE = 0.1            # weight of a new cost measurement, once 1 / RATE have been averaged
MAX_JUMP = 4.0        # a cost measurement counts as at most this many times the estimate
PER_DOUBLING = 0.25   # VerifyCost's prior: each doubling of the width costs this share of verify(1) more
CLIP = 1.0            # VerifyCost: a measurement's error counts as at most this many typical errors
SPREAD_FLOOR = 0.05   # ... the typical error taken as at least this share of the fit
_LOG2 = [0.0] + [math.log2(w) for w in range(1, max(MAX_COPY_LENGTH, MAX_DRAFT_LENGTH) + 2)]   # widths of a pass


def bucket(match: int) -> int:
    """The fewest matched ids of a proposal's bucket: 1, 2 (2-3), 4 (4-7), 8 (8-15) or 16 (16+);
    0 for a proposal not found by matching."""
    return 1 << min(4, match.bit_length() - 1) if match > 0 else 0


def key(drafter: str, draft: Draft | None = None) -> str:
    """The estimate a proposal is judged by: its drafter's, and for proposals found by matching,
    per source and bucket of match length."""
    low = bucket(draft.match) if draft is not None else 0
    if not low:
        return drafter
    source = f" {draft.source}" if draft.source != drafter else ""
    return f"{drafter}{source} {'1' if low == 1 else '16+' if low == 16 else f'{low}-{2 * low - 1}'}"


@dataclass
class Acceptance:
    """p_i for draft positions i = 0, 1, ...: how often a chain that reached position i had its
    token accepted, older observations fading (DECAY), shrunk towards the position before (the
    first: towards `prior`): a later position is reached less often. Positions are counted up to
    MAX_DRAFT_LENGTH, or as far as a longer chain reached (a copy's); past them p is the last one's."""
    prior: float
    evaluated: list[float] = field(default_factory=lambda: [0.0] * MAX_DRAFT_LENGTH)
    accepted: list[float] = field(default_factory=lambda: [0.0] * MAX_DRAFT_LENGTH)
    _reach: list[float] | None = field(default=None, repr=False)
    _last: float = field(default=0.0, repr=False)     # p at the last position counted

    def observe(self, reached: int, accepted: int) -> None:
        """A chain reached positions 0 .. reached - 1 and had its first `accepted` accepted."""
        for more in (self.evaluated, self.accepted):
            more.extend([0.0] * (reached - len(more)))
        for i in range(len(self.evaluated)):
            self.evaluated[i] = self.evaluated[i] * DECAY + (i < reached)
            self.accepted[i] = self.accepted[i] * DECAY + (i < min(accepted, reached))
        self._reach = None

    def reach(self, n: int = MAX_DRAFT_LENGTH) -> list[float]:
        """R[i] = P(a chain's first i tokens are accepted), i = 0 .. n (or more): 1, p_1, p_1 p_2, ..."""
        if self._reach is None:
            out, p = [1.0], self.prior
            for a, e in zip(self.accepted, self.evaluated):
                p = (a + p * PRIOR_WEIGHT) / (e + PRIOR_WEIGHT)
                out.append(out[-1] * p)
            self._reach, self._last = out, p
        while len(self._reach) <= n:
            self._reach.append(self._reach[-1] * self._last)
        return self._reach

    def by_position(self, n: int = 8) -> list[float]:
        r = self.reach()
        return [round(r[i + 1] / r[i], 3) if r[i] else 0.0 for i in range(n)]


@dataclass
class Mean:
    """A cost estimate: the mean of the first 1 / RATE measurements, then an average that follows
    them at RATE; a measurement counts as at most MAX_JUMP times the estimate (a page fault,
    another process)."""
    value: float | None = None
    n: int = 0

    def observe(self, ms: float) -> None:
        if self.value is not None and self.value > 0:
            ms = min(ms, MAX_JUMP * self.value)
        self.n += 1
        self.value = ms if self.value is None else self.value + (ms - self.value) / min(self.n, 1 / RATE)


@dataclass
class VerifyCost:
    """verify(w) = one + two x [w >= 2] + per_doubling x log2(w) + per_token x (w - 1): the target's
    ms to score w tokens in one pass, fitted online to every round's measurement. The terms are the
    shapes a forward's cost takes, in proportions that differ by model and precision: a pass of one
    token runs matrix-vector products and two take the slower small-matrix path (`two`); from there
    a small model's pass grows by doublings (masks, gathers), a large one's by the token.

    Round times are skewed (a page fault, another process): each measurement moves the fit by its
    error clipped to CLIP typical errors (a Huber fit, which follows the typical round), shared
    between the terms by what each contributes at that width (a normalised least-mean-squares
    step: the fit's error there shrinks by RATE). Every round moves the whole curve, so no width
    keeps a price it once had while the policy avoids it. Before the first measurement the curve
    is relative (verify(1) = 1, PER_DOUBLING more per doubling); the first scales it, and the
    prior leans cheap: a width priced too cheap is tried and corrected."""
    one: float = 1.0
    two: float = 0.0
    per_doubling: float = PER_DOUBLING
    per_token: float = 0.0
    spread: float = 0.0      # typical |error| of one measurement against the fit
    n: int = 0               # measurements so far

    def __call__(self, width: int) -> float:
        return self.one + (width >= 2) * self.two + self.per_doubling * _LOG2[width] + self.per_token * (width - 1)

    def widths(self, n: int) -> list[float]:
        """verify(w) for w = 0 .. n - 1 (w = 0 priced as 1), each at least 1e-6."""
        return [max(1e-6, self(max(1, w))) for w in range(n)]

    @property
    def seen(self) -> bool:
        return self.n > 0

    def observe(self, width: int, ms: float) -> None:
        self.n += 1
        if self.n == 1:
            scale = ms / self(width)
            self.one, self.two, self.per_doubling, self.per_token = (
                v * scale for v in (self.one, self.two, self.per_doubling, self.per_token))
            self.spread = 0.5 * ms      # wide at first: the first measurements move the fit far
            return
        x = (1.0, float(width >= 2), _LOG2[width], width - 1.0)
        predicted = self(width)
        error = ms - predicted
        # the spread follows the errors, a far one counting as at most 2 spreads; it never falls
        # below SPREAD_FLOOR of the fit, so a steady machine that turns slower is still followed
        rate = max(RATE, 1 / self.n)
        spread = max(self.spread, SPREAD_FLOOR * predicted)
        self.spread = spread + rate * (min(abs(error), 2 * spread) - spread)
        step = rate * max(-CLIP * spread, min(CLIP * spread, error)) / sum(v * v for v in x)
        self.one, self.two, self.per_doubling, self.per_token = (
            max(0.0, c + step * v) for c, v in zip((self.one, self.two, self.per_doubling, self.per_token), x))


@dataclass(frozen=True)
class Plan:
    chain: tuple[str, int] | None = None   # (drafter, tokens) of the chain verified, or None: no draft
    rate: float = 0.0                       # expected new tokens per ms
    probe: bool = False                     # the draft model measured again, not expected to pay


def _sums(reach: list[float]) -> list[float]:
    """S[k] = R[1] + ... + R[k]: a chain of k tokens yields 1 + S[k]."""
    out = [0.0]
    for r in reach[1:]:
        out.append(out[-1] + r)
    return out


@dataclass
class Policy:
    """Kept by the Engine across requests: what was measured on one request is where the next starts."""
    acceptance: dict = field(default_factory=dict)     # key -> Acceptance
    verify: VerifyCost = field(default_factory=VerifyCost)
    model_begin: Mean = field(default_factory=Mean)    # the draft model's prefill for a request
    model_first: Mean = field(default_factory=Mean)    # its first pass of a round
    model_step: Mean = field(default_factory=Mean)     # each further pass
    since_model: int = 0
    rounds: int = 0
    frozen: bool = False     # estimates given by hand, not measured: reproducible plans (tests)

    def estimate(self, drafter: str, draft: Draft | None = None) -> Acceptance:
        """The acceptance `draft` of `drafter` is judged by (`key`)."""
        name = key(drafter, draft)
        found = self.acceptance.get(name)
        if found is None:
            low = bucket(draft.match) if draft is not None else 0
            found = self.acceptance[name] = Acceptance(low / (low + 1) if low else MODEL_PRIOR)
        return found

    def plan(self, offers: dict[str, Draft], model: bool, model_ready: bool, max_k: int) -> Plan:
        """The best round given the free proposals (`offers`, by drafter), whether there is a draft
        model and whether it has begun this request (else its prefill is this round's)."""
        if max_k <= 0:
            return Plan()
        v = self.verify.widths(2 + max([max_k, *(len(d.tokens) for d in offers.values())]))
        best = Plan(None, 1 / v[1])
        for name, draft in offers.items():
            n = len(draft.tokens)
            if n:
                sums = _sums(self.estimate(name, draft).reach(n)[:n + 1])
                rate = lambda k: (1 + sums[k]) / v[k + 1]  # noqa: E731
                k = max(range(1, n + 1), key=rate)
                if rate(k) > best.rate:
                    best = Plan((name, k), rate(k))
        if not model:
            return best
        if self.model_first.value is None:       # measure the draft model once first
            return Plan(("model", min(4, max_k)), 0.0, probe=True)
        fixed = (0.0 if model_ready else self.model_begin.value or 0.0) + self.model_first.value
        step = self.model_step.value if self.model_step.value is not None else self.model_first.value
        sums = _sums(self.estimate("model").reach()[:max_k + 1])
        rate = lambda k: (1 + sums[k]) / (fixed + (k - 1) * step + v[k + 1])  # noqa: E731
        k = max(range(1, max_k + 1), key=rate)
        if rate(k) > best.rate:
            return Plan(("model", k), rate(k))
        return Plan(("model", k), rate(k), probe=True) if self.since_model >= PROBE_EVERY else best

    @staticmethod
    def plan_fixed(offers: dict[str, Draft], model: bool, k: int) -> Plan:
        """A fixed draft length: the free proposal that matched most when it has k tokens (or
        there is no draft model), else the draft model's k."""
        found = [(d.match, -i, name, len(d.tokens)) for i, (name, d) in enumerate(offers.items()) if d.tokens]
        if k > 0 and found:      # (among equal matches the first drafter's: prompt lookup's)
            *_, name, n = max(found)
            if n >= k or not model:
                return Plan((name, min(k, n)))
        return Plan(("model", k)) if model and k > 0 else Plan()

    def observe_free(self, name: str, draft: Draft, written: list[int]) -> int:
        """A free proposal against what the round wrote; returns how many of its tokens agreed."""
        agreed = common_prefix_len(draft.tokens, written)
        if draft.tokens and not self.frozen:
            self.estimate(name, draft).observe(min(len(draft.tokens), len(written)), agreed)
        return agreed

    def observe_model(self, asked: int, accepted: int, draft: Draft, ms: float, begin_ms: float | None) -> None:
        """A draft model's chain of `asked` tokens had `accepted` accepted; its proposal took `ms`,
        after its prefill for the request (`begin_ms`) where this round began it."""
        if self.frozen:
            return
        self.estimate("model").observe(min(asked, accepted + 1), accepted)
        if begin_ms is not None:
            self.model_begin.observe(begin_ms)
        if draft.passes:
            self.model_first.observe(draft.first_ms)
        if draft.passes > 1:
            self.model_step.observe((ms - draft.first_ms) / (draft.passes - 1))

    def observe_pass(self, width: int, ms: float) -> None:
        """The target scored `width` tokens in `ms`."""
        if not self.frozen:
            self.verify.observe(width, ms)

    def count(self, plan: Plan) -> None:
        self.rounds += 1
        self.since_model = 0 if plan.chain is not None and plan.chain[0] == "model" else self.since_model + 1

    def summary(self) -> dict:
        ms = lambda m: None if m.value is None else round(m.value, 3)  # noqa: E731
        return {"rounds": self.rounds, "since_model": self.since_model,
                "verify_ms": {str(w): round(self.verify(w), 3) for w in (1, 2, 4, 8, 16, 32)},
                "model": {"begin_ms": ms(self.model_begin), "first_ms": ms(self.model_first),
                          "step_ms": ms(self.model_step)},
                "acceptance": {name: est.by_position() for name, est in self.acceptance.items()}}
