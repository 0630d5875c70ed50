"""What the language server itself adds to a completion request, for this tree's server and an
older commit's, side by side.

    python -m bench.server_cost                          # against DEFAULT_BASELINE
    python -m bench.server_cost --baseline HEAD~3 --typed-lines 12 --max-files 3
    python -m bench.server_cost --baseline none          # this tree alone

Requests: the middle-of-file keystroke replay (bench.replay: each keystroke a didChange, a request
where an editor would send one) typed into real servers over stdio, every server fed the same
keystrokes and asked in turn (bench.replay.replay_interleaved), the shipped pair, default
settings. For each request: the client's time from sending it to its answer ("client"), the
worker's pipeline call (`last_job.ms` in specfill.stats: prompt, decode, post-processing;
"job"), and what is left, the server's own time ("server" = client - job: reading the didChange
before the request and the request itself, the handler on the event loop, the hand-offs to the
worker and back, writing the answer). Medians over the requests, and the median per request of
the baseline's client time over this tree's.

Edits: a one-character insert at a random line of a document of 100, 1,000 and 3,000 lines, then
the lines read (as a request reads them), in process: pygls' own incremental edit against this
tree's (lsp/positions.py, LspTextDocument), ms per keystroke.

Prompts: the shipped target's prompt at every request of the replay, in process, its window cut
as the pipeline cuts it (default budgets, no extra context): encoded whole with nothing kept from
one request to the next, against this tree's template, which keeps the
suffix's ids and encodes the prefix line by line (completion/templates.py); ms per request, and
whether every prompt came out the same.
"""
from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import (DRAFT_CONFIGS, ROOT, add_file_options, bench_parser, close_all, server_env,
                          start_server, usage_error, wait_loaded)
from bench.keystrokes import EDITOR_DEBOUNCE_MS, MIDDLE
from bench.round_cost import commit_of, tree_at
from lsp.arguments import number

PROG = "python -m bench.server_cost"
# The server before it read stdin on its event loop and edited documents around the edit.
DEFAULT_BASELINE = "eee68d1"
EDIT_LINES = (100, 1000, 3000)
EDITS = 300


async def replay(roots: dict[str, Path], scripts, time_scale: float, log_dir: Path) -> list[dict]:
    """The scripts typed into one server per root (each loaded before the next starts)."""
    from bench.replay import replay_interleaved

    clients = {}
    try:
        for name, root in roots.items():
            env = server_env()
            env["PYTHONPATH"] = str(root)
            clients[name] = await start_server(name, dict(DRAFT_CONFIGS["default"], targetModel="default",
                                                          draftModel="default"), env, log_dir, root=root)
            await wait_loaded(clients[name])
        return await replay_interleaved(clients, scripts, time_scale, EDITOR_DEBOUNCE_MS)
    finally:
        await close_all(clients)


def request_table(records: list[dict], names: list[str]) -> None:
    by = {name: [r for r in records if r["config"] == name] for name in names}
    print(f"{'server':<22} {'requests':>8} {'client p50':>10} {'p95':>7} {'job p50':>8} {'server p50':>10} "
          f"{'server p95':>10}  (ms)")
    for name, rows in by.items():
        timed = [r for r in rows if r.get("job_ms") is not None]
        own = sorted(r["latency_ms"] - r["job_ms"] for r in timed)
        client = sorted(r["latency_ms"] for r in rows)
        p95 = lambda values: values[int(0.95 * (len(values) - 1))]  # noqa: E731 (sorted values)
        print(f"{name:<22} {len(rows):>8} {statistics.median(client):>10.2f} {p95(client):>7.2f} "
              f"{statistics.median(r['job_ms'] for r in timed):>8.2f} {statistics.median(own):>10.2f} "
              f"{p95(own):>10.2f}")
    if len(names) == 2:
        base, this = by[names[0]], by[names[1]]
        ratio = statistics.median(b["latency_ms"] / t["latency_ms"] for b, t in zip(base, this))
        same = sum(b["text"] == t["text"] for b, t in zip(base, this))
        print(f"per request, {names[0]} / {names[1]} client time: median {ratio:.3f}x; same answer {same}/{len(this)}")


