"""Settings and results of one generation call, as plain dataclasses."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Callable

MAX_DRAFT_LENGTH = 16         # most tokens drafted per round (the `draftLength` setting's maximum)
MAX_COPY_LENGTH = 64          # ... by the copy drafter, whose copies of a rewritten region are right nearly always
DEVICES = ("auto", "cpu", "cuda", "mps")
DEVICE_PATTERN = r"^(auto|cpu|mps|cuda(:[0-9]+)?)$"   # DEVICES, and cuda:N for one GPU of several
DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZE = ("none", "int8", "int4")   # the local models' linear weights (engine/forward/quantize.py)


@dataclass
class EngineConfig:
    """Which models to load and where. `draft` may also be "ngram" or "none"."""
    target: str = "default"
    draft: str = "default"
    device: str = "auto"          # one of DEVICES, or cuda:N
    dtype: str = "auto"           # one of DTYPES
    trust_remote_code: bool = False
    device_map: str | None = None  # "auto": spread a target larger than one device (accelerate)
    max_cache_tokens: int = 8192  # KV budget of a model's sessions together; longer prompts are refused
    max_sessions: int = 4         # KV sessions kept per model (e.g. one per open document)
    threads: int = 0              # torch CPU threads; 0 = auto (engine/forward/threads.py)
    heal: bool = True             # token healing for a draft with another tokenizer
    lean: bool = True             # lean forward for Llama/Qwen2/GPTBigCode (False: transformers forward)
    kv_reuse: bool = True         # False: drop all KV caches before each request (benchmarks)
    lookup: bool = True           # prompt lookup alongside a draft model (the policy picks per round)
    cuda_graphs: bool = False     # static lean forward replayed as CUDA graphs (CUDA only)
    quantize: str = "none"        # the local models' linear weights: none, int8 or int4 (engine/forward/quantize.py)
    # the target's answers that are drafted from (engine/drafters/datastore.py): "auto" (the
    # target directory's datastore.npz, if any), "none", or a file
    datastore: str = "auto"


@dataclass
class GenerationSettings:
    max_new_tokens: int = 64
    draft_length: int | str = "auto"   # "auto" (engine/policy.py) or 1..MAX_DRAFT_LENGTH tokens a round
    temperature: float = 0.0           # 0 = greedy
    top_k: int = 0                     # 0 = off
    top_p: float = 1.0                 # 1 = off
    seed: int | None = None
    time_budget_ms: float | None = None  # return what is accepted once this is spent
    draft_confidence: float = 0.4      # auto: a draft model stops once its top probability drops below


def positions_reached(asked: int, accepted: int) -> int:
    """Draft positions a chain of `asked` tokens reached when its first `accepted` were accepted:
    every position up to the first rejection, that one included (a draft that stopped short of
    `asked` failed where it stopped). Acceptance by position is counted by this rule."""
    return min(asked, accepted + 1)


@dataclass
class DrafterCounts:
    """What one drafter did in a call: the same counters for every drafter."""
    proposals: int = 0    # proposals it made (a free drafter's every round, a draft model's when planned)
    proposed: int = 0     # tokens in them
    agreed: int = 0       # of those, tokens the target wrote too, verified or not
    chains: int = 0       # its chains the target verified
    drafted: int = 0      # tokens in those chains
    accepted: int = 0     # of those, accepted
    passes: int = 0       # its model's forward passes
    ms: float = 0.0       # proposing (a draft model's prefill included)

    def add(self, **counts) -> None:
        for name, n in counts.items():
            setattr(self, name, getattr(self, name) + n)


@dataclass
class GenerationStats:
    target_calls: int = 0       # target forward passes, prefill included
    draft_calls: int = 0        # draft forward passes
    rounds: int = 0             # draft-then-verify rounds
    drafted: int = 0            # draft tokens sent to the target for verification
    accepted: int = 0           # of those, accepted
    new_tokens: int = 0
    prefill_tokens: int = 0     # prompt tokens computed by the target
    reused_tokens: int = 0      # prompt tokens served from the target's KV cache
    draft_prefill_tokens: int = 0
    draft_reused_tokens: int = 0
    prefill_ms: float = 0.0     # the target's prefill (the draft model's counts as drafting)
    draft_ms: float = 0.0       # drafting with a model, its prefill and forward passes included
    plan_ms: float = 0.0        # each round's free proposals and plan (paid whatever is drafted)
    verify_ms: float = 0.0      # target forward passes of the rounds + acceptance
    latency_ms: float = 0.0
    target_forward_ms: float = 0.0  # time inside target forward passes (prefill included)
    draft_forward_ms: float = 0.0   # time inside draft forward passes
    # rounds by the drafter of the chain they verified, or "none"
    rounds_by_drafter: Counter = field(default_factory=Counter)
    drafters: dict = field(default_factory=dict)    # drafter name -> DrafterCounts
    sources: dict = field(default_factory=dict)     # where free proposals were found -> their DrafterCounts
    policy: dict = field(default_factory=dict)      # the policy's estimates after the call
    draft_trimmed: int = 0      # draft tokens never verified because they lay past a decided stop
    first_from_prefill: int = 0  # 1 when the answer's first token came from the prefill pass (not a round)
    # Exact counts behind the acceptance formula, per drafter: how many of its chains reached
    # position i (every earlier token accepted) and how many had token i accepted.
    by_position: dict = field(default_factory=dict)

    def counts(self, drafter: str) -> DrafterCounts:
        return self.drafters.setdefault(drafter, DrafterCounts())

    def source(self, source: str) -> DrafterCounts:
        return self.sources.setdefault(source, DrafterCounts())

    def count_positions(self, drafter: str, asked: int, accepted: int) -> None:
        reached = positions_reached(asked, accepted)
        if reached <= 0:
            return
        rec = self.by_position.setdefault(drafter, {"evaluated": [], "accepted": []})
        for counts in rec.values():
            counts.extend([0] * (reached - len(counts)))
        for i in range(reached):
            rec["evaluated"][i] += 1
            rec["accepted"][i] += i < accepted

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_target_call(self) -> float:
        # one target forward per round; the prefill (if any was needed) is not a decode call,
        # and the first token it gave is not a round's
        return (self.new_tokens - self.first_from_prefill) / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict:
        # A shallow copy: the dicts in it are this call's own (the policy's summary is built for
        # it), and dataclasses.asdict's deep copy of the whole cost about a millisecond a request.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["rounds_by_drafter"] = dict(self.rounds_by_drafter)
        d["drafters"] = {name: asdict(c) for name, c in self.drafters.items()}
        d["sources"] = {name: asdict(c) for name, c in self.sources.items()}
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["tokens_per_target_call"] = round(self.tokens_per_target_call, 4)
        # engine overhead: everything outside the models' forward passes
        d["overhead_ms"] = round(self.latency_ms - self.target_forward_ms - self.draft_forward_ms, 3)
        for k in ("prefill_ms", "draft_ms", "plan_ms", "verify_ms", "latency_ms", "target_forward_ms", "draft_forward_ms"):
            d[k] = round(d[k], 3)
        return d


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    stop_reason: str            # eos | max_tokens | time_budget | cancelled | context_full,
                                # or the reason a StopCheck gave
    stats: GenerationStats = field(default_factory=GenerationStats)
    figures: dict = field(default_factory=dict)   # the engine's own figures of the run, for the request's stats


@dataclass(frozen=True)
class TextStop:
    """A caller's verdict that the answer is decided (e.g. its last shown line is complete)."""
    reason: str   # the rule that decided, reported as the result's stop_reason
    chars: int    # how many characters of the generated text it took to know


# Called by the engine with the text generated so far (after each round, on drafts before they
# are verified, and on a draft model's text at each draft step); None while the answer is not
# decided yet.
StopCheck = Callable[[str], "TextStop | None"]
