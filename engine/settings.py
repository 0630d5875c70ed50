"""Settings and results of one generation call, as plain dataclasses."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

from .control import positions_reached

MAX_DRAFT_LENGTH = 16         # most tokens drafted per round (the `draftLength` setting's maximum)
DEVICES = ("auto", "cpu", "cuda", "mps")
DEVICE_PATTERN = r"^(auto|cpu|mps|cuda(:[0-9]+)?)$"   # DEVICES, and cuda:N for one GPU of several
DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZE = ("none", "int8", "int4")   # the local models' linear weights (engine/quantize.py)
DRAFT_CONTROLS = ("cost", "heuristic")   # how `draft_length: auto` decides (engine/control.py)


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
    threads: int = 0              # torch CPU threads; 0 = auto (half the cores on CPU, at most 8)
    heal: bool = True             # token healing for a draft with another tokenizer
    lean: bool = True             # lean forward for Llama/Qwen2/GPTBigCode (False: transformers forward)
    kv_reuse: bool = True         # False: drop all KV caches before each request (benchmarks)
    lookup: bool = True           # prompt lookup alongside a draft model (the controller picks per round)
    cuda_graphs: bool = False     # static lean forward replayed as CUDA graphs (CUDA only; run on one H200 so far)
    quantize: str = "none"        # the local models' linear weights: none, int8 or int4 (engine/quantize.py)
    # the target's answers that lookup drafts from too (engine/datastore.py): "auto" (the
    # target directory's datastore.npz, if any), "none", or a file
    datastore: str = "auto"


@dataclass
class GenerationSettings:
    max_new_tokens: int = 64
    draft_length: int | str = "auto"   # "auto" or 1..16 tokens proposed per round
    temperature: float = 0.0           # 0 = greedy
    top_k: int = 0                     # 0 = off
    top_p: float = 1.0                 # 1 = off
    seed: int | None = None
    stop_strings: tuple[str, ...] = ()
    time_budget_ms: float | None = None  # return what is accepted once this is spent
    draft_confidence: float = 0.4      # auto mode: stop a draft when its own top prob drops below
    draft_control: str = "cost"        # auto mode: "cost" (drafter and k that maximise tokens/ms,
                                       # engine/control.py) or "heuristic" (the old +2/-1 rule)

    @property
    def heuristic(self) -> bool:
        """Whether the old +2/-1 rule sets each round's draft length (draft length auto)."""
        return self.draft_length == "auto" and self.draft_control == "heuristic"

    @property
    def cost_aware(self) -> bool:
        """Whether the cost-aware controller decides each round: draft length auto, and not the
        old +2/-1 rule (plan_round's choice, engine/generate.py)."""
        return self.draft_length == "auto" and not self.heuristic


@dataclass
class GenerationStats:
    target_calls: int = 0       # target forward passes, prefill included
    draft_calls: int = 0        # draft forward passes
    rounds: int = 0             # draft-then-verify rounds
    drafted: int = 0            # candidate tokens sent to the target for verification (a tree's every node)
    accepted: int = 0           # of those, accepted
    new_tokens: int = 0
    prefill_tokens: int = 0     # prompt tokens computed by the target
    reused_tokens: int = 0      # prompt tokens served from the target's KV cache
    draft_prefill_tokens: int = 0
    draft_reused_tokens: int = 0
    prefill_ms: float = 0.0     # the target's prefill (the draft model's counts as drafting)
    draft_ms: float = 0.0       # drafting, draft forward passes included
    draft_first_ms: float = 0.0  # of that, the draft model's first pass of its rounds (it catches up there)
    plan_ms: float = 0.0        # each round's lookup search and plan (paid whatever is drafted)
    verify_ms: float = 0.0      # target forward passes of the rounds + acceptance
    latency_ms: float = 0.0
    target_forward_ms: float = 0.0  # time inside target forward passes (prefill included)
    draft_forward_ms: float = 0.0   # time inside draft forward passes
    final_draft_length: int = 0    # the heuristic's k after the call (0 under the controller)
    rounds_by_drafter: dict = field(default_factory=lambda: {"none": 0, "lookup": 0, "model": 0, "tree": 0, "pair": 0})
    controller: dict = field(default_factory=dict)   # the controller's estimates after the call
    draft_trimmed: int = 0      # draft tokens never verified because they lay past a decided stop
    first_from_prefill: int = 0  # 1 when the answer's first token came from the prefill pass (not a round)
    tree_passes: int = 0        # tree rounds whose chains branched: both verified in one pass
    pair_shared: int = 0        # pair rounds: the tokens their two chains shared before the branch, summed
    # Exact counts behind the acceptance formula, per drafter ("lookup", "model"): how many drafts
    # reached position i (every earlier token accepted) and how many had token i accepted.
    by_position: dict = field(default_factory=dict)

    def count_round(self, drafter: str, drafted: int, accepted: int, draft_ms: float, verify_ms: float) -> None:
        self.rounds += 1
        self.rounds_by_drafter[drafter] += 1
        self.drafted += drafted
        self.accepted += accepted
        self.draft_ms += draft_ms
        self.verify_ms += verify_ms

    def count_positions(self, drafter: str, asked: int, accepted: int) -> None:
        """A chain of `drafter` asked for `asked` tokens had its first `accepted` accepted: the
        positions it reached were evaluated (`positions_reached`, the rule the controller counts by)."""
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
        # A shallow copy: the dicts in it are this call's own (the controller's summary is built
        # for it), and dataclasses.asdict's deep copy cost ~1 ms a request.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["tokens_per_target_call"] = round(self.tokens_per_target_call, 4)
        # engine overhead: everything outside the models' forward passes
        d["overhead_ms"] = round(self.latency_ms - self.target_forward_ms - self.draft_forward_ms, 3)
        for k in ("prefill_ms", "draft_ms", "draft_first_ms", "plan_ms", "verify_ms", "latency_ms", "target_forward_ms", "draft_forward_ms"):
            d[k] = round(d[k], 3)
        return d


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    stop_reason: str            # eos | stop_string | max_tokens | time_budget | cancelled | context_full,
                                # or the reason a StopCheck gave
    stats: GenerationStats = field(default_factory=GenerationStats)


@dataclass(frozen=True)
class TextStop:
    """A caller's verdict that the answer is decided (e.g. its last shown line is complete)."""
    reason: str   # the rule that decided, reported as the result's stop_reason
    chars: int    # how many characters of the generated text it took to know


# Called by the engine with the text generated so far (after each round, on drafts before they
# are verified, and on a draft model's text at each draft step); None while the answer is not
# decided yet.
StopCheck = Callable[[str], "TextStop | None"]