def edit_costs(seed: int) -> None:
    from lsprotocol import types
    from pygls.workspace import TextDocument

    from lsp.positions import LspTextDocument, split_lines

    class PyglsEdit(LspTextDocument):   # the same lines, pygls' own edit
        _apply_incremental_change = TextDocument._apply_incremental_change

    print(f"\n{'document':<12} {'pygls edit':>10} {'this tree':>10}  "
          "(ms per keystroke: a one-character insert, the lines read)")
    for n in EDIT_LINES:
        text = "".join(f"    value_{i} = compute(value_{i - 1}, {i})  # note\n" for i in range(n))
        row = {}
        for cls in (PyglsEdit, LspTextDocument, PyglsEdit, LspTextDocument):   # each twice, the first warms up
            doc = cls("file:///edits.py", source=text, sync_kind=types.TextDocumentSyncKind.Incremental)
            rng = random.Random(seed)
            t0 = time.perf_counter()
            for _ in range(EDITS):
                at = types.Position(line=rng.randrange(n), character=rng.randrange(8))
                doc.apply_change(types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text="x"))
                doc.lines
            row[cls] = (time.perf_counter() - t0) * 1000 / EDITS
            assert doc.lines == split_lines(doc.source)
        print(f"{f'{n} lines':<12} {row[PyglsEdit]:>10.3f} {row[LspTextDocument]:>10.3f}")


def prompt_costs(scripts) -> None:
    import dataclasses

    from transformers import AutoTokenizer

    from bench.replay import request_points
    from completion.context import TokenCounter, cut_window, parse_document
    from completion.pipeline import CompletionOptions
    from completion.templates import load_template
    from engine.load.models import resolve_name

    template = load_template(AutoTokenizer.from_pretrained(resolve_name("default", "target")))
    whole = dataclasses.replace(template, _line_wise=False, _segments={}, _lines={})
    options, count = CompletionOptions(), TokenCounter(template.infill_ids)   # as the pipeline counts
    windows = []
    for script in scripts:
        for _, text, line, col in request_points(script):
            w = cut_window(parse_document(text, line, col), count, options.prefix_tokens, options.suffix_tokens,
                           options.window_step_lines)
            windows.append((w.prefix, w.suffix))

    def build(t, pre: str, suf: str) -> list[int]:
        if t is whole:             # encoded whole: nothing kept from one request to the next
            whole._segments.clear()
        return t.build(pre, suf, "spm")
    ms, prompts = {}, {}
    for name, t in (("whole", whole), ("this tree", template), ("whole", whole), ("this tree", template)):
        t0 = time.perf_counter()                 # each twice, in turn: the first pass warms up
        prompts[name] = [build(t, pre, suf) for pre, suf in windows]
        ms[name] = (time.perf_counter() - t0) * 1000 / len(windows)
    same = sum(a == b for a, b in zip(prompts["whole"], prompts["this tree"]))
    print(f"\nprompts ({len(windows)} requests, the shipped target's template, prefix line by line: "
          f"{template._line_wise}): encoded whole {ms['whole']:.3f} ms, this tree {ms['this tree']:.3f} ms "
          f"per request; same prompt {same}/{len(windows)}")


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref whose server runs alongside ('none' to skip)")
    add_file_options(ap)
    ap.add_argument("--typed-lines", type=number(int, 1), default=12, help="lines typed per file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-scale", type=number(float, 0), default=0.1,
                    help="the typist's pauses, scaled (0: none)")
    args = ap.parse_args(argv)
    roots = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline != "none":
            sha = commit_of(args.baseline)
            if sha is None:
                return usage_error(PROG, f"--baseline: {args.baseline!r} names no git commit here")
            roots[f"baseline {sha}"] = tree_at(sha, Path(tmp))   # its server, pipeline, engine and pair
        roots["this tree"] = ROOT
        from bench.replay import load_scripts

        scripts = load_scripts(args.files, args.typed_lines, args.seed, args.max_files, EDITOR_DEBOUNCE_MS, MIDDLE)
        n = sum(1 for s in scripts for k in s.keystrokes if k.request)
        print(f"{PROG}: the middle-of-file replay, {len(scripts)} files, {n} requests, servers: {', '.join(roots)}")
        records = asyncio.run(replay(roots, scripts, args.time_scale, Path(tmp) / "logs"))
    request_table(records, list(roots))
    edit_costs(args.seed)
    prompt_costs(scripts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
