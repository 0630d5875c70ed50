"""Which drafter, and how many tokens, each round: the choice that maximises expected new tokens
per millisecond, from acceptance and costs measured online.

For a draft of k tokens whose i-th token is accepted with probability p_i (given the ones
before it were), a round yields E[k] = 1 + p_1 + p_1 p_2 + ... + p_1...p_k tokens (the target
adds one of its own) and costs draft(k) + verify(k + 1) ms. With one acceptance rate a this is
the familiar (1 - a^(k+1)) / (1 - a). The controller keeps, per way of drafting, the acceptance
by draft position and the cost of one draft step (and for the draft model the cost of bringing
its cache up to the request's prompt, paid by the first round of a request that uses it, and of
the first pass of each of its rounds, which catches up on the tokens written since it last ran),
and for the target the cost of verifying w tokens; each round it compares "no draft" (1 token for
verify(1)), every k of the draft model, and the prompt lookup's proposal cut to every length,
and, where both lookup and the model can draft, a tree of both chains verified in one target
pass (engine/tree.py), and where prompt lookup has two proposals that differ at once, both as a
tree (OTHER_PRIOR), and takes the best rate. A tree of a lookup chain of kl tokens and a model
chain of km yields 1 + sum over depths i of P(some chain holds to depth i); with L_i and M_i the
chains' products p_1...p_i and the two taken as independent, that is
E = 1 + sum L_i + sum M_i - sum_{i <= min(kl, km)} L_i M_i, and it costs the model's km steps plus
a tree pass of 1 + kl + km tokens: a chain pass of that width plus what a tree pass measurably
costs beyond one (`tree_extra_ms`): its mask, its gathered positions, moving the accepted path's
keys and values into place and walking the tree (on the shipped target 0.1-0.3 ms a pass, about a
tenth of such a round: priced as chains, pairs were chosen where they did not pay). Prompt lookup's
acceptance is kept by how long a match its proposal followed (LOOKUP_CLASSES), apart for copies
from the documents beyond the prompt (DOCUMENT_CLASS), and apart, by match length, for proposals
from the datastore of the target's own answers (DATASTORE_CLASSES). A drafter that
loses is probed again every PROBE_EVERY rounds, so the estimates follow the text, and a single
slow measurement (a page fault, another process) moves a cost estimate by a bounded step, so one
hiccup cannot shut drafting off for good.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

MAX_K = 16
PROBE_EVERY = 48        # rounds without a drafter before it is tried again
MAX_PROBE_EVERY = 768   # ... doubled after each probe it lost, up to this (a probe costs: the
                        # draft model's prefill and steps for tokens the target does not take)
DECAY = 0.97            # weight of older rounds in the acceptance counts (follows the text)
COST_EMA = 0.1          # weight of a new cost measurement
MAX_JUMP = 4.0          # a cost measurement counts as at most this many times the current estimate
# The verify cost's fit (VerifyCost): a measurement moves the line by at most CLIP_SPREADS
# typical errors, and the typical error by at most SPREAD_CAP of itself; the typical error is
# taken as at least SPREAD_FLOOR of the line. (On simulated skewed rounds the fit's bias and
# scatter were least with a clip of 1-1.5 and a cap of 2: tests/unit/test_engine_control.py.)
CLIP_SPREADS = 1.0
SPREAD_CAP = 2.0
SPREAD_FLOOR = 0.05
PRIOR_ROUNDS = 2.0      # pseudo-rounds behind the prior acceptance
TREE_EXTRA_MAX = 1.0    # a tree pass counts as costing at most this many chain passes beyond one

# Prompt-lookup proposals by how many tokens matched before them (Draft.match). Their acceptance
# differs by far (the shipped target's greedy continuations of 36 held-out code positions: the
# first proposed token was right ~0.30 of the time after 1-4 matched tokens, 0.96-1.00 after 5
# or more), so each class keeps its own estimate, from its own prior: a long match gets a long
# draft, a one-token match a short one or none. (name, fewest matched tokens, prior acceptance)
LOOKUP_CLASSES = (("match 1-2", 1, 0.35), ("match 3-5", 3, 0.5), ("match 6+", 6, 0.9))
# Copies from the document beyond the prompt's window and from other open documents (they match
# 8 tokens or more there: engine/lookup.py) keep their own estimate: with the shipped pair the
# target writes a copy's first token or two and then its own code, where a long match in the
# prompt holds far longer. Pooled with the prompt's, they were drafted long and lost
# (acceptance 0.48 -> 0.35 at end-of-line positions of real files). (name, prior acceptance)
DOCUMENT_CLASS = ("documents", 0.9)
DOCUMENT_SOURCE, OPEN_DOCUMENTS_SOURCE = "document", "open documents"   # Draft.source of such copies
DOCUMENT_SOURCES = (DOCUMENT_SOURCE, OPEN_DOCUMENTS_SOURCE)                # (engine/lookup.py names them)
# Proposals from the datastore of the target's own answers (engine/datastore.py), by how many
# ids matched before them: the more, the longer the target follows (the shipped target at 95
# held-out editor positions, 221k stored ids, per-position acceptance after 2 passes: ~0.5
# after 1-3 matched ids, ~0.75 after 4-7, ~0.8 after 8-15, ~0.95 after 16+). (name, fewest, prior)
DATASTORE_SOURCE = "datastore"
DATASTORE_CLASSES = (("datastore 1-3", 1, 0.45), ("datastore 4-7", 4, 0.65),
                     ("datastore 8-15", 8, 0.75), ("datastore 16+", 16, 0.9))
# A proposal taken where lookup's other proposal says otherwise (the text's copy and the
# store's part within the tokens offered: Draft.other) is "contested", and keeps estimates of its
# own. Contested, the store is right less often and the text's short matches more often: in
# `python -m bench.calibration` on the engine before this split (e882df9, 2026-12-06) the
# shipped target wrote the first token of a contested store proposal after 16+ matched ids 0.74
# of the time against 0.90 uncontested, 8-15 0.73 against 0.85, 4-7 0.59 against 0.68, and of a
# contested text proposal after 1-2 matched tokens 0.42 against 0.32 (3-5: 0.74 / 0.72, 6+: 0.94
# / 0.93). Pooled, those classes were priced for a mix: the pairs, all on contested proposals,
# gave 0.80-0.99 of the tokens planned. (Copies from the documents are not split.)
CONTESTED = " contested"
CONTESTED_PRIORS = {"match 1-2": 0.4, "match 3-5": 0.75, "match 6+": 0.9, "datastore 1-3": 0.35,
                    "datastore 4-7": 0.6, "datastore 8-15": 0.75, "datastore 16+": 0.75}
# When prompt lookup has two proposals that part (the text's copy and the datastore's,
# engine/lookup.py: `Draft.other`), at once or after s common tokens, the one it left can be
# verified beside the one it took, as a tree that branches at depth s: at most one of them is
# right at the branch, so the tree yields 1 + sum of the taken chain's products + the taken
# chain's product up to s x sum of the other branch's products. The other branch's acceptance
# is kept apart (`lookup_other`), from the pair rounds that reached the branch only: given that
# the two disagree there, it is not the acceptance of its class. The prior leans high, so that
# pairs are tried and measured: the benchmark suite's servers measured 0.06-0.12 on the shipped
# pair (README, "The target's own answers as a drafter").
OTHER_PRIOR = 0.3
# What a round of each kind measures again, for probing (DraftController.probe_every)
_PROBED_BY_KIND = {"none": (), "lookup": ("lookup",), "model": ("model",), "tree": ("lookup", "model"),
                   "pair": ("lookup", "pair")}


def lookup_class(match: int, source: str = "", contested: bool = False) -> str | None:
    """The class of a lookup proposal found in `source` after `match` matched tokens, `contested`
    where lookup's other proposal parts from it (None: not known)."""
    if source in DOCUMENT_SOURCES:
        return DOCUMENT_CLASS[0]
    name = None
    for label, fewest, _ in DATASTORE_CLASSES if source == DATASTORE_SOURCE else LOOKUP_CLASSES:
        if match >= fewest:
            name = label
    if name is not None and contested:
        return name + CONTESTED
    return name


