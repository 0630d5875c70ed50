"""Region rewrites drafted by copying the region (engine/drafters/copy.py): tokens per target call
and latency of a 20-line rewrite, beside a 2-line completion on the same target.

    python -m bench.edit_rewrite                                  # demo and the 0.5B shape, replay and own
    python -m bench.edit_rewrite --targets demo --regions 1 --reps 1
    python -m bench.edit_rewrite --targets qwen2.5-coder-0.5b --modes replay --regions 3 --reps 3
    python -m bench.edit_rewrite --targets qwen2.5-coder-0.5b --modes replay --set quantize=int8 --threads 2

Rewrites: (a) a copy of the region, (b) one line changed, (c) an identifier renamed in all its
places (three or more). Every request decodes through the engine (`LocalEngine.generate`, its
policy kept across the requests as a server keeps it, the caches cleared before each request:
the prompt is computed cold), greedy, with the engine's free drafters (prompt lookup, and the
datastore where the target has one) and, for a rewrite, the copy drafter on the original region.

Two ways to get a target that rewrites, since neither target here can predict an edit:

- `replay`: the target's real forward passes, KV cache and verify costs, timed for real, with
  its answers SCRIPTED: after each real pass the logits are overwritten so that the target's
  greedy token is the scripted answer's next one (a proposal is accepted up to its first token
  that differs from the script, plus the target's own token). The script of a rewrite is a real
  20-line region of held-out code (pygls) rewritten as (a)-(c), after a prompt of the region
  then a marker; a 2-line completion's is the file's next two lines after a prompt of the same
  length, cut from the text before them. Targets: the shipped demo target and the
  Qwen2.5-Coder-0.5B shape with random weights (bench/real_shapes.py).
- `own` (the demo target only): its real greedy answers. The demo target does not copy a region
  it is asked to copy (after a prompt of the region, a marker and its first line it writes text
  of its own within a line), so its own answer of about 20 lines to a held-out prompt plays the
  rewritten region, and the copy drafter is given that answer as (a), or that answer edited as
  the region the target "rewrites" back: (b) a line changed, (c) its most frequent id renamed.
  The 2-line completion is its own answer to the same prompt, up to its second line end, with
  the demo's draft model, prompt lookup and datastore.

Per workload, over the requests after each workload's first: tokens per target call (the
answer's tokens after the prefill's first, per round), target calls a request, the rounds that
verified a copy, and the median latency (the prefill included) and decoding after the prefill;
then each rewrite's median over the completion's, both ways. The goals: (b) at least 6 tokens per target call, its
latency at most 1.3x the completion's.
"""
from __future__ import annotations

import keyword
import random
import re
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bench.common import bench_parser, usage_error
from engine import EngineConfig, GenerationSettings, LocalEngine
from engine.settings import TextStop
from lsp.arguments import number

PROG = "python -m bench.edit_rewrite"
TARGETS = ("demo", "qwen2.5-coder-0.5b")
MODES = ("replay", "own")
REWRITES = ("copy", "changed line", "renamed")
COMPLETION = "2-line completion"
LINES = 20              # a region's lines
MAX_TOKENS = 500        # a rewrite's prompt and answer together fit the demo target's 512 positions
MARKER = "\n# the region above, rewritten:\n"


def held_out_files() -> list[Path]:
    import pygls
    return sorted(p for p in Path(pygls.__file__).parent.rglob("*.py") if p.stat().st_size > 3000)


def regions(n: int, seed: int = 0) -> list[tuple[list[str], int]]:
    """`n` windows of LINES lines of held-out code (pygls), each line at most 72 characters and
    at most 3 of them blank, with an identifier used 3 times or more: (the file's lines, where
    the window starts)."""
    rng, out, files = random.Random(seed), [], held_out_files()
    while len(out) < n:
        lines = rng.choice(files).read_text(encoding="utf-8").splitlines(keepends=True)
        if len(lines) < 3 * LINES:
            continue
        at = rng.randrange(LINES, len(lines) - 2 * LINES)
        window = lines[at:at + LINES]
        if max(map(len, window)) <= 73 and sum(not w.strip() for w in window) <= 3 and renamed_name(window):
            out.append((lines, at))
    return out


