"""Achieved speedup against the one the standard speculative-decoding formula predicts, from the
stats the engine reports for every call (`GenerationStats.as_dict()`: rounds by drafter,
drafted/accepted, time drafting and verifying, the controller's estimates).

The formula: a round that drafts k tokens, the i-th accepted with probability p_i given the ones
before it were, yields E = 1 + p_1 + p_1 p_2 + ... + p_1...p_k new tokens (with one rate a:
(1 - a^(k+1)) / (1 - a)), and costs k draft steps + verify(k + 1) + the engine's own overhead per
round. Without a draft a token costs verify(1) + that overhead. For a configuration:

- rounds: as it ran them, by the drafters of their chains ("none", a drafter, or two joined by "+"
  for a tree of both; an engine before engine/drafters/ named kinds: tree, pair); k = its mean
  drafted tokens per drafting round;
- p_i: each drafter's acceptance counted by position in these calls (`by_position`), else the
  policy's estimates (averaged over calls, weighted by the drafter's rounds), else its measured
  acceptance (accepted / drafted) at every position;
- verify(w) = verify(1) + (w - 1) x slope: verify(1) measured in the no-draft configuration
  (every round there verifies one token), the slope from the drafting configurations' verify
  time beyond that, per drafted token;
- draft step: the policy's estimate of each drafter's cost per drafted token (median over calls:
  a draft model's step after its round's first pass, which is added apart; free drafters' 0); a
  drafter with no estimate: its configuration's drafting time per drafted token;
- overhead: the configuration's own engine time per round outside drafting and verifying.

Predicted rate = sum of E over its rounds / sum of their costs; achieved rate = new tokens / the
engine's time after the target's prefill (the draft model's prefill is in it: the formula does not
count it, so it lowers the efficiency). Speedups are rates over the no-draft configuration's
achieved rate; efficiency = achieved / predicted.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

CHAINS = ("lookup", "datastore", "copy", "model", "lookup_other")   # drafters whose chains are priced
FREE = ("lookup", "datastore", "copy")                              # drafters without a model: no step to pay
# the chains a round of an older engine's kinds verified (a pair: lookup's two proposals)
LEGACY_USES = {"tree": ("lookup", "model"), "pair": ("lookup", "lookup_other")}


def uses(kind: str) -> tuple[str, ...]:
    """The drafters whose chains a round of `kind` verifies."""
    return LEGACY_USES.get(kind) or tuple(kind.split("+"))


def estimates(s: dict, drafter: str) -> dict:
    """What a call's policy (an older engine's controller) estimated of `drafter`:
    acceptance_by_position, step_ms, begin_ms, first_ms where known."""
    if s.get("controller"):
        return s["controller"].get(drafter) or {}
    policy = s.get("policy") or {}
    out = {"acceptance_by_position": (policy.get("acceptance") or {}).get(drafter)}
    if drafter == "model":
        out.update(policy.get("model") or {})
    elif drafter in FREE and policy:
        out["step_ms"] = 0.0
    return out


@dataclass
class Totals:
    """One configuration's engine calls, summed."""
    calls: int = 0
    rounds: int = 0
    rounds_by_drafter: dict[str, int] = field(default_factory=dict)
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0        # made by the rounds (a first token from the prefill pass is not)
    decode_ms: float = 0.0     # latency - the target's prefill
    draft_ms: float = 0.0
    draft_first_ms: float = 0.0   # an older engine's: the draft model's first pass of its rounds (in draft_ms)
    verify_ms: float = 0.0
    pair_shared: int = 0       # pair rounds: tokens their two chains shared before the branch

    @classmethod
    def of(cls, calls: list[dict]) -> "Totals":
        t = cls()
        for s in calls:
            t.calls += 1
            t.rounds += s["rounds"]
            for kind, n in (s.get("rounds_by_drafter") or {}).items():
                t.rounds_by_drafter[kind] = t.rounds_by_drafter.get(kind, 0) + n
            t.drafted += s["drafted"]
            t.accepted += s["accepted"]
            t.new_tokens += s["new_tokens"] - (s.get("first_from_prefill") or 0)   # the rounds' tokens
            t.decode_ms += s["latency_ms"] - s["prefill_ms"]
            t.draft_ms += s["draft_ms"]
            t.draft_first_ms += s.get("draft_first_ms", 0.0)
            t.verify_ms += s["verify_ms"]
            t.pair_shared += s.get("pair_shared", 0)
        return t

    @property
    def drafting_rounds(self) -> int:
        return self.rounds - self.rounds_by_drafter.get("none", 0)

    @property
    def mean_k(self) -> float:
        return self.drafted / self.drafting_rounds if self.drafting_rounds else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_call(self) -> float | None:
        """The rounds' new tokens per round, one target pass each (the prefill's pass and a first
        token it gave are not counted)."""
        return self.new_tokens / self.rounds if self.rounds else None

    @property
    def rate(self) -> float | None:
        """New tokens per ms of decoding."""
        return self.new_tokens / self.decode_ms if self.decode_ms > 0 else None

    @property
    def overhead_ms(self) -> float:
        """Engine time per round outside drafting and verifying (stop checks, bookkeeping)."""
        return max(0.0, self.decode_ms - self.draft_ms - self.verify_ms) / self.rounds if self.rounds else 0.0