def positions_reached(asked: int, accepted: int) -> int:
    """Draft positions a chain of `asked` tokens reached when its first `accepted` were accepted:
    every position up to the first rejection, that one included (a draft that stopped short of
    `asked` failed where it stopped). The acceptance counts by position rest on this rule."""
    return min(asked, accepted + 1)


@dataclass
class DraftWork:
    """What one proposal of the draft model took: its forward passes (`steps`), and the tokens
    its first pass computed to catch up with text written without it (lookup rounds, the token
    the prefill gave) before its first proposal (`catch_up`, in its own tokens), with that
    first pass's time, its text bookkeeping included (`first_ms`). A round after many lookup
    rounds catches up on all their tokens: priced as draft steps, that pass (and the steps past a
    decided answer, cut before verifying) made the shipped draft look 2.4-3.8 ms a step at end
    of line, where its steps after the first take about 1 ms."""
    steps: int = 0
    catch_up: int = 0
    first_ms: float = 0.0


def _ema(current: float | None, measured: float, weight: float = COST_EMA) -> float:
    """The first measurement is taken as it is; later ones move the estimate a bounded step."""
    if current is None:
        return measured
    if current > 0:
        measured = min(measured, MAX_JUMP * current)
    return current + weight * (measured - current)


@dataclass
class DrafterEstimate:
    """What the controller has measured of one way of drafting."""
    prior: float                       # acceptance assumed before anything is measured
    step_ms: float | None = None       # drafting cost per proposed token; the draft model's per
                                       # step after its round's first pass (None: not measured yet)
    begin_ms: float | None = None      # the draft model's prefill for a request (None: not measured yet)
    steps_measured: int = 0            # the draft model's rounds of several steps, which price a step
    evaluated: list[float] = field(default_factory=lambda: [0.0] * MAX_K)
    accepted: list[float] = field(default_factory=lambda: [0.0] * MAX_K)
    rounds: int = 0
    # what `_derived` computed last, with the prior and counts it was computed from
    _kept: tuple | None = field(default=None, init=False, repr=False, compare=False)
    _summary: tuple | None = field(default=None, init=False, repr=False, compare=False)   # (its key, summary)

    def acceptance(self, k: int) -> list[float]:
        """p(0) ... p(k - 1) (see `p`; at most MAX_K of them)."""
        return self._derived()[1][:k]

    def p(self, i: int) -> float:
        """Probability that draft token i is accepted, given that the ones before it were: its
        counts, shrunk towards the position before it (the first position: towards `prior`).
        A position reached only after earlier ones were accepted is measured less often, and
        a fixed prior there (0.6 for the draft model) made long drafts look good where only the
        first tokens had been measured, and poor (0.34-0.54 here)."""
        return self.acceptance(i + 1)[i]

    def cumulative(self) -> tuple[list[float], list[float]]:
        """For i = 0..MAX_K: the sum of the chain products p_1...p_j for j <= i, and the
        products (the plan's E for a chain of i tokens is 1 + sums[i])."""
        _, _, sums, chains = self._derived()
        return sums, chains

    def _derived(self) -> tuple:
        """(key, acceptance by position, cumulative sums, products), computed again only when
        the prior or the counts have changed since the last call (read as they are, so a count
        set by hand counts too): every round's plan and every request's summary read the
        estimates, and a round's record changes one or two of them."""
        key = (self.prior, tuple(self.accepted), tuple(self.evaluated))
        kept = self._kept
        if kept is None or kept[0] != key:
            ps, sums, chains, p, chain = [], [0.0], [1.0], self.prior, 1.0
            for a, e in zip(self.accepted, self.evaluated):
                p = (a + p * PRIOR_ROUNDS) / (e + PRIOR_ROUNDS)
                ps.append(p)
                chain *= p
                chains.append(chain)
                sums.append(sums[-1] + chain)
            kept = self._kept = (key, ps, sums, chains)
        return kept

    def expected_tokens(self, k: int) -> float:
        total, chain = 1.0, 1.0
        for p in self.acceptance(k):
            chain *= p
            total += chain
        return total

    def record(self, asked: int, drafted: int, accepted: int, draft_ms: float, work: DraftWork | None = None) -> None:
        """A round that asked for `asked` tokens, got `drafted` and had `accepted` of them
        accepted. Position i counts once every earlier one was accepted: a draft that stopped
        short (nothing to propose, low confidence) failed at the position where it stopped.
        The cost is per drafted token, or for a draft model (`work`) per forward step, with its
        catching up priced apart (`_record_work`)."""
        self.evaluated = [v * DECAY for v in self.evaluated]
        self.accepted = [v * DECAY for v in self.accepted]
        for i in range(min(positions_reached(asked, accepted), MAX_K)):
            self.evaluated[i] += 1
            self.accepted[i] += i < accepted
        if work is None:
            self.step_ms = _ema(self.step_ms, draft_ms / max(1, drafted))
        else:
            self._record_work(draft_ms, work)

    def _record_work(self, draft_ms: float, work: DraftWork) -> None:
        """A draft model's step is priced by its forward passes, not by the tokens kept (those
        past a decided answer are cut before verifying): the passes after a round's first are
        plain steps (the first is priced apart, DraftController.model_first)."""
        if work.steps > 1:
            self.steps_measured += 1
            measured = (draft_ms - work.first_ms) / (work.steps - 1)
            # the first rounds' mean, then an average that follows the text (a round of one pass
            # only stands in until then)
            self.step_ms = measured if self.steps_measured == 1 else _ema(
                self.step_ms, measured, max(COST_EMA, 1 / self.steps_measured))
        elif self.step_ms is None:      # one pass (the answer was decided at once): a stand-in
            self.step_ms = draft_ms

    def record_begin(self, ms: float) -> None:
        self.begin_ms = _ema(self.begin_ms, ms)
        self.rounds += 1

    def summary(self) -> dict:
        """Kept while nothing in it changed: every request's stats carry every estimate's, and
        most estimates are not touched by a request."""
        key = (self._derived()[0], self.step_ms, self.begin_ms, self.rounds)
        if self._summary is None or self._summary[0] != key:
            ms = lambda v: None if v is None else round(v, 3)  # noqa: E731
            self._summary = (key, {"acceptance_by_position": [round(p, 3) for p in self.acceptance(8)],
                                   "step_ms": ms(self.step_ms), "begin_ms": ms(self.begin_ms), "rounds": self.rounds})
        kept = self._summary[1]
        return {**kept, "acceptance_by_position": list(kept["acceptance_by_position"])}


