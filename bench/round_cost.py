"""What a speculative round costs outside the models' own math: the draft model's step (the
other-tokenizer bookkeeping around its forward) and the engine's round (planning, scoring,
verification, stop checks, stats), for this tree's engine and an older commit's, side by side
in one run.

    python -m bench.round_cost                          # against DEFAULT_BASELINE, k = 4 and auto
    python -m bench.round_cost --baseline HEAD~2 --draft-lengths 4 --reps 3
    python -m bench.round_cost --baseline none          # this tree alone
    python -m bench.round_cost --baseline HEAD~1 --workload end-of-line --draft-lengths auto --reps 4
    python -m bench.round_cost --baseline none --draft-lengths auto --cold-probe

Both engines run the shipped pair on the same held-out prompts (bench.common.held_out_prompts,
as `specfill generate` runs them: no cache reuse between prompts), one torch thread, the two
engines alternating prompt by prompt. `--workload end-of-line` asks instead for the multi-line
answer at the end of 12 code lines of two held-out real files (bench.end_of_line, `--real-files`),
each engine behind this tree's completion pipeline (in process, no server), where a round also
checks the answer's stop rules and looks the documents up; a baseline engine must run behind
this tree's pipeline for that. "Model math" is the time inside the lean models' own
forward (LeanLlama / LeanBigCode `__call__`); everything else the engine does is outside it:
turning ids into tensors and back, KV-session bookkeeping, drafting through text, planning,
verification, stop checks and stats. The draft model's prefill (its first round in a request)
is a prefill, not a step: it is left out of the step and round figures and shown on its own.
Every output is checked against the other engine's (greedy: they must be equal).

`--cold-probe` adds a pass that shows why the Python around the math costs what it does: every
round, right after its target forward, asks the policy for a fixed plan, then asks again at
once. The forward streams the target's weights through the caches, so the first asking finds
its code and data evicted; the second finds them warm.
"""
from __future__ import annotations

import importlib
import inspect
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from io import BytesIO
from pathlib import Path

import torch

from bench.common import ROOT, bench_parser, held_out_prompts, prompt_ids, usage_error
from cli.generate import draft_length
from lsp.arguments import number

PROG = "python -m bench.round_cost"
# An engine whose round had more overhead outside the models' math: the default reference.
DEFAULT_BASELINE = "2eb4f92"
# Engine functions timed, by the module that holds the round (engine/loop.py; in older commits
# engine/generate.py): what each is, in the figures. The plan, the draft model's propose and its
# prefill are timed on the engine's own policy and drafter (`instrument`).
PHASES = {
    "loop": {"propose": "draft", "score": "score", "verify": "verify", "observe": "record", "emit": "accept"},
    "generate": {"_draft": "draft", "_begin_model": "draft prefill", "plan_round": "plan", "_score": "score",
                 "_verify": "verify", "_record": "record", "_accept": "accept"},
}
ROUND_PHASES = ("draft", "score", "verify", "record", "accept")
COLUMNS = (*ROUND_PHASES, "loop", "plan", "propose")   # plan and propose are parts of draft


def commit_of(ref: str) -> str | None:
    """The short hash of the commit git `ref` names in this checkout; None if it names none."""
    done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--short", f"{ref}^{{commit}}"], cwd=ROOT,
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def draft_lengths(value: str) -> list[int | str]:
    """--draft-lengths: comma-separated, each 'auto' or a number of tokens (as `specfill generate
    --draft-length` takes it)."""
    return [draft_length(v.strip()) for v in value.split(",")]


def tree_at(sha: str, into: Path, *paths: str) -> Path:
    """The tree at commit `sha` (only `paths` where given), written out under `into`."""
    data = subprocess.run(["git", "archive", "--format=tar", sha, *paths], cwd=ROOT, capture_output=True,
                          check=True).stdout
    top = into / f"at_{sha}"
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(top, filter="data")
    return top


def engine_at(sha: str, into: Path):
    """The `engine` package as it was at commit `sha`, imported under its own name, so both
    engines run in one process (it imports nothing outside itself but torch, transformers,
    tokenizers)."""
    top = tree_at(sha, into, "engine")
    name = f"engine_at_{sha}"
    (top / "engine").rename(top / name)
    sys.path.insert(0, str(top))
    return importlib.import_module(name)


def module_of(pkg, *names: str):
    """The first of `names` (module paths inside an engine package) that package has: a module
    may sit elsewhere in an older commit's engine."""
    for name in names[:-1]:
        try:
            return importlib.import_module(f"{pkg.__name__}.{name}")
        except ModuleNotFoundError:
            pass
    return importlib.import_module(f"{pkg.__name__}.{names[-1]}")


