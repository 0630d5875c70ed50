"""The benchmark suite: every workload in one run, the draft configurations side by side.

    python -m bench.suite              # or: specfill bench --suite    (about 2 minutes on a 2-core VM)
    python -m bench.suite --quick      # a minute or two: fewer prompts, positions and typed lines
    python -m bench.suite --workloads generate,end-of-line --configs ngram,default
    python -m bench.suite --baseline main      # each configuration beside main's, in the same run

Workloads:
  generate     the engine as `specfill generate` runs it, on held-out prompts (pygls source, left
               to right, no cache between prompts)
  end-of-line  the cursor at the end of code lines of held-out files (bench/files), a multi-line
               answer each, through the real server over stdio (bench/end_of_line.py)
  end-of-line-real  the same in real held-out files of 8-40 KB (end_of_line.real_files: longer
               than the prompt's window, so prompt lookup also reads the rest of the document)
  replay       the keystroke replay: files typed into the real server, a request at every pause
               (bench/replay.py); a block in the middle of each file, so code stands right of the
               cursor and answers are one line; also shown for the requests whose answer is
               multi-line (when any)
  replay-append  the same, typing each file's last lines (a whole function or two) at its end:
               new code with nothing after it, so `multiline: auto` answers several lines at fresh
               indented lines and ends of lines; also shown for the requests whose answer (without
               a draft) is multi-line
Configurations: no-draft (the reference, always run), ngram (prompt lookup only), draft
(the draft model alone), default (as shipped: draft model + lookup under the
cost-aware controller; prompt lookup includes the datastore of the target's own answers shipped
with the default pair); on request also ngram-prompt-only (lookup in the prompt and recent
completions only, not the documents or the datastore) and no-datastore (default without the
datastore). Each has its own engine (generate) or server (the other two), all loaded
before the first request; requests alternate between them, who goes first rotating, so load from
other work on the machine slows them alike.

`--baseline REV` runs each drafting configuration a second time from the tree of commit REV (its
servers, and for generate its engine package, imported under another name), as `NAME@REV`,
alternating with this tree's like the others: the two commits side by side in one run.

Requests whose answer without a draft loops (a run of 6 tokens, or of 24 characters in the text
the servers' model wrote, written 3 times or more: bench/loops.py; or the completion pipeline cut
the answer at a repeated block of lines) are shown in a row of their own per workload (`<workload>, looping answers`), never in the workload's row: prompt lookup drafts a loop
for free, so a speed-up there says little of one on code (the demo target loops in most of the
`generate` answers).

Per workload and configuration: p50/p95 latency as the caller sees it, p50 over no draft's, the
median per-request ratio over no draft with its 95% bootstrap interval (the same request under
both, model runs only: bench/paired.py), tokens per target call, acceptance, the decode speedup
over no draft (achieved), the one the standard formula predicts from the measured acceptance and
costs (how: bench/speedup.py), efficiency = achieved / predicted, and how many answers equal no
draft's. Goal (c) "not slower than no draft" is judged by the per-request median: p50 against p50
moves 0.94-1.04x from run to run at these sizes. Writes suite.md (what is printed) and suite.json
(every request with its engine stats) to --out.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import importlib
import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import end_of_line, paired, replay
from bench.common import (DEFAULT_OUT, DRAFT_CONFIGS, add_file_options, add_model_options, add_set_option,
                          bench_parser, close_all, held_out_prompts, prompt_ids, rotated, server_env, start_servers,
                          usage_error)
from bench.keystrokes import EDITOR_DEBOUNCE_MS, END, MIDDLE
from bench.loops import loops
from bench.paired import Paired
from bench.replay import UsageError, chosen
from bench.speedup import Costs, Speedup, Totals, measure_costs, speedup
from completion.stats import percentile
from lsp import commands
from lsp.arguments import number

WORKLOADS = ("generate", "end-of-line", "end-of-line-real", "replay", "replay-append")
REAL = "end-of-line-real"
REPLAYS = {"replay": MIDDLE, "replay-append": END}     # replay workload -> where the typing happens
MULTILINE_OF = {name: f"{name}, multi-line answers" for name in REPLAYS}
LOOPING_OF = {name: f"{name}, looping answers" for name in WORKLOADS}
LOOP_CHARS = 24     # a text answer loops where a run of this many characters (about 6 of the
                    # shipped target's tokens) comes 3 times
BASELINE = "no-draft"
LABELS = {"no-draft": "no draft", "ngram": "prompt lookup only (`ngram`, with the datastore)",
          "draft": "draft model alone", "default": "**default** (draft + lookup, cost-aware)"}
# Run only when asked for (--configs): lookup without the documents, to see what they bring.
EXTRA_CONFIGS = {"ngram-prompt-only": end_of_line.CONFIGS["ngram-prompt-only"],
                 "no-datastore": {"datastore": "none"}}
EXTRA_LABELS = {"ngram-prompt-only": "prompt lookup only, prompt and completions (no documents)",
                "no-datastore": "draft + lookup without the datastore of the target's answers"}
CONFIGS = {**DRAFT_CONFIGS, **EXTRA_CONFIGS}

# The goals the report judges the default configuration by (the demo pair on a CPU).
GOAL_SPEEDUP = 1.5          # (a) and (b) at p50
GOAL_EOL_P50_MS = 150.0     # (b)
GOAL_MULTILINE = 1.2        # (c), multi-line requests, at p50
GOAL_EFFICIENCY = 0.9


@dataclass
class Sizes:
    prompts: int = 12           # generate
    prompt_chars: int = 1200
    max_new_tokens: int = 64    # as `specfill generate` runs (its default)
    max_files: int = 3          # end of line and replay
    per_file: int = 8           # end-of-line positions per file: 24 a workload (answers of 3 to 64
                                # tokens: a p50 of 12 of them moves with the few in the middle)
    typed_lines: int = 12       # replay
    appended_lines: int = 8     # replay-append (widened to whole top-level functions)
    time_scale: float = 0.1     # both replays


QUICK = Sizes(prompts=2, prompt_chars=600, max_new_tokens=16, max_files=2, per_file=1, typed_lines=2,
              appended_lines=2, time_scale=0.0)


@dataclass
class Request:
    key: str            # what was asked, the same across configurations (prompt, position, keystroke)
    ms: float           # latency as the caller sees it
    output: str         # what it answered (token ids for generate, the ghost text otherwise)
    engine: dict | None  # the engine's stats of its model run (None: no model ran, e.g. a cache hit)


Results = dict[str, dict[str, list[Request]]]   # workload -> configuration -> requests


# ------------------------------------------------------------------------------ the workloads

def run_generate(settings: dict[str, dict], prompts: list[str], max_new_tokens: int, threads: int,
                 packages: dict | None = None) -> dict:
    """Every prompt through every configuration's engine, configurations alternating per prompt.
    `packages`: the engine package a configuration runs (another commit's, `engine_at`)."""
    import engine as this_engine
    from engine.forward.threads import set_threads
    from lsp import backend, collector
    from lsp.settings import settings_from

    parsed = {name: settings_from(s) for name, s in settings.items()}
    packages = {name: (packages or {}).get(name, this_engine) for name in settings}
    engines = {name: backend.load_backend(p).engine if packages[name] is this_engine else engine_of(packages[name], p)
               for name, p in parsed.items()}   # as the server builds them
    set_threads(threads, "cpu")   # after the loads: each engine applies its own policy when built
    collector.settle()            # as the server does after a load: no full collection mid-prompt

    def once(name: str, prompt: str, tokens: int):
        engine = engines[name]
        engine.clear_caches()     # no reuse between prompts: each is a fresh request
        target_ids, draft_ids = prompt_ids(engine, prompt)
        settings_of = importlib.import_module(packages[name].__name__ + ".settings").GenerationSettings
        return engine.generate(target_ids, draft_ids, settings_of(max_new_tokens=tokens,
                                                                  draft_length=parsed[name].draftLength))

    names = list(engines)
    for name in names:            # first-call costs are not what a request waits for
        once(name, prompts[-1], 8)
    records: dict[str, list[Request]] = {name: [] for name in names}
    for i, prompt in enumerate(prompts):
        for name in rotated(names, i):
            r = once(name, prompt, max_new_tokens)
            stats = r.stats.as_dict()
            records[name].append(Request(str(i), stats["latency_ms"], " ".join(map(str, r.token_ids)), stats))
    return records


def engine_of(package, p):
    """The local engine of `package` (an engine package of another commit) for parsed settings
    `p`, configured as lsp.backend.load_backend configures this tree's."""
    config = importlib.import_module(package.__name__ + ".settings").EngineConfig(
        target=p.targetModel, draft=p.draftModel, device=p.device, dtype=p.dtype, trust_remote_code=p.trustRemoteCode,
        max_cache_tokens=p.maxCacheTokens, kv_reuse=p.options.kvReuse, lookup=p.options.promptLookup,
        datastore=p.options.datastore, cuda_graphs=p.options.cudaGraphs)
    module = importlib.import_module(package.__name__ + ".engine")
    return (getattr(module, "LocalEngine", None) or module.Engine)(config)     # (older commits: Engine)


async def run_servers(settings: dict[str, dict], positions: dict[str, list], scripts: dict[str, list],
                      time_scale: float, log_dir: Path, env: dict, prog: str = "bench.suite",
                      servers: dict | None = None, roots: dict[str, Path] | None = None) -> Results:
    """End of line (each set of positions: bench/files, real files), then the replays (workload ->
    its typing scripts), through one real server per configuration (`roots`: the checkout one runs
    from, another commit's). `servers` gets each server's figures after the last request
    (`server_figures`)."""
    t0 = time.perf_counter()
    clients = await start_servers(settings, env, log_dir, roots)
    _progress(prog, "servers started", t0)
    out: Results = {}
    try:
        for workload, at in positions.items():
            t0 = time.perf_counter()
            asked = await end_of_line.ask_at(clients, at)
            out[workload] = {name: [Request(str(i), r["ms"], r["text"], r if "rounds" in r else None)
                                    for i, r in enumerate(rs)] for name, rs in asked.items()}
            _progress(prog, f"{workload} done", t0)
        for workload, typing in scripts.items():
            t0 = time.perf_counter()
            typed = await replay.replay_interleaved(clients, typing, time_scale, EDITOR_DEBOUNCE_MS)
            out[workload] = {name: [Request(f"{r['file']}:{r['keystroke']}", r["latency_ms"], r["text"],
                                            replay_engine_stats(r))
                                    for r in typed if r["config"] == name] for name in clients}
            _progress(prog, f"{workload} done", t0)
        if servers is not None:
            for name, client in clients.items():
                servers[name] = server_figures(await client.execute(commands.STATS))
    finally:
        await close_all(clients)
    return out


def server_figures(stats: dict) -> dict:
    """What a server's `specfill.stats` says of the run beyond its requests: the matmul kernels
    each model measured at load (configurations whose servers chose differently do not run the
    same passes), and the garbage collector's passes (lsp/collector.py)."""
    return {"matmul_kernels": stats["models"].get("matmulKernels"), "garbage_collector": stats.get("garbageCollector")}


def server_lines(servers: dict) -> list[str]:
    """A line per server: its models' kernels by class of row counts, and the collector's passes."""
    lines = []
    for name, figures in servers.items():
        kernels = figures.get("matmul_kernels") or {}
        models = "; ".join(f"{role} " + ", ".join(f"{cls} {k[cls]}" for cls in ("one", "few", "verify", "many", "prefill") if cls in k)
                           for role, k in kernels.items() if k)
        gc_figures = figures.get("garbage_collector") or {}
        passes = (f"; the collector's passes: {gc_figures['passes']}, the longest {gc_figures['longest_ms']:.1f} ms"
                  if "passes" in gc_figures else "")
        lines.append(f"- {name}: {models or 'no local kernels'}{passes}")
    if not lines:
        return []
    return ["Each server's matmul kernels (measured at its load) and garbage collector:", "", *lines, ""]


def _progress(prog: str, what: str, since: float) -> None:
    print(f"{prog}: {what} ({time.perf_counter() - since:.0f} s)", file=sys.stderr)


def replay_engine_stats(record: dict) -> dict | None:
    """A replay record's engine figures, keyed as the engine's own stats (None: no model ran)."""
    if not record["ran_model"]:
        return None
    keys = ("rounds", "rounds_by_drafter", "drafted", "accepted", "new_tokens", "prefill_ms",
            "draft_ms", "verify_ms", "stop_reason", "raw_text")
    return {**{k: record[k] for k in keys}, "by_position": record.get("by_position"),
            "policy": record.get("policy"), "controller": record.get("controller"),
            "first_from_prefill": record.get("first_from_prefill") or 0, "pair_shared": record.get("pair_shared") or 0,
            "plan_ms": record.get("plan_ms") or 0.0, "latency_ms": record["engine_ms"]}


def answer_loops(workload: str, r: Request) -> bool:
    """Whether a request's answer loops (bench/loops.py): a `generate` answer by its token ids; a
    server's by the characters the model wrote (before the pipeline cut them: its raw text, where
    the record has it), or where the pipeline itself ended the answer at a repeated block of
    lines (stop reason `loop`)."""
    if workload == "generate":
        return loops(r.output.split())
    engine = r.engine or {}
    return engine.get("stop_reason") == "loop" or loops(engine.get("raw_text") or r.output, n=LOOP_CHARS)


def loops_apart(workload: str, by_config: dict[str, list[Request]]) -> tuple[dict[str, list[Request]],
                                                                              dict[str, list[Request]]]:
    """(the requests whose answer without a draft does not loop, those whose answer does), by
    configuration: the same requests in each."""
    keys = {r.key for r in by_config[BASELINE] if answer_loops(workload, r)}
    return ({name: [r for r in rs if r.key not in keys] for name, rs in by_config.items()},
            {name: [r for r in rs if r.key in keys] for name, rs in by_config.items()})


def shown_apart(results: Results) -> Results:
    """The workloads as the report shows them: each workload's requests whose answer loops in a
    row of their own (when any), then the replays' multi-line answers among those that do not."""
    shown: Results = {}
    for workload, by_config in results.items():
        shown[workload], looping = loops_apart(workload, by_config)
        if any(looping.values()):
            shown[LOOPING_OF[workload]] = looping
    for workload in REPLAYS:
        multiline = multiline_requests(shown[workload]) if workload in shown else {}
        if any(multiline.values()):
            shown[MULTILINE_OF[workload]] = multiline
    return shown


def multiline_requests(by_config: dict[str, list[Request]]) -> dict[str, list[Request]]:
    """The requests whose answer (without a draft) is more than one line."""
    keys = {r.key for r in by_config[BASELINE] if "\n" in r.output}
    return {name: [r for r in rs if r.key in keys] for name, rs in by_config.items()}


# ------------------------------------------------------------------------------ figures

@dataclass
class Row:
    workload: str
    config: str
    requests: int
    model_runs: int
    p50_ms: float | None
    p95_ms: float | None
    p50_speedup: float | None       # no draft's p50 over this one's
    paired: Paired                  # median of no draft's ms / this one's, request by request, with its 95% CI
    tokens_per_call: float | None
    acceptance: float | None
    speedup: Speedup
    same: int                       # answers equal to no draft's for the same request
    # no draft's p50 over this configuration's p50 with every model run's decode (its latency
    # after the target's prefill) taken out: what the p50 speed-up could be at most, however fast
    # drafting made the decode (the prefill and what lies outside the engine stay)
    p50_bound: float | None = None


def summarize(workload: str, by_config: dict[str, list[Request]]) -> tuple[list[Row], Costs | None]:
    calls = {name: [r.engine for r in rs if r.engine] for name, rs in by_config.items()}
    costs = measure_costs(calls, BASELINE) if calls[BASELINE] else None
    base_out = {r.key: r.output for r in by_config[BASELINE]}
    base_p50 = percentile([r.ms for r in by_config[BASELINE]], 50)
    rows = []
    for name, rs in by_config.items():
        p50 = percentile([r.ms for r in rs], 50)
        t = Totals.of(calls[name])
        free = percentile([without_decode(r) for r in rs], 50)
        rows.append(Row(workload, name, len(rs), len(calls[name]), p50, percentile([r.ms for r in rs], 95),
                        base_p50 / p50 if p50 and base_p50 else None, paired.compare(by_config[BASELINE], rs),
                        t.tokens_per_call, t.acceptance,
                        speedup(calls[name], calls[BASELINE], costs) if costs else Speedup(None, None, None, False),
                        sum(base_out.get(r.key) == r.output for r in rs),
                        base_p50 / free if free and base_p50 else None))
    return rows, costs


def without_decode(r: Request) -> float:
    """The request's latency less its model run's decode (the engine's latency after the
    target's prefill), never below 0; a request that ran no model keeps its own."""
    e = r.engine
    if not e:
        return r.ms
    return max(0.0, r.ms - ((e.get("latency_ms") or 0.0) - (e.get("prefill_ms") or 0.0)))


def _f(v, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{format(v, spec)}{suffix}"


def table(rows: list[Row]) -> str:
    out = ["| workload | configuration | requests (model runs) | p50 ms | p95 ms | p50 vs no draft "
           "| per request vs no draft (median, 95% CI) "
           "| tokens / target call | acceptance | decode speedup | formula predicts | efficiency | same answer |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        flat = "*" if r.speedup.flat_acceptance and r.speedup.predicted is not None else ""
        out.append(f"| {r.workload} | {LABELS.get(r.config) or EXTRA_LABELS.get(r.config, r.config)} | {r.requests} ({r.model_runs}) "
                   f"| {_f(r.p50_ms, '.0f')} | {_f(r.p95_ms, '.0f')} | {_f(r.p50_speedup, '.2f', 'x')} "
                   f"| {paired.describe(r.paired)} "
                   f"| {_f(r.tokens_per_call, '.2f')} | {_f(r.acceptance, '.2f')} "
                   f"| {_f(r.speedup.achieved, '.2f', 'x')} | {_f(r.speedup.predicted, '.2f', 'x')}{flat} "
                   f"| {_f(r.speedup.efficiency and 100 * r.speedup.efficiency, '.0f', '%')} "
                   f"| {r.same}/{r.requests} |")
    return "\n".join(out)


def costs_line(workload: str, costs: Costs | None) -> str:
    if costs is None:
        return f"- {workload}: no model run without a draft, no costs"
    steps = ", ".join(f"{k} {v:.3f} ms" for k, v in sorted(costs.step.items())) or "none measured"
    begin = f"; the draft model's prefill {costs.begin_model:.1f} ms per request that uses it (not in the formula)" \
        if costs.begin_model is not None else ""
    return (f"- {workload}: verify(1) {costs.verify_one:.2f} ms, +{costs.verify_per_token:.3f} ms per further "
            f"token; draft step per token: {steps}{begin}")


def lookup_lines(results: Results) -> list[str]:
    """What prompt lookup proposed from the documents beyond the prompt (end-of-line workloads)."""
    lines = []
    for workload, by_config in results.items():
        for name, rs in by_config.items():
            records = [r.engine for r in rs if r.engine]
            proposed, written = end_of_line.documents_lookup(records)
            if proposed is not None:
                read = end_of_line.read_ms(records)
                took = f"; {len(read)} of {len(records)} requests read them, in {sum(read) / len(read):.1f} ms " \
                    f"(the most {max(read):.1f})" if read else f"; none of {len(records)} requests read them"
                lines.append(f"- {workload}, {name}: {proposed} tokens proposed from the documents, "
                             f"{written} of them written by the target too{took}")
    if not lines:
        return []
    return ["Prompt lookup beyond the prompt (the rest of the document, other open documents):", "", *lines, ""]


def goals(rows: list[Row]) -> list[tuple[str, str, bool | None]]:
    """(goal, measured, met) for the default configuration; met None where not measured."""
    at = {(r.workload, r.config): r for r in rows}

    def default(workload: str) -> Row | None:
        return at.get((workload, "default"))

    out = []
    for workload, label in (("generate", "(a) generate"), ("end-of-line", "(b) end of line")):
        r = default(workload)
        v = r and r.p50_speedup
        bound = f" (at most {r.p50_bound:.2f}x with no time to decode)" if r and r.p50_bound else ""
        out.append((f"{label}: default >= {GOAL_SPEEDUP}x faster than no draft at p50", _f(v, ".2f", "x") + bound,
                    None if v is None else v >= GOAL_SPEEDUP))
    r = default("end-of-line")
    v = r and r.p50_ms
    out.append((f"(b) end of line: default p50 < {GOAL_EOL_P50_MS:.0f} ms", _f(v, ".0f", " ms"),
                None if v is None else v < GOAL_EOL_P50_MS))
    for workload in REPLAYS:
        r = default(workload)
        if r or workload == "replay":
            out.append(not_slower_goal(workload, r))
    out.append(multiline_goal(at))
    effs = [(r.workload, r.speedup.efficiency) for r in rows if r.config == "default" and r.speedup.efficiency]
    if effs:
        low = min(e for _, e in effs)
        out.append((f"efficiency >= {100 * GOAL_EFFICIENCY:.0f}% (default, every workload)",
                    ", ".join(f"{w} {100 * e:.0f}%" for w, e in effs), low >= GOAL_EFFICIENCY))
    return out


def not_slower_goal(workload: str, r: Row | None) -> tuple[str, str, bool | None]:
    """(c) "not slower than no draft", judged by the median of the per-request ratios: p50 against
    p50 moves a few percent from run to run, the paired median far less."""
    goal = f"(c) {workload}: default not slower than no draft (median per request >= 1.00x)"
    if r is None or r.paired.median is None:
        return goal, f"p50 {_f(r and r.p50_speedup, '.2f', 'x')}; no request ran the model in both", None
    measured = (f"per request {paired.describe(r.paired)} ({r.paired.n} requests); "
                f"p50 {_f(r.p50_speedup, '.2f', 'x')}")
    return goal, measured, r.paired.median >= 1.0


def multiline_goal(at: dict[tuple[str, str], Row]) -> tuple[str, str, bool | None]:
    """(c)'s multi-line goal, over the requests whose answer without a draft has several lines:
    those of replay-append (where new code is written at the end of a file), else of the replay
    when it had any."""
    goal = f"(c) replay, multi-line answers: default >= {GOAL_MULTILINE}x at p50"
    for workload in ("replay-append", "replay"):
        r = at.get((MULTILINE_OF[workload], "default"))
        if r:
            v = r.p50_speedup
            return goal, f"{_f(v, '.2f', 'x')} ({workload}, {r.requests} requests)", \
                None if v is None else v >= GOAL_MULTILINE
    return goal, "no multi-line answer in the replays run", None


def report(results: Results, meta: dict) -> tuple[str, list[Row]]:
    rows: list[Row] = []
    cost_lines = []
    for workload, by_config in results.items():
        found, costs = summarize(workload, by_config)
        rows += found
        cost_lines.append(costs_line(workload, costs))
    lines = ["# specfill benchmark suite", "",
             f"Command: `{meta['command']}`  ",
             f"Machine: {meta['machine']}; load average {meta['load_before']} before, {meta['load_after']} after  ",
             f"Run: {meta['started']}, {meta['seconds']:.0f} s, code {meta['code']}; target `{meta['settings']['targetModel']}`, "
             f"draft `{meta['settings']['draftModel']}`; {meta['workload_sizes']}", "",
             table(rows), "",
             "Latency: the engine call (generate) or the request as the client sees it (end of line, replay: "
             "cache hits and empty answers included). *Tokens / target call*: the rounds' new tokens per "
             "round (one target pass each; a first token from the prefill's pass is not counted). *Per "
             "request vs no draft*: the median over requests of no draft's latency over this "
             "configuration's for the same request (only requests where both ran the model), with a 95% "
             "bootstrap interval of that median; pairing cancels what each request costs and most of the "
             "machine's load, so it moves far less from run to run than p50 against p50, and (c)'s "
             "\"not slower\" goal is judged by it. *Decode speedup*: new tokens per ms after the target's prefill, over no draft's. "
             "*Formula predicts*: the same from the measured acceptance and costs, "
             "E = (1 - a^(k+1)) / (1 - a) per chain (per position: 1 + p1 + p1 p2 + ...) over "
             "k x draft step + verify(k+1) + the measured overhead per round (bench/speedup.py), with p_i counted "
             "in this run at each draft position (the engine's `by_position`); "
             "* = no per-position counts: the measured acceptance at every "
             "position. *Efficiency*: achieved / predicted. *Same answer*: requests whose output equals no draft's. "
             "*Looping answers*: the requests whose answer without a draft writes a run of 6 tokens (24 characters "
             "of the servers' model text) 3 times or more (bench/loops.py), or that the completion pipeline cut "
             "at a repeated block of lines, apart from their workload's row.", "",
             "Costs measured in this run:", "", *cost_lines, "",
             *lookup_lines(results),
             *server_lines(meta.get("servers") or {}),
             "## Goals (default configuration)", "", "| goal | measured | met |", "|---|---|---|"]
    for goal, measured, met in goals(rows):
        lines.append(f"| {goal} | {measured} | {'-' if met is None else 'yes' if met else '**no**'} |")
    return "\n".join(lines) + "\n", rows


# ------------------------------------------------------------------------------ CLI

def parse_args(argv: list[str], prog: str) -> argparse.Namespace:
    ap = bench_parser(prog, __doc__)
    ap.add_argument("--quick", action="store_true", help="the smallest useful run (sizes below still apply)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"comma-separated subset of {', '.join(WORKLOADS)}")
    ap.add_argument("--configs", default=",".join(DRAFT_CONFIGS),
                    help=f"comma-separated subset of {', '.join(CONFIGS)} ({BASELINE} always runs: the reference; "
                         f"default: {', '.join(DRAFT_CONFIGS)})")
    add_model_options(ap, "targetModel setting", "draftModel of the configurations that use one")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    add_set_option(ap, "any other server setting for every configuration (repeatable)")
    sizes = Sizes()
    ap.add_argument("--prompts", type=number(int, 1), help=f"generate: held-out prompts (default {sizes.prompts})")
    ap.add_argument("--prompt-chars", type=number(int, 1), help=f"generate: characters per prompt ({sizes.prompt_chars})")
    ap.add_argument("--max-new-tokens", type=number(int, 1), help=f"generate: tokens per prompt ({sizes.max_new_tokens})")
    add_file_options(ap, "held-out .py files (default bench/files)", f"end of line and replay: files used ({sizes.max_files})",
                     max_files_default=None)
    ap.add_argument("--per-file", type=number(int, 1), help=f"end of line: positions per file ({sizes.per_file})")
    ap.add_argument("--typed-lines", type=number(int, 1), help=f"replay: lines typed per file ({sizes.typed_lines})")
    ap.add_argument("--appended-lines", type=number(int, 1),
                    help=f"replay-append: last lines typed per file, widened to whole top-level functions "
                         f"({sizes.appended_lines})")
    ap.add_argument("--time-scale", type=number(float, 0),
                    help=f"replays: real sleep per keystroke gap, as a fraction of the typist's ({sizes.time_scale})")
    ap.add_argument("--threads", type=number(int, 0), default=1, help="torch threads per engine and server (0 = auto)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where suite.md and suite.json go (bench/results)")
    ap.add_argument("--machine", default="", help="words describing the machine, quoted in the report")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also run each drafting configuration from commit REV's tree, as NAME@REV")
    return ap.parse_args(argv)


def chosen_sizes(args: argparse.Namespace) -> Sizes:
    base = QUICK if args.quick else Sizes()
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Sizes) if getattr(args, f.name) is not None}
    return dataclasses.replace(base, **given)


def main(argv: list[str] | None = None, prog: str = "python -m bench.suite") -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv, prog)
    sizes = chosen_sizes(args)
    try:
        workloads = chosen(args.workloads, WORKLOADS, "workload")
        configs = chosen(args.configs, CONFIGS)
        configs = [BASELINE] + [c for c in configs if c != BASELINE]
        base = replay.server_settings(args.target, args.draft, args.device, args.dtype, args.set)
        positions = {}
        if "end-of-line" in workloads:
            positions["end-of-line"] = end_of_line.positions_in(args.files, sizes.max_files, sizes.per_file)
        if REAL in workloads:
            positions[REAL] = end_of_line.real_positions(sizes.max_files, sizes.per_file)
        lines = {"replay": sizes.typed_lines, "replay-append": sizes.appended_lines}
        scripts = {w: replay.load_scripts(args.files, lines[w], 0, sizes.max_files, EDITOR_DEBOUNCE_MS, where)
                   for w, where in REPLAYS.items() if w in workloads}
        from bench.round_cost import commit_of, engine_at, tree_at   # (torch loads with it)
        sha = commit_of(args.baseline) if args.baseline else None
        if args.baseline and sha is None:
            raise UsageError(f"--baseline: {args.baseline!r} names no git commit here")
    except UsageError as exc:
        return usage_error(prog, exc)
    settings = {name: {**base, **CONFIGS[name]} for name in configs}
    load_before = _load()
    t0 = time.perf_counter()
    results: Results = {}
    servers: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        roots, packages = {}, {}
        if sha is not None:       # the baseline's configurations, each after this tree's
            tree, package = tree_at(sha, Path(tmp)), engine_at(sha, Path(tmp) / "package")
            for name in configs[1:]:
                settings[f"{name}@{sha}"] = settings[name]
                roots[f"{name}@{sha}"], packages[f"{name}@{sha}"] = tree, package
        if "generate" in workloads:
            prompts = held_out_prompts(sizes.prompts, sizes.prompt_chars)
            results["generate"] = run_generate(settings, prompts, sizes.max_new_tokens, args.threads, packages)
            print(f"{prog}: generate done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
            gc.collect()              # the engines go before the servers load
        if positions or scripts:
            args.out.mkdir(parents=True, exist_ok=True)
            results.update(asyncio.run(run_servers(settings, positions, scripts, sizes.time_scale,
                                                   args.out / "logs" / "suite", server_env(args.threads), prog,
                                                   servers, roots)))
    meta = {"command": shlex.join([*prog.split(), *argv]), "machine": replay.machine_description(args.machine),
            "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() - (time.perf_counter() - t0))),
            "seconds": time.perf_counter() - t0, "load_before": load_before, "load_after": _load(),
            "settings": base, "sizes": dataclasses.asdict(sizes), "workload_sizes": describe(sizes, workloads, scripts),
            "threads": args.threads, "code": _code_version(), "servers": servers}
    text, rows = report(shown_apart(results), meta)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "suite.md").write_text(text, encoding="utf-8")
    (args.out / "suite.json").write_text(json.dumps({
        "meta": meta, "rows": [dataclasses.asdict(r) for r in rows],
        "requests": {w: {c: [dataclasses.asdict(r) for r in rs] for c, rs in by.items()}
                     for w, by in results.items()}}, indent=1), encoding="utf-8")
    print(f"{prog}: wrote {args.out / 'suite.md'} and suite.json", file=sys.stderr)
    return 0


def describe(sizes: Sizes, workloads: list[str], scripts: dict[str, list]) -> str:
    parts = []
    if "generate" in workloads:
        parts.append(f"generate: {sizes.prompts} prompts of {sizes.prompt_chars} characters, "
                     f"{sizes.max_new_tokens} new tokens")
    if "end-of-line" in workloads:
        parts.append(f"end of line: {sizes.per_file} positions in each of {sizes.max_files} files")
    if REAL in workloads:
        files = ", ".join(p.name for p in end_of_line.real_files(sizes.max_files))
        parts.append(f"end of line, real files: {sizes.per_file} positions in each of {files}")
    for workload, typing in scripts.items():
        keys = sum(len(s.keystrokes) for s in typing)
        asks = sum(1 for s in typing for k in s.keystrokes if k.request)
        where = "in the middle of" if REPLAYS[workload] == MIDDLE else "at the end of"
        parts.append(f"{workload}: {', '.join(str(s.typed_lines) for s in typing)} lines typed {where} "
                     f"{len(typing)} files ({keys} keystrokes, {asks} requests)")
    return "; ".join(parts)


def _code_version() -> str:
    """The commit measured (`-dirty`: with uncommitted changes)."""
    import subprocess

    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _load() -> str:
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