@dataclass
class VerifyCost:
    """The target's cost of scoring w tokens in one pass, fitted online to every round's
    measurement: verify(w) = verify(1) + per_doubling x log2(w) + per_token x (w - 1).

    The log term is there because the cost is not a line. The shipped target at 460 cached
    tokens on this kind of CPU took 3.8 ms for 1 token, 4.9 for 2, 5.7 for 4, 7.0 for 8 and 8.3
    for 16 (bench/forward_cost.py): a matrix of one row runs as a matrix-vector product, two
    rows take the slower small-matrix path, attention needs its mask, and from there each
    doubling of the width adds about the same. A line fitted to such rounds is too cheap at
    widths 2-3 (short, doubtful drafts look free) and too dear at 16 (long, likely copies look
    costly); a machine whose cost does grow by the token (a big model) puts it in the slope.
    Both start from a CPU-like prior (a doubling +25 %, a token +2 %) that measurements move.

    Round times are skewed: most rounds take about the same, a few take far longer (a page fault,
    another process). A running mean follows the skew, and a slope taken from one round at a time
    carries the noise of both. So each measurement moves the fit by its error clipped to
    CLIP_SPREADS typical errors (a Huber fit, which tracks the typical round), shared between the
    coefficients in proportion to what each contributes at that width (a normalised
    least-mean-squares step: the fit's error at that width shrinks by COST_EMA)."""
    one_ms: float = 0.0
    per_doubling_ms: float = 0.0
    per_token_ms: float = 0.0
    spread_ms: float = 0.0      # typical |error| of one measurement against the fit
    seen: bool = False

    def __call__(self, width: int) -> float:
        return self.one_ms + self.per_doubling_ms * _LOG2[width] + self.per_token_ms * (width - 1)

    def widths(self, n: int) -> list[float]:
        """verify(w) for w = 0 .. n - 1, each at least 1e-6 (the plan divides by them). The same
        sums as __call__, in the same order (the same floats), without a call per width: the
        plan asks for up to 40 widths every round."""
        one, doubling, token = self.one_ms, self.per_doubling_ms, self.per_token_ms
        return [max(1e-6, one + doubling * _LOG2[w] + token * (w - 1)) for w in range(n)]

    def record(self, width: int, ms: float) -> None:
        if not self.seen:   # the prior's shape, scaled to this measurement at its width
            one = ms / (1 + 0.25 * _LOG2[width] + 0.02 * (width - 1))
            self.one_ms, self.per_doubling_ms, self.per_token_ms = one, 0.25 * one, 0.02 * one
            self.spread_ms, self.seen = 0.1 * one, True
            return
        x, l = width - 1, _LOG2[width]
        error = ms - self(width)
        # the spread follows the errors, a far one counting as at most SPREAD_CAP spreads; it
        # never falls below SPREAD_FLOOR of the fit, so a steady machine that turns slower
        # is still followed
        spread = max(self.spread_ms, SPREAD_FLOOR * self(width))
        clip = CLIP_SPREADS * spread
        self.spread_ms = spread + COST_EMA * (min(abs(error), SPREAD_CAP * spread) - spread)
        step = COST_EMA * max(-clip, min(clip, error)) / (1 + l * l + x * x)
        self.one_ms = max(0.0, self.one_ms + step)
        self.per_doubling_ms = max(0.0, self.per_doubling_ms + step * l)
        self.per_token_ms = max(0.0, self.per_token_ms + step * x)