def renamed_name(lines: list[str]) -> str | None:
    """The identifier a rename changes: the region's most used one of 3 characters or more
    (keywords and `self` aside), where it is used 3 times or more."""
    words = Counter(w for line in lines for w in re.findall(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b", line)
                    if not keyword.iskeyword(w) and w != "self")
    name, n = max(words.items(), key=lambda kv: (kv[1], kv[0]), default=(None, 0))
    return name if n >= 3 else None


def rewritten(lines: list[str], kind: str) -> str:
    """The region rewritten: as it is, with one line changed (an argument added to its last call,
    or a line of its own, in the middle of the region), or with an identifier renamed."""
    if kind == "copy":
        return "".join(lines)
    if kind == "renamed":
        name = renamed_name(lines)
        new = "value" if name != "value" else "result"
        return "".join(re.sub(rf"\b{name}\b", new, line) for line in lines)
    mid = len(lines) // 2
    at = next((i for i in sorted(range(len(lines)), key=lambda i: abs(i - mid)) if ")" in lines[i]), mid)
    line = lines[at]
    cut = line.rindex(")") if ")" in line else len(line.rstrip("\n"))
    changed = line[:cut] + (", timeout=timeout" if line[cut - 1:cut] != "(" else "timeout=timeout") + line[cut:]
    return "".join(lines[:at] + [changed] + lines[at + 1:])


class ScriptedSession:
    """A target KV session whose answer is a script: each pass runs for real, then each logits
    row of a position in the answer gets the script's next id (the target's end id past the
    script's end) far above the rest, so the greedy choice is the script's wherever the
    sequence so far follows it (where it does not, verification has already stopped)."""

    def __init__(self, session, start: int, script: list[int], end_id: int):
        self.session, self.start, self.script, self.end_id = session, start, script, end_id

    def __getattr__(self, name):
        return getattr(self.session, name)

    def advance(self, ids: list[int], n_logits: int = 1) -> torch.Tensor:
        logits = self.session.advance(ids, n_logits)
        first = len(ids) - n_logits + 1 - self.start       # the answer index row 0 predicts
        want = [self.script[i] if 0 <= i < len(self.script) else self.end_id
                for i in range(first, first + n_logits)]
        logits[torch.arange(n_logits), torch.tensor(want)] = 1e9
        return logits


class ScriptedPool:
    """The engine's KV pool, its sessions scripted (ScriptedSession) while `script` is set."""

    def __init__(self, pool, end_id: int):
        self.pool, self.end_id = pool, end_id
        self.script: tuple[int, list[int]] | None = None     # (the prompt's length, the answer)

    def __getattr__(self, name):
        return getattr(self.pool, name)

    def session_for(self, ids: list[int]):
        session = self.pool.session_for(ids)
        return session if self.script is None else ScriptedSession(session, *self.script, self.end_id)


@dataclass
class Workload:
    name: str
    prompt: list[int]
    script: list[int] | None = None       # replay: the answer the target writes
    copy_source: list[int] = field(default_factory=list)
    max_new: int = 0
    draft_ids: list[int] | None = None    # the draft model's prompt (own)
    lines: int = 0                        # a completion: the answer ends at this line end


@dataclass
class Row:
    """A workload's requests: counts summed, times kept one by one (a request that another
    process held up on this shared machine moves a median little)."""
    requests: int = 0
    tokens: int = 0
    rounds: int = 0
    calls: int = 0
    copy_rounds: int = 0
    latency_ms: list[float] = field(default_factory=list)
    decode_ms: list[float] = field(default_factory=list)     # after the prefill

    def add(self, stats) -> None:
        self.requests += 1
        self.tokens += stats.new_tokens - stats.first_from_prefill
        self.rounds += stats.rounds
        self.calls += stats.target_calls
        self.copy_rounds += stats.rounds_by_drafter.get("copy", 0)
        self.latency_ms.append(stats.latency_ms)
        self.decode_ms.append(stats.latency_ms - stats.prefill_ms)


def lines_stop(lines: int):
    """A StopCheck: the answer is decided at its `lines`-th line end."""
    def check(text: str) -> TextStop | None:
        ends = [i for i, c in enumerate(text) if c == "\n"]
        return TextStop("lines", ends[lines - 1] + 1) if len(ends) >= lines else None
    return check


def run(engine: LocalEngine, pool: ScriptedPool | None, w: Workload):
    engine.clear_caches()
    if pool is not None:
        pool.script = (len(w.prompt), w.script) if w.script is not None else None
    settings = GenerationSettings(max_new_tokens=w.max_new)
    return engine.generate(w.prompt, w.draft_ids, settings, copy_source=w.copy_source,
                           stop_check=lines_stop(w.lines) if w.lines else None)


def ids_of(engine: LocalEngine, text: str) -> list[int]:
    return engine.target.vocab.encode_text(text)


def replay_workloads(engine: LocalEngine, n: int) -> list[Workload]:
    """(a)-(c) and a 2-line completion at each of `n` regions that fit (MAX_TOKENS)."""
    bos = engine.target.tokenizer.bos_token_id
    head = [bos] if bos is not None else []
    out, seed = [], 0
    while len(out) < 4 * n:
        (lines, at), = regions(1, seed)
        seed += 1
        region = lines[at:at + LINES]
        source = ids_of(engine, "".join(region))
        prompt = head + source + ids_of(engine, MARKER)
        scripts = {kind: ids_of(engine, rewritten(region, kind)) for kind in REWRITES}
        if len(prompt) + max(map(len, scripts.values())) + 1 > MAX_TOKENS:
            continue
        out += [Workload(kind, prompt, script, source, len(script) + 1) for kind, script in scripts.items()]
        mid = at + LINES // 2
        before = ids_of(engine, "".join(lines[:mid]))[-(len(prompt) - len(head)):]
        script = ids_of(engine, "".join(lines[mid:mid + 2]))
        out.append(Workload(COMPLETION, head + before, script, max_new=len(script) + 1))
    return out


def own_workloads(engine: LocalEngine, n: int) -> list[Workload]:
    """The demo target's own answers as the regions: (a)-(c) (the region edited where the target
    keeps its answer) and its 2-line completion, after `n` held-out prompts."""
    from bench.common import held_out_prompts, prompt_ids

    vocab, out = engine.target.vocab, []
    for text in held_out_prompts(n, 400, seed=1):
        prompt, draft_ids = prompt_ids(engine, text)
        engine.clear_caches()
        answer = engine.generate(prompt, draft_ids, GenerationSettings(max_new_tokens=MAX_TOKENS - len(prompt)),
                                 stop_check=lines_stop(LINES)).token_ids
        lines, line = [], []
        for t in answer:
            line.append(t)
            if b"\n" in vocab.bytes_of([t]):
                lines.append(line)
                line = []
        lines += [line] if line else []
        mid = len(lines) // 2
        other = [t for t in prompt[1:] if t not in answer] or [t + 1 for t in prompt[1:]]
        common = Counter(t for t in answer if b"\n" not in vocab.bytes_of([t])).most_common(1)[0][0]
        sources = {"copy": answer,
                   "changed line": [t for ln in lines[:mid] + [(other * 8)[:len(lines[mid])]] + lines[mid + 1:]
                                    for t in ln],
                   "renamed": [other[0] if t == common else t for t in answer]}
        out += [Workload(kind, prompt, None, source, len(answer), draft_ids) for kind, source in sources.items()]
        out.append(Workload(COMPLETION, prompt, None, max_new=64, draft_ids=draft_ids, lines=2))
    return out


def load(target: str, mode: str, settings: dict) -> LocalEngine:
    """The target's engine; `settings`: EngineConfig fields (dtype, quantize, threads)."""
    if target == "demo":
        name = "default"
    else:
        from bench.real_shapes import model_dir
        name = str(model_dir(target, log=lambda *a: print(*a, file=sys.stderr)))
    return LocalEngine(EngineConfig(target=name, draft="default" if mode == "own" else "ngram", **settings))


def measure(target: str, mode: str, n: int, reps: int, settings: dict | None = None) -> dict[str, Row]:
    engine = load(target, mode, settings or {})
    pool = None
    if mode == "replay":
        pool = engine.pool = ScriptedPool(engine.pool, engine.target.tokenizer.eos_token_id)
    work = replay_workloads(engine, n) if mode == "replay" else own_workloads(engine, n)
    rows = {name: Row() for name in (*REWRITES, COMPLETION)}
    for rep in range(reps + 1):       # the first pass warms the policy and the kernels up: not counted
        for i in range(len(work)):
            w = work[(i + rep) % len(work)]
            result = run(engine, pool, w)
            if w.script is not None and result.token_ids != w.script:
                raise SystemExit(f"{PROG}: the scripted target wrote something else ({w.name})")
            if rep:
                rows[w.name].add(result.stats)
    return rows


def report(target: str, mode: str, rows: dict[str, Row]) -> list[str]:
    base = rows[COMPLETION]
    blat, bdec = statistics.median(base.latency_ms), statistics.median(base.decode_ms)
    out = [f"\n{target}, {mode}: {base.requests} requests per workload (latency: medians)\n",
           ("| workload | tokens / target call | target calls | copy rounds | latency ms | after prefill ms "
            "| latency / completion's | after prefill / completion's |"),
           "|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lat, dec = statistics.median(r.latency_ms), statistics.median(r.decode_ms)
        out.append(f"| {name} | {r.tokens / max(1, r.rounds):.2f} | {r.calls / r.requests:.1f} | "
                   f"{r.copy_rounds / max(1, r.rounds):.0%} | {lat:.0f} | {dec:.0f} | "
                   f"{lat / blat:.2f}x | {dec / bdec:.2f}x |")
    return out


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated: {', '.join(TARGETS)}")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated: replay, own (the demo target only)")
    ap.add_argument("--regions", type=number(int, 1), default=3, help="regions (replay) or prompts (own)")
    ap.add_argument("--reps", type=number(int, 1), default=2, help="passes over the workloads after a first")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="dtype=... or quantize=... for the targets (repeatable)")
    ap.add_argument("--threads", type=number(int, 1), default=None, help="torch threads (default: the engine's)")
    args = ap.parse_args(argv)
    targets, modes = args.targets.split(","), args.modes.split(",")
    if bad := [t for t in targets if t not in TARGETS] or [m for m in modes if m not in MODES]:
        return usage_error(PROG, f"unknown --targets or --modes value {bad[0]!r}")
    settings = {} if args.threads is None else {"threads": args.threads}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in ("dtype", "quantize") or not value:
            return usage_error(PROG, f"--set {item!r}: dtype=VALUE or quantize=VALUE")
        settings[name] = value
    t0 = time.perf_counter()
    for target in targets:
        for mode in modes:
            if mode == "own" and target != "demo":
                continue
            print("\n".join(report(target, mode, measure(target, mode, args.regions, args.reps, settings))), flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s, torch threads {torch.get_num_threads()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