def expected_tokens(p: list[float], k: float) -> float:
    """1 + p_1 + p_1 p_2 + ... + p_1...p_k; positions past the list take its last value, and a
    fractional k interpolates between the two whole numbers around it."""
    if not p:
        return 1.0
    whole = int(k)
    total, chain = 1.0, 1.0
    for i in range(whole + 1):
        if i == whole:
            nxt = chain * p[min(i, len(p) - 1)]
            return total + (k - whole) * nxt
        chain *= p[min(i, len(p) - 1)]
        total += chain
    return total


def chain_product(p: list[float], k: float) -> float:
    """p_1 ... p_k, the chance a chain holds to depth k (positions past the list take its last
    value; a fractional k interpolates)."""
    if not p:
        return 1.0
    whole, chain = int(k), 1.0
    for i in range(whole):
        chain *= p[min(i, len(p) - 1)]
    return chain + (k - whole) * (chain * p[min(whole, len(p) - 1)] - chain)


def tree_tokens(lookup: list[float], model: list[float], k_lookup: float, k_model: float) -> float:
    """A tree of a lookup chain and a model chain verified together (the chains taken as
    independent): 1 + sum of P(some chain holds to depth i) over depths."""
    depth = int(max(k_lookup, k_model)) + 1
    total, l_chain, m_chain = 1.0, 1.0, 1.0
    for i in range(depth):
        l_chain *= lookup[min(i, len(lookup) - 1)] if i < k_lookup else 0.0
        m_chain *= model[min(i, len(model) - 1)] if i < k_model else 0.0
        total += l_chain + m_chain - l_chain * m_chain
    return total


def _ran(s: dict, drafter: str) -> int:
    """Rounds of one call that used `drafter` (a tree round uses both chains)."""
    by = s.get("rounds_by_drafter") or {}
    return sum(n for kind, n in by.items() if drafter in uses(kind))


def controller_acceptance(calls: list[dict], drafter: str) -> list[float] | None:
    """The policy's per-position acceptance of `drafter`, averaged over the calls that ran
    it (weighted by its rounds there); None when no call reports one."""
    sums: list[float] = []
    weight = 0.0
    for s in calls:
        p = estimates(s, drafter).get("acceptance_by_position")
        n = _ran(s, drafter)
        if not p or n <= 0:
            continue
        sums = [a + n * b for a, b in zip(sums, p)] if sums else [n * b for b in p]
        weight += n
    return [v / weight for v in sums] if weight else None