_LOG2 = [0.0] + [math.log2(w) for w in range(1, 4 * MAX_K + 8)]   # verify widths: a tree has two chains


@dataclass
class FirstPassCost:
    """The draft model's first pass of a round by its width w (it catches up on w - 1 tokens):
    first(w) = one + per_token x (w - 1), a least-squares line through the measurements, older
    ones fading by DECAY. Wide passes are rare (a model round after a long run of lookup rounds)
    and cost several times a narrow one; a clipped online fit like VerifyCost's, whose step is
    sized by the typical narrow round, learned them far too slowly (a simulated 5 % of rounds at
    widths 10-40 left width 40 priced at half its cost after 2,000 rounds). A measurement counts
    as at most MAX_JUMP times the current line (a page fault, another process), where the line
    was measured: a pass wider than any before is taken as it is."""
    n: float = 0.0
    widest: int = 0
    sum_x: float = 0.0
    sum_xx: float = 0.0
    sum_y: float = 0.0
    sum_xy: float = 0.0

    @property
    def seen(self) -> bool:
        return self.n > 0

    def line(self) -> tuple[float, float]:
        """(one, per_token); the slope is 0 until two widths are measured, and never negative."""
        if not self.n:
            return 0.0, 0.0
        mx, my = self.sum_x / self.n, self.sum_y / self.n
        var = self.sum_xx / self.n - mx * mx
        slope = max(0.0, (self.sum_xy / self.n - mx * my) / var) if var > 1e-9 else 0.0
        return max(0.0, my - slope * mx), slope

    def __call__(self, width: int) -> float:
        one, per_token = self.line()
        return one + per_token * (width - 1)

    def record(self, width: int, ms: float) -> None:
        if self.n and width <= self.widest:
            ms = min(ms, MAX_JUMP * max(self(width), 1e-6))
        self.widest = max(self.widest, width)
        x = width - 1
        self.n, self.sum_x, self.sum_xx = self.n * DECAY + 1, self.sum_x * DECAY + x, self.sum_xx * DECAY + x * x
        self.sum_y, self.sum_xy = self.sum_y * DECAY + ms, self.sum_xy * DECAY + x * ms


