"""Accept latency: how long after Tab the next ghost text appears, with and without prefetch,
through the real language server over stdio.

    python -m bench.accept_latency [--files DIR] [--per-file 4] [--accepts 3] [--think-ms 400]

At end-of-line positions of held-out files (bench/end_of_line.py's) a user accepts `accepts`
suggestions in a row: the editor shows one (specfill/shown), the user reads it for `think-ms`,
presses Tab (the suggestion inserted with didChange) and the editor asks at the end of it. The
time measured is from sending that edit to having the next answer. Both configurations run in
their own server, started before the first request; chains alternate (one position, each
configuration in turn, who goes first rotating), and a chain's last suggestion is never
reported shown, so no prefetch runs while the other server is measured. Every answer must be
the same in both (prefetching is lossless).
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from bench.common import (add_file_options, add_model_options, bench_parser, close_all, rotated, server_env,
                          start_servers, usage_error)
from bench.end_of_line import Position, base_settings, positions_in
from bench.lsp_client import LspClient
from bench.replay import UsageError
from completion.stats import percentile
from lsp import commands
from lsp.arguments import number

PROG = "python -m bench.accept_latency"
CONFIGS = {"prefetch": {"prefetch": True}, "no prefetch": {"prefetch": False}}


def inserted(lines: list[str], rng: dict, text: str) -> tuple[list[str], int, int]:
    """The document's lines after `text` replaces `rng` (one line, as the server's items are),
    and the cursor at the end of the inserted text. Bench files are ASCII: utf-16 columns are
    codepoint columns."""
    line, start, end = rng["start"]["line"], rng["start"]["character"], rng["end"]["character"]
    head, tail = lines[line][:start], lines[line][end:]
    parts = text.split("\n")
    new_lines = lines[:line] + (head + text + tail).split("\n") + lines[line + 1:]
    return new_lines, line + len(parts) - 1, (len(head) if len(parts) == 1 else 0) + len(parts[-1])


async def ask(client: LspClient, uri: str, line: int, character: int) -> tuple[dict | None, float]:
    result, ms = await client.timed_request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
        "context": {"triggerKind": 2}})
    items = (result or {}).get("items", []) if isinstance(result, dict) else (result or [])
    return (items[0] if items else None), ms


async def idle(client: LspClient) -> dict:
    while (s := await client.execute(commands.STATS))["inflight"] or s["workerBusy"]:
        await asyncio.sleep(0.01)
    return s


async def chain(client: LspClient, pos: Position, version: int, accepts: int, think_s: float) -> list[dict]:
    """One position: ask, then `accepts` times show, read, accept, ask again (timed)."""
    uri = f"file:///bench/accept/{version}/{pos.file}"   # a fresh document: no cache between chains
    await client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 0, "text": pos.text}})
    lines = pos.text.split("\n")
    item, _ = await ask(client, uri, pos.line, pos.character)
    steps = []
    for k in range(1, accepts + 1):
        if item is None:
            break
        sid = item["command"]["arguments"][0]["id"]
        await client.notify(commands.SHOWN, {"id": sid})
        await asyncio.sleep(think_s)
        before = await client.execute(commands.STATS)
        t0 = time.perf_counter()
        await client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": k},
            "contentChanges": [{"range": item["range"], "text": item["insertText"]}]})
        lines, line, character = inserted(lines, item["range"], item["insertText"])
        item, _ = await ask(client, uri, line, character)
        ms = (time.perf_counter() - t0) * 1000
        after = await client.execute(commands.STATS)
        hits = after["pipeline"]["cache_hits"] - before["pipeline"]["cache_hits"]
        steps.append({"ms": ms, "text": item["insertText"] if item else "", "cache": hits > 0})
    await idle(client)
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return steps


async def run(configs: dict[str, dict], positions: list[Position], accepts: int, think_s: float,
              log_dir: Path, env: dict) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    clients = await start_servers(configs, env, log_dir)
    try:
        names = list(clients)
        for name in names:   # warm-up: first-call costs
            await chain(clients[name], positions[-1], 0, 1, think_s)
        records: dict[str, list[dict]] = {name: [] for name in names}
        for version, pos in enumerate(positions, start=1):
            for name in rotated(names, version):
                records[name] += await chain(clients[name], pos, version, accepts, think_s)
        prefetch = {name: (await idle(c))["prefetch"] for name, c in clients.items()}
        return records, prefetch
    finally:
        await close_all(clients)


def table(records: dict[str, list[dict]], prefetch: dict[str, dict], meta: str) -> str:
    first = next(iter(records.values()))
    fmt = lambda v: "-" if v is None else f"{v:.0f}"  # noqa: E731
    out = [meta, "",
           "| configuration | accepts | p50 ms | p95 ms | next ghost text from the cache | same text "
           "| prefetches run / used / joined / cancelled |",
           "|---|---|---|---|---|---|---|"]
    for name, rs in records.items():
        lat = [r["ms"] for r in rs]
        p = prefetch[name]
        same = sum(a["text"] == b["text"] for a, b in zip(rs, first))
        out.append(f"| {name} | {len(rs)} | {fmt(percentile(lat, 50))} | {fmt(percentile(lat, 95))} "
                   f"| {sum(r['cache'] for r in rs)}/{len(rs)} | {same}/{len(rs)} "
                   f"| {p['run']} / {p['used']} / {p['joined']} / {p['cancelled']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = bench_parser(PROG, __doc__)
    add_file_options(ap)
    ap.add_argument("--per-file", type=number(int, 1), default=4, help="chains per file")
    ap.add_argument("--accepts", type=number(int, 1), default=3, help="suggestions accepted in a row")
    ap.add_argument("--think-ms", type=number(float, 0), default=400.0,
                    help="time between a suggestion shown and Tab (reading it)")
    add_model_options(ap)
    ap.add_argument("--max-new-tokens", type=number(int, 1), default=64)
    ap.add_argument("--threads", type=number(int, 1), default=1, help="torch threads per server")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    try:
        positions = positions_in(args.files, args.max_files, args.per_file)
    except UsageError as exc:
        return usage_error(PROG, exc)
    base = base_settings(args.target, args.draft, args.max_new_tokens)
    t0 = time.perf_counter()
    records, prefetch = asyncio.run(run({name: {**base, **s} for name, s in CONFIGS.items()}, positions,
                                        args.accepts, args.think_ms / 1000, Path("/tmp/specfill-bench-logs"),
                                        server_env(args.threads)))
    files = sorted({p.file for p in positions})
    meta = (f"Accept latency: {len(positions)} end-of-line positions in {len(files)} held-out files "
            f"({', '.join(files)}), up to {args.accepts} accepts in a row each, {args.think_ms:.0f} ms "
            f"from shown to Tab, maxNewTokens {args.max_new_tokens}, {args.threads} torch thread(s) "
            f"per server, {time.perf_counter() - t0:.0f} s; `{' '.join([PROG, *argv])}`")
    text = table(records, prefetch, meta)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