def measured_acceptance(calls: list[dict], drafter: str) -> list[float] | None:
    """The per-position acceptance of `drafter` counted exactly over these calls (the engine's
    `by_position`: drafts that reached position i, and those accepted there); a position no draft
    reached takes the one before it. None when no call counted any."""
    evaluated: list[int] = []
    accepted: list[int] = []
    for s in calls:
        rec = (s.get("by_position") or {}).get(drafter)
        if not rec:
            continue
        for i, (e, a) in enumerate(zip(rec["evaluated"], rec["accepted"])):
            if i == len(evaluated):
                evaluated.append(0)
                accepted.append(0)
            evaluated[i] += e
            accepted[i] += a
    p: list[float] = []
    for e, a in zip(evaluated, accepted):
        p.append(a / e if e else p[-1])
    return p or None


def controller_median(calls: list[dict], drafter: str, key: str) -> float | None:
    """The median of one of the policy's estimates of `drafter` (e.g. its step_ms) over the
    calls that ran that drafter and report the estimate."""
    values = [v for s in calls if _ran(s, drafter) if isinstance(v := estimates(s, drafter).get(key), (int, float))]
    return statistics.median(values) if values else None


@dataclass
class Costs:
    """Unit costs of one workload, in ms."""
    verify_one: float                  # the target scoring one token
    verify_per_token: float            # each further token in the same pass
    step: dict[str, float]             # drafting cost per drafted token, by drafter
    begin_model: float | None = None   # the draft model's prefill for a request (not in the formula)
    # drafters whose step is the policy's estimate: for the draft model a step after its round's
    # first pass, which the formula then adds apart; else drafting time per drafted token
    from_controller: frozenset = frozenset()
    first_model: float | None = None   # the policy's estimate of the draft model's first pass

    def verify(self, width: float) -> float:
        return self.verify_one + self.verify_per_token * (width - 1)


def measure_costs(by_config: dict[str, list[dict]], baseline: str) -> Costs:
    """The workload's unit costs from its calls; `baseline` is the configuration without a draft."""
    base = Totals.of(by_config[baseline])
    verify_one = base.verify_ms / base.rounds if base.rounds else 0.0
    others = [Totals.of(calls) for name, calls in by_config.items() if name != baseline]
    extra = sum(t.verify_ms - verify_one * t.rounds for t in others)
    drafted = sum(t.drafted for t in others)
    slope = max(0.0, extra / drafted) if drafted else 0.0
    everything = [s for calls in by_config.values() for s in calls]
    step: dict[str, float] = {}
    for drafter in CHAINS:
        est = controller_median(everything, drafter, "step_ms")
        if est is not None:
            step[drafter] = est
    from_controller = frozenset(step)
    for calls in by_config.values():   # a drafter no controller measured: its drafting time per token
        t = Totals.of(calls)
        kinds = [k for k, n in t.rounds_by_drafter.items() if n and k != "none"]
        if len(kinds) == 1 and kinds[0] not in step and t.drafted:
            step[kinds[0]] = t.draft_ms / t.drafted
    return Costs(verify_one, slope, step, controller_median(everything, "model", "begin_ms"), from_controller,
                 controller_median(everything, "model", "first_ms"))


@dataclass
class Speedup:
    achieved: float | None      # decode rate over the baseline's
    predicted: float | None     # the formula's rate over the baseline's achieved rate
    efficiency: float | None    # achieved / predicted
    flat_acceptance: bool       # p_i taken as the measured acceptance (no controller estimates)