@dataclass(frozen=True)
class LookupOffer:
    """What prompt lookup offers a round: a proposal of `tokens` (0: none), found in `source`
    (Draft.source) after `match` matched tokens, and its other proposal, which shares its first
    `other_from` tokens with that one and then has `other_tokens` of its own (0: none);
    `written`: the tokens the target has written of this answer before the round (the plan does
    not read it: bench.calibration tells the start of an answer apart by it)."""
    tokens: int = 0
    match: int = 0
    source: str = ""
    other_tokens: int = 0
    other_from: int = 0
    written: int = 0


@dataclass
class Plan:
    drafter: str      # "none", "lookup", "model", "tree" (lookup and model in one pass) or
                      # "pair" (both of lookup's proposals in one pass)
    k: int            # tokens to draft (the lookup's proposal is cut to k; a tree's model chain)
    expected_rate: float   # expected new tokens per ms (0 before any cost is known)
    lookup_k: int = 0      # a tree's lookup chain
    other_k: int = 0       # a pair's other branch: tokens of the proposal lookup left, past the shared ones
    other_from: int = 0    # ... which shares its first other_from tokens with the taken one
    lookup_match: int = 0  # the round's lookup proposal followed this many matched tokens
    lookup_source: str = ""  # ... found there (Draft.source)
    lookup_contested: bool = False   # ... and lookup's other proposal parted from it (CONTESTED)
    probe: bool = False    # chosen to measure a drafter again, not because it was expected to pay


def _cumulative(est: DrafterEstimate, k: int) -> tuple[list[float], list[float]]:
    """For i = 0..k (k <= MAX_K): the sum of the chain products p_1...p_j for j <= i, and the products."""
    sums, chains = est.cumulative()
    return sums[:k + 1], chains[:k + 1]