class Timers:
    """Inclusive wall time per phase, and the model math done inside each phase."""

    def __init__(self):
        self.ms = defaultdict(float)
        self.calls = defaultdict(int)
        self.math = defaultdict(float)     # phase -> model math inside it
        self.math_calls = defaultdict(int)
        self.stack: list[str] = []

    def wrap(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name, None)
        if fn is None:
            return
        timers = self

        def timed(*args, **kwargs):
            timers.stack.append(label)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timers.ms[label] += (time.perf_counter() - t0) * 1000
                timers.calls[label] += 1
                timers.stack.pop()
        setattr(owner, name, timed)

    def wrap_math(self, owner, name: str, label: str) -> None:
        fn = getattr(owner, name)
        timers = self

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                ms = (time.perf_counter() - t0) * 1000
                for phase in set(timers.stack):
                    timers.math[phase] += ms
                    timers.math_calls[phase] += 1
                timers.math[label] += ms
                timers.calls[label] += 1
        setattr(owner, name, timed)

    def reset(self) -> None:
        self.ms.clear()
        self.calls.clear()
        self.math.clear()
        self.math_calls.clear()


def instrument(pkg, engine) -> Timers:
    """Time the engine's phases and its models' math (patched on this engine's classes and
    modules only)."""
    timers = Timers()
    name, rounds = round_module(pkg)
    lean = module_of(pkg, "forward.lean", "lean")
    for fn, label in PHASES[name].items():
        timers.wrap(rounds, fn, label)
    timers.wrap_math(lean.LeanLlama, "__call__", "target math")
    timers.wrap_math(lean.LeanBigCode, "__call__", "draft math")
    model = engine.drafters.model
    if name == "loop":          # this instance only
        for fn in ("plan", "plan_fixed"):
            timers.wrap(engine.policy, fn, "plan")
        if model is not None:
            timers.wrap(model, "begin", "draft prefill")
    if model is not None:
        timers.wrap(model, "propose", "propose")   # this instance only
    return timers


def round_module(pkg):
    """(its name, the module) of an engine package's round: loop, or generate in older commits."""
    try:
        return "loop", importlib.import_module(pkg.__name__ + ".loop")
    except ModuleNotFoundError:
        return "generate", importlib.import_module(pkg.__name__ + ".generate")


def cold_probe(pkg, engine, run, n: int) -> tuple[float, float, int]:
    """What the target's forward leaves the Python after it: one pass more over the prompts (or
    positions), in which every round, right after its target forward, asks the policy for a
    fixed plan (pure: the engine's state is not touched) and at once asks again. Returns the
    median us of the first and of the second, and the rounds probed. The pass's own figures are
    not reported (the probes lengthen its rounds)."""
    name, gen = round_module(pkg)
    if name == "loop":
        drafters = importlib.import_module(pkg.__name__ + ".drafters")
        offers = {"lookup": drafters.Draft(list(range(8)), match=3, source="prompt")}
        # (engines that verified trees took whether the target could: one argument more)
        extra = (True,) * (len(inspect.signature(engine.policy.plan).parameters) - 4)
        plan, score_name = (lambda: engine.policy.plan(offers, True, True, 16, *extra)), "score"
    else:
        control = importlib.import_module(pkg.__name__ + ".control")
        offer = control.LookupOffer(tokens=8, match=3, source="prompt")
        plan, score_name = (lambda: engine.memory.controller.plan(offer, True, 16, True, True, 0)), "_score"
    after_forward, again = [], []
    score = getattr(gen, score_name, None)
    if score is None:
        raise SystemExit(f"--cold-probe: this engine's round has no {score_name}() to probe after")

    def probed(*args, **kwargs):
        out = score(*args, **kwargs)
        for times in (after_forward, again):
            t0 = time.perf_counter()
            plan()
            times.append((time.perf_counter() - t0) * 1e6)
        return out
    setattr(gen, score_name, probed)
    try:
        for i in range(n):
            run(i, "probe", defaultdict(float))
    finally:
        setattr(gen, score_name, score)
    return statistics.median(after_forward), statistics.median(again), len(again)


def count(result, totals: dict) -> list[int]:
    """Add one engine run's figures to `totals`; its token ids."""
    s = result.stats
    totals["latency"] += s.latency_ms
    totals["prefill"] += s.prefill_ms
    totals["rounds"] += s.rounds
    totals["new"] += s.new_tokens
    totals["drafted"] += s.drafted
    totals["calls"] += 1
    estimates = getattr(s, "policy", None) or getattr(s, "controller", None)
    if estimates:
        totals["step_ms"] = (estimates.get("model") or {}).get("step_ms")
    return result.token_ids