def predicted_rate(calls: list[dict], costs: Costs) -> tuple[float | None, bool]:
    """(new tokens per ms the formula predicts for these calls, whether p_i were flat)."""
    t = Totals.of(calls)
    if not t.rounds:
        return None, False
    a = t.acceptance or 0.0
    p = {d: measured_acceptance(calls, d) or controller_acceptance(calls, d) for d in CHAINS}
    flat = any(n and k != "none" and any(p.get(c) is None for c in uses(k))
               for k, n in t.rounds_by_drafter.items())
    p = {d: v if v is not None else [a] for d, v in p.items()}
    k = t.mean_k
    fallback_step = t.draft_ms / t.drafted if t.drafted else 0.0
    # a model round's first pass (it catches up on what lookup rounds wrote) beyond a step, as
    # these calls measured it (an older engine) or the policy estimates it; priced apart from steps
    model_rounds = sum(n for kind, n in t.rounds_by_drafter.items() if "model" in uses(kind))
    first = t.draft_first_ms / model_rounds if model_rounds and t.draft_first_ms else costs.first_model
    first_extra = max(0.0, first - costs.step.get("model", fallback_step)) \
        if first is not None and "model" in costs.from_controller else 0.0
    tokens = time = 0.0
    for kind, n in t.rounds_by_drafter.items():
        if not n:
            continue
        if kind == "none":
            e, cost = 1.0, costs.verify(1)
        elif len(uses(kind)) == 2 and kind != "pair":   # a tree: its nodes split evenly between the chains
            x, y = uses(kind)
            e = tree_tokens(p.get(x, [a]), p.get(y, [a]), k / 2, k / 2)
            cost = (first_extra if "model" in (x, y) else 0.0) + costs.verify(k + 1) \
                + k / 2 * (costs.step.get(x, fallback_step) + costs.step.get(y, fallback_step))
        elif kind == "pair":   # past the shared tokens, the same split; the branches' tokens add up
            shared = min(k, t.pair_shared / n)
            branch = (k - shared) / 2
            e = expected_tokens(p["lookup"], shared + branch) \
                + chain_product(p["lookup"], shared) * (expected_tokens(p["lookup_other"], branch) - 1)
            cost = costs.verify(k + 1)
        else:
            e = expected_tokens(p.get(kind, [a]), k)
            cost = (first_extra if kind == "model" else 0.0) + k * costs.step.get(kind, fallback_step) \
                + costs.verify(k + 1)
        tokens += n * e
        time += n * (cost + t.overhead_ms)
    return (tokens / time if time > 0 else None), flat


def speedup(calls: list[dict], baseline_calls: list[dict], costs: Costs) -> Speedup:
    base = Totals.of(baseline_calls).rate
    achieved = Totals.of(calls).rate
    predicted, flat = predicted_rate(calls, costs)
    ratio = lambda a, b: a / b if a is not None and b else None  # noqa: E731
    return Speedup(ratio(achieved, base), ratio(predicted, base), ratio(achieved, predicted), flat)


MAX_DRAFT = 16   # the engine's longest draft (engine.settings.MAX_DRAFT_LENGTH)


def best_chain_speedup(a: float, step_ms: float, costs: Costs, overhead_ms: float = 0.0) -> float:
    """Decode speedup over no draft of the best fixed-length chain (k = 1..MAX_DRAFT) from a
    drafter accepted at rate `a` at every position, costing `step_ms` a drafted token."""
    one = costs.verify(1) + overhead_ms
    best = 1.0    # k = 0: no draft
    for k in range(1, MAX_DRAFT + 1):
        tokens = expected_tokens([a], k)
        best = max(best, tokens * one / (k * step_ms + costs.verify(k + 1) + overhead_ms))
    return best


def acceptance_needed(target: float, step_ms: float, costs: Costs, overhead_ms: float = 0.0) -> float | None:
    """The least acceptance rate (the same at every position) at which a drafter costing `step_ms`
    a token reaches `target` x no draft's decode speed at these costs; None: not even a drafter
    that is always right does (the bound is then the draft's and the verify width's cost)."""
    if best_chain_speedup(1.0, step_ms, costs, overhead_ms) < target:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(30):    # the best speedup rises with a
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if best_chain_speedup(mid, step_ms, costs, overhead_ms) < target else (lo, mid)
    return hi