@dataclass
class DraftController:
    """Kept by the Engine across requests: what worked on the last request is where the next starts."""
    lookup: DrafterEstimate = field(default_factory=lambda: DrafterEstimate(prior=0.5, step_ms=0.0))
    # the same by class (LOOKUP_CLASSES, DATASTORE_CLASSES, DOCUMENT_CLASS); `lookup` pools them, for proposals of unknown match
    lookup_by_class: dict = field(default_factory=lambda: {
        name: DrafterEstimate(prior=prior, step_ms=0.0)
        for name, prior in (*((n, p) for n, _, p in (*LOOKUP_CLASSES, *DATASTORE_CLASSES)), DOCUMENT_CLASS,
                            *((n + CONTESTED, p) for n, p in CONTESTED_PRIORS.items()))})
    # lookup's other proposal, in pair rounds (OTHER_PRIOR)
    lookup_other: DrafterEstimate = field(default_factory=lambda: DrafterEstimate(prior=OTHER_PRIOR, step_ms=0.0))
    model: DrafterEstimate = field(default_factory=lambda: DrafterEstimate(prior=0.6))
    verify: VerifyCost = field(default_factory=VerifyCost)
    # What a tree pass (a tree, a pair) costs beyond a chain pass of its width: 0 until one is
    # measured, then an average of (measured - chain price), each pass counted between 0 and
    # TREE_EXTRA_MAX chain passes (one slow pass cannot price trees out for long)
    tree_extra_ms: float = 0.0
    # The draft model's first pass of a round, by its width: it catches up on the tokens written
    # since it last ran (DraftWork) and does its text bookkeeping, so it costs more than a step
    # (measured at end of line with the shipped pair: 1.4-2.9 ms for 2-21 tokens, a step ~1.1).
    model_first: FirstPassCost = field(default_factory=FirstPassCost)
    since_model: int = 0     # rounds since each drafter was last used (for probing)
    since_lookup: int = 0
    since_pair: int = 0      # ... and since lookup's two proposals were last verified together
    # rounds without a drafter before the next probe: PROBE_EVERY, doubled after each probe that
    # did not win the drafter its place back, reset once the drafter is chosen on its merits
    probe_every: dict = field(default_factory=lambda: {"model": PROBE_EVERY, "lookup": PROBE_EVERY,
                                                       "pair": PROBE_EVERY})
    rounds: int = 0          # rounds measured, over all requests
    rounds_by_kind: dict = field(default_factory=lambda: {"none": 0, "lookup": 0, "model": 0, "tree": 0,
                                                          "pair": 0})
    frozen: bool = False     # estimates given by hand, not measured: reproducible plans (tests, tuning)

    def lookup_estimate(self, match: int, source: str = "", contested: bool = False) -> DrafterEstimate:
        """The estimate for a lookup proposal found in `source` after `match` matched tokens,
        `contested` or not (match 0 and no document source: the pooled one)."""
        name = lookup_class(match, source, contested)
        return self.lookup if name is None else self.lookup_by_class[name]

    def plan(self, lookup: LookupOffer, has_model: bool, max_k: int, model_ready: bool = True,
             tree_ok: bool = False, model_behind: int = 0) -> Plan:
        """The best round given what prompt `lookup` offers, whether a draft model is there,
        whether it has already begun this request (else its prefill is part of this round's
        cost), how many tokens were written since it last ran (it catches up on them first) and
        whether the target can verify a tree."""
        contested = lookup.other_tokens > 0
        plan = self._plan(lookup if tree_ok else replace(lookup, other_tokens=0),
                          self.lookup_estimate(lookup.match, lookup.source, contested), has_model, max_k,
                          model_ready, tree_ok, model_behind)
        plan.lookup_match, plan.lookup_source, plan.lookup_contested = lookup.match, lookup.source, contested
        return plan

    def _plan(self, lookup: LookupOffer, lookup_est: DrafterEstimate, has_model: bool, max_k: int,
              model_ready: bool, tree_ok: bool, model_behind: int) -> Plan:
        max_k = min(max_k, MAX_K)
        model_unmeasured = self.model.step_ms is None or self.model.begin_ms is None
        if has_model and max_k > 0 and model_unmeasured:   # measure the draft model once first
            return Plan("model", min(4, max_k), 0.0)
        if not self.verify.seen:    # no costs known yet: measure a round first
            return Plan("lookup", min(lookup.tokens, max_k), 0.0) if lookup.tokens else Plan("none", 0, 0.0)
        lookup_k = min(lookup.tokens, max_k)
        other_k = min(lookup.other_tokens, max_k)
        # self.verify(w) (at least 1e-6) for every width lookup's chain or a pair can have, and 2
        # (the draft model's chains and trees are wider: priced below, in the rounds that price
        # them); a tree pass at that price plus the extra measured for tree passes (_tree_widths)
        verify = self.verify.widths(3 + lookup_k + other_k)
        l_sums, l_chains = _cumulative(lookup_est, lookup_k)   # 1 + l_sums[k] = expected_tokens(k)
        best = Plan("none", 0, 1.0 / verify[1])
        # Each drafter's best k, as plain numbers (a Plan is made only for the winner): the first
        # k with the highest rate.
        best_k, best_rate = 0, 0.0
        for k in range(1, lookup_k + 1):
            rate = (1 + l_sums[k]) / verify[k + 1]
            if best_k == 0 or rate > best_rate:
                best_k, best_rate = k, rate
        best_lookup = Plan("lookup", best_k, best_rate) if best_k else None
        if best_lookup is not None and best_lookup.expected_rate > best.expected_rate:
            best = best_lookup
        best_pair = self._best_pair(l_sums, l_chains, lookup.other_from, other_k, self._tree_widths(verify)) \
            if lookup_k > lookup.other_from and other_k else None
        if best_pair is not None and best_pair.expected_rate > best.expected_rate:
            best = best_pair
        best_model = None
        if has_model:
            step = self.model.step_ms
            # k model tokens cost begin + k steps: its prefill, when it has not begun the request,
            # and its first pass over what it is behind on, priced apart from the steps
            begin = (0.0 if model_ready else self.model.begin_ms) + (
                self.model_first(model_behind + 1) - step if self.model_first.seen else 0.0)
            m_sums, m_chains = _cumulative(self.model, max_k)
            # Any model round, alone or in a tree with lookup's chain, yields at most both chains
            # whole and costs at least its begin, one step and a pass of two tokens: where even
            # that loses to the best so far and no probe is due, no k can win (at end of line,
            # where the model has not begun, this skips most of the plan's work).
            bound = (1 + l_sums[-1] + m_sums[-1]) / (begin + step + verify[2])
            if bound > best.expected_rate or self.since_model >= self.probe_every["model"]:
                verify = self.verify.widths(2 + lookup_k + max_k)
                best_k, best_rate = 0, 0.0
                for k in range(1, max_k + 1):
                    rate = (1 + m_sums[k]) / (begin + k * step + verify[k + 1])
                    if best_k == 0 or rate > best_rate:
                        best_k, best_rate = k, rate
                best_model = Plan("model", best_k, best_rate)
                if best_model.expected_rate > best.expected_rate:
                    best = best_model
                if tree_ok and lookup_k:
                    tree = self._best_tree((l_sums, l_chains), (m_sums, m_chains), self._tree_widths(verify), begin)
                    if tree.expected_rate > best.expected_rate:
                        best = tree
        # Now and then a drafter that loses is measured again, so the estimates follow the text.
        if best.drafter == "none" and best_lookup is not None and self.since_lookup >= self.probe_every["lookup"]:
            best = replace(best_lookup, probe=True)
        if best_model is not None and best.drafter not in ("model", "tree") \
                and self.since_model >= self.probe_every["model"]:
            best = replace(best_model, probe=True)
        elif best_pair is not None and best.drafter != "pair" and self.since_pair >= self.probe_every["pair"]:
            best = replace(best_pair, probe=True)
        return best

    def _best_pair(self, l_sums: list[float], l_chains: list[float], shared: int, other_k: int,
                   verify: list[float]) -> Plan:
        """The best pair of lookup's two proposals (the taken one's cumulative sums and products,
        `_cumulative`; the other one shares its first `shared` tokens and then has up to `other_k`
        of its own): the two branches part at depth `shared`, so once the target gets there their
        expected tokens add up (OTHER_PRIOR), at the cost of one pass of the tree's width. The
        taken chain reaches past the branch (else the tree would be one chain)."""
        o_sums, _ = _cumulative(self.lookup_other, other_k)
        reach = l_chains[shared]
        best_rate, best_k, best_other = 0.0, 0, 0
        rows_fell = 0    # as in _best_tree: a row, and the rows, stop a few steps past their best
        for k in range(shared + 1, len(l_sums)):
            row_best, row_other, fell = 0.0, 0, 0
            for other in range(1, other_k + 1):
                rate = (1 + l_sums[k] + reach * o_sums[other]) / verify[1 + k + other]
                if rate > row_best:
                    row_best, row_other, fell = rate, other, 0
                elif (fell := fell + 1) >= 3:
                    break
            if row_best > best_rate:
                best_rate, best_k, best_other, rows_fell = row_best, k, row_other, 0
            elif (rows_fell := rows_fell + 1) >= 3:
                break
        return Plan("pair", best_k, best_rate, other_k=best_other, other_from=shared)

    def _best_tree(self, lookup, model, verify: list[float], begin: float) -> Plan:
        """The best tree of a lookup chain and a model chain (see the module's formula) from
        their cumulative sums and products (`_cumulative`); the width counts both chains whole
        (their common prefix is not known before drafting)."""
        (l_sums, l_chains), (m_sums, m_chains) = lookup, model
        lookup_k, max_k = len(l_sums) - 1, len(m_sums) - 1
        both = [0.0]
        for i in range(1, max_k + 1):
            both.append(both[-1] + (l_chains[i] * m_chains[i] if i <= lookup_k else 0.0))
        step = self.model.step_ms
        best_rate, best_km, best_kl = 0.0, 0, 0
        # Rates rise with each chain's length, then fall: a row (or the rows) stops a few steps
        # after its best, which keeps this to a few dozen candidates instead of kl x km.
        rows_fell, row_prev = 0, 0.0
        for kl in range(1, lookup_k + 1):
            row_best, fell = 0.0, 0
            l_tokens = 1 + l_sums[kl]
            for km in range(1, max_k + 1):
                tokens = l_tokens + m_sums[km] - both[kl if kl < km else km]
                rate = tokens / (begin + km * step + verify[1 + kl + km])
                if rate > best_rate:
                    best_rate, best_km, best_kl = rate, km, kl
                if rate > row_best:
                    row_best, fell = rate, 0
                elif (fell := fell + 1) >= 3:
                    break
            rows_fell = 0 if row_best > row_prev else rows_fell + 1
            row_prev = max(row_prev, row_best)
            if rows_fell >= 3:
                break
        return Plan("tree", best_km, best_rate, best_kl)

    def record(self, plan: Plan, drafted: int, accepted: int, draft_ms: float, verify_ms: float,
               begin_ms: float | None = None, model_work: DraftWork | None = None) -> None:
        """What a round of `plan` gave: `drafted` tokens verified, `accepted` of them; `begin_ms`
        when the round began the draft model for its request; `model_work`, what the draft
        model's proposal took (its cost is priced by it)."""
        self._count(plan)
        if self.frozen:
            return
        self.verify.record(drafted + 1, verify_ms)
        if begin_ms is not None:
            self.model.record_begin(begin_ms)
        if plan.drafter == "model":
            self.model.record(plan.k, drafted, accepted, draft_ms, model_work)
            self._record_first(model_work)
        elif plan.drafter == "lookup":
            self._record_lookup(plan, plan.k, drafted, accepted, draft_ms)

    def record_tree(self, plan: Plan, lookup: tuple[int, int], model: tuple[int, int], width: int,
                    draft_ms: float, verify_ms: float, begin_ms: float | None = None,
                    model_work: DraftWork | None = None) -> None:
        """What a tree round gave: (drafted, accepted) of its lookup chain and of its model chain
        (a chain's accepted tokens are those the accepted path shares with it) and the width
        verified."""
        self._count(plan)
        if self.frozen:
            return
        self._record_tree_pass(width, verify_ms)
        if begin_ms is not None:
            self.model.record_begin(begin_ms)
        self._record_lookup(plan, plan.lookup_k, *lookup, 0.0)
        self.model.record(plan.k, *model, draft_ms, model_work)
        self._record_first(model_work)

    def record_pair(self, plan: Plan, taken: tuple[int, int], other: tuple[int, int] | None, width: int,
                    verify_ms: float) -> None:
        """What a pair round gave: (drafted, accepted) of the proposal lookup took and of the
        other's branch (None: the target parted from both before the branch), and the width
        verified."""
        self._count(plan)
        if self.frozen:
            return
        self._record_tree_pass(width, verify_ms)
        self._record_lookup(plan, plan.k, *taken, 0.0)
        if other is not None:
            self.lookup_other.record(plan.other_k, *other, 0.0)

    def _tree_widths(self, verify: list[float]) -> list[float]:
        """A tree pass's price by width, from the chains' (`verify`)."""
        extra = self.tree_extra_ms
        return [v + extra for v in verify] if extra else verify

    def _record_tree_pass(self, width: int, ms: float) -> None:
        """A tree pass of `width` tokens took `ms`: what it cost beyond a chain pass of that width
        moves the extra (the chain fit itself learns from chain passes only)."""
        if not self.verify.seen:
            return
        chain = self.verify(width)
        self.tree_extra_ms += COST_EMA * (max(0.0, min(ms - chain, TREE_EXTRA_MAX * chain)) - self.tree_extra_ms)

    def _record_first(self, work: DraftWork | None) -> None:
        if work is not None and work.steps:
            self.model_first.record(work.catch_up + 1, work.first_ms)

    def _record_lookup(self, plan: Plan, asked: int, drafted: int, accepted: int, draft_ms: float) -> None:
        """A lookup chain counts in the pooled estimate and in its class."""
        self.lookup.record(asked, drafted, accepted, draft_ms)
        if lookup_class(plan.lookup_match, plan.lookup_source) is not None:
            self.lookup_estimate(plan.lookup_match, plan.lookup_source, plan.lookup_contested).record(
                asked, drafted, accepted, draft_ms)

    def _count(self, plan: Plan) -> None:
        self.rounds += 1
        self.rounds_by_kind[plan.drafter] += 1
        used = _PROBED_BY_KIND[plan.drafter]
        for kind in used:
            self.probe_every[kind] = min(MAX_PROBE_EVERY, 2 * self.probe_every[kind]) if plan.probe else PROBE_EVERY
        self.since_model = 0 if "model" in used else self.since_model + 1
        self.since_lookup = 0 if "lookup" in used else self.since_lookup + 1
        self.since_pair = 0 if "pair" in used else self.since_pair + 1

    def summary(self) -> dict:
        return {"rounds": self.rounds, "rounds_by_kind": dict(self.rounds_by_kind),
                "probe_every": dict(self.probe_every),
                "verify_ms": {"width_1": round(self.verify(1), 3), "per_doubling": round(self.verify.per_doubling_ms, 3),
                              "per_extra_token": round(self.verify.per_token_ms, 3)},
                "tree_extra_ms": round(self.tree_extra_ms, 3),
                "lookup": self.lookup.summary(), "lookup_other": self.lookup_other.summary(),
                "model": self.model.summary(),
                "model_first_pass_ms": dict(zip(("width_1", "per_extra_token"),
                                                (round(v, 3) for v in self.model_first.line()))),
                "lookup_by_class": {name: est.summary() for name, est in self.lookup_by_class.items()}}