def end_of_line_runner(engine, length):
    """(positions, run): `run(position, rep, totals)` asks this tree's completion pipeline, over
    `engine`, for the answer at one end-of-line position (a fresh document each time) and counts
    the engine's run (its token ids come back; [] where it did not decode)."""
    from bench.end_of_line import end_of_line_positions, real_files
    from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest

    pipeline = CompletionPipeline(engine)
    options = CompletionOptions(draft_length=length)
    positions = [p for f in real_files(2) for p in end_of_line_positions(f, 6)]
    ran = []
    generate = engine.generate

    def recorded(*args, **kwargs):
        ran.append(generate(*args, **kwargs))
        return ran[-1]
    engine.generate = recorded   # this instance only

    def run(i: int, rep: int, totals: dict) -> list[int]:
        pos, ran[:] = positions[i], []
        req = CompletionRequest(f"file:///round_cost/{rep}/{i}/{pos.file}", pos.text, pos.line, pos.character)
        pipeline.note_document(req.uri, pos.text, pos.line)
        try:
            pipeline.complete(req, options)
        finally:
            pipeline.forget_document(req.uri)
        return count(ran[-1], totals) if ran else []
    return positions, run


def report(name: str, t: Timers, totals: dict) -> dict:
    """The figures of one engine and configuration (printed and returned)."""
    rounds = max(1, int(totals["rounds"]))
    prefill_draft = t.ms["draft prefill"]
    decode = totals["latency"] - totals["prefill"] - prefill_draft
    round_ms = sum(t.ms[p] for p in ROUND_PHASES) - prefill_draft
    math = t.math["draft"] - t.math["draft prefill"] + t.math["score"]
    outside = decode - math
    proposes = t.calls["propose"]
    prop = {}
    if proposes:
        draft_fwd = t.math["propose"]
        prop = {"calls": proposes, "ms": t.ms["propose"] / proposes, "math": draft_fwd / proposes,
                "outside": (t.ms["propose"] - draft_fwd) / proposes,
                "forwards": t.math_calls["propose"] / proposes}
    phases = {p: (t.ms[p] - t.math[p]) / rounds for p in ROUND_PHASES}
    phases["draft"] -= (prefill_draft - t.math["draft prefill"]) / rounds
    phases["loop"] = (decode - round_ms) / rounds
    # inside "draft": the policy's plan and the draft model's propose, outside its math
    phases["plan"] = t.ms["plan"] / rounds
    phases["propose"] = (t.ms["propose"] - t.math["propose"]) / rounds
    return {"name": name, "rounds": rounds, "decode_ms_per_round": decode / rounds,
            "math_ms_per_round": math / rounds, "outside_ms_per_round": outside / rounds,
            "outside_share": outside / decode if decode > 0 else 0.0, "phases": phases, "propose": prop,
            "tokens_per_round": totals["new"] / rounds, "drafted_per_round": totals["drafted"] / rounds,
            "step_ms": totals.get("step_ms"), "draft_prefill_ms": prefill_draft}


def print_table(rows: list[dict]) -> None:
    print(f"{'engine':<20} {'rounds':>6} {'drafted':>7} {'tokens':>6} {'ms/round':>8} {'math':>7} {'outside':>7} "
          f"{'share':>6} | outside the math, ms per round: " + " ".join(f"{p:>7}" for p in COLUMNS))
    for r in rows:
        print(f"{r['name']:<20} {r['rounds']:>6} {r['drafted_per_round']:>7.2f} {r['tokens_per_round']:>6.2f} "
              f"{r['decode_ms_per_round']:>8.3f} {r['math_ms_per_round']:>7.3f} {r['outside_ms_per_round']:>7.3f} "
              f"{r['outside_share']:>6.1%} | " + " " * 32 + " ".join(f"{r['phases'][p]:>7.3f}" for p in COLUMNS))
    print(f"\n{'engine':<20} {'proposes':>8} {'ms/propose':>10} {'math':>7} {'outside':>8} {'forwards':>8} "
          f"{'math/forward':>12} {'outside/forward':>15} {'policy step_ms':>18}")
    for r in rows:
        p = r["propose"]
        if not p:
            continue
        fw = p["forwards"] or 1
        step = "-" if r["step_ms"] is None else f"{r['step_ms']:.3f}"
        print(f"{r['name']:<20} {p['calls']:>8} {p['ms']:>10.3f} {p['math']:>7.3f} {p['outside']:>8.3f} "
              f"{fw:>8.2f} {p['math'] / fw:>12.3f} {p['outside'] / fw:>15.3f} {step:>18}")


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__, description="What a speculative round costs outside the models' own math, "
                                                "this tree's engine beside an older commit's.")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref whose engine runs alongside ('none' to skip)")
    ap.add_argument("--ref", default=None, help="git ref of the engine to measure (default: this working tree's)")
    ap.add_argument("--prompts", type=number(int, 1), default=12)
    ap.add_argument("--prompt-chars", type=number(int, 1), default=1200)
    ap.add_argument("--max-new-tokens", type=number(int, 1), default=48)
    ap.add_argument("--draft-lengths", type=draft_lengths, default="4,auto",
                    help="comma-separated: numbers and/or auto")
    ap.add_argument("--reps", type=number(int, 1), default=2, help="passes over the prompts (the first one warms up)")
    ap.add_argument("--workload", choices=("generate", "end-of-line"), default="generate",
                    help="held-out left-to-right prompts (as specfill generate), or end-of-line answers "
                         "through the completion pipeline (its own positions and the pipeline's maxNewTokens: "
                         "--prompts, --prompt-chars and --max-new-tokens are for generate)")
    ap.add_argument("--cold-probe", action="store_true",
                    help="one more pass: how much slower the same Python runs right after a target forward")
    args = ap.parse_args(argv)
    refs = {"--ref": args.ref, "--baseline": None if args.baseline == "none" else args.baseline}
    shas = {option: commit_of(ref) for option, ref in refs.items() if ref is not None}
    for option, sha in shas.items():
        if sha is None:
            return usage_error(PROG, f"{option}: {refs[option]!r} names no git commit here")
    torch.set_num_threads(1)
    import engine as this_pkg

    with tempfile.TemporaryDirectory() as tmp:
        pkgs = [("this tree", this_pkg)]
        if "--ref" in shas:
            pkgs = [(f"engine {shas['--ref']}", engine_at(shas["--ref"], Path(tmp)))]
        if "--baseline" in shas:
            pkgs.append((f"baseline {shas['--baseline']}", engine_at(shas["--baseline"], Path(tmp))))
        eol = args.workload == "end-of-line"
        texts = [] if eol else held_out_prompts(args.prompts, args.prompt_chars)
        what = "the end of 12 code lines of 2 held-out real files, through the completion pipeline" if eol else \
            f"{args.prompts} prompts of {args.prompt_chars} characters, {args.max_new_tokens} new tokens"
        print(f"torch {torch.__version__}, 1 thread; {what}, {args.reps} passes (the first not counted); shipped pair")
        for length in args.draft_lengths:
            engines = []
            for label, pkg in pkgs:
                eng_mod = importlib.import_module(pkg.__name__ + ".engine")
                set_mod = importlib.import_module(pkg.__name__ + ".settings")
                local = getattr(eng_mod, "LocalEngine", None) or eng_mod.Engine   # (older commits: Engine)
                engine = local(set_mod.EngineConfig(threads=1, kv_reuse=eol))
                if eol:
                    positions, run = end_of_line_runner(engine, length)
                else:
                    settings = set_mod.GenerationSettings(max_new_tokens=args.max_new_tokens, draft_length=length)
                    prompts = [prompt_ids(engine, t) for t in texts]
                    run = (lambda i, rep, totals, e=engine, s=settings, ps=prompts:
                           count(e.generate(ps[i][0], ps[i][1], s), totals))
                engines.append((label, run, instrument(pkg, engine), engine))
            n = len(positions) if eol else len(texts)
            outputs: dict[tuple[str, int], list[int]] = {}
            totals = {label: defaultdict(float) for label, *_ in engines}
            for rep in range(args.reps):
                for _, _, timers, _ in engines:
                    timers.reset()
                totals = {label: defaultdict(float) for label, *_ in engines}
                for i in range(n):
                    order = engines if i % 2 == 0 else engines[::-1]
                    for label, run, timers, _ in order:
                        outputs[(label, i)] = run(i, rep, totals[label])
            rows = [report(label, timers, totals[label]) for label, _, timers, _ in engines]
            same = sum(len({tuple(outputs[(label, i)]) for label, *_ in engines}) == 1 for i in range(n))
            print(f"\n## draft length {length}: outputs equal across engines {same}/{n}\n")
            print_table(rows)
            if args.cold_probe:
                (label, run, _, engine), pkg = engines[0], pkgs[0][1]
                cold, warm, probed = cold_probe(pkg, engine, run, n)
                print(f"\ncold caches ({label}): the policy's plan for a fixed offer took {cold:.1f} us right "
                      f"after a round's target forward and {warm:.1f} us asked again at once ({cold / warm:.1f}x; "
                      f"medians over {probed} rounds of one more pass)")
            if len(rows) == 2:
                a, b = rows
                ratio = lambda x, y: f"{y / x:.2f}x" if x > 0 else "-"  # noqa: E731
                line = (f"\n{a['name']} vs {b['name']}: outside the math per round {b['outside_ms_per_round']:.3f} -> "
                        f"{a['outside_ms_per_round']:.3f} ms ({ratio(a['outside_ms_per_round'], b['outside_ms_per_round'])} less)")
                if a["propose"] and b["propose"]:
                    line += (f"; per propose outside the draft's math {b['propose']['outside']:.3f} -> "
                             f"{a['propose']['outside']:.3f} ms ({ratio(a['propose']['outside'], b['propose']['outside'])} less)")
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
