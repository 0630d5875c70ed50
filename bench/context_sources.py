"""Does extra context from where the user works pay? The keystroke replay (bench/keystrokes.py)
through real servers, one per `extraContextFrom` configuration, fed the same keystrokes and the
same editor reports, requests interleaved (bench/replay.py's way).

Before typing a file's missing block, the "editor" works elsewhere, in one of two scenarios:
  unrelated  the other bench files are open; the user edits one of them in its middle, visits a
             line of the other, and yanks two lines of it (context that has nothing to do with
             the code typed next: what it costs)
  related    an older copy of the file (with the block) is open beside it; the user edits it just
             above the block, visits the block's first line, and yanks two lines from the block's
             middle (context that holds the code typed next: what it can gain)

Per configuration: latency (p50/p95), prompt tokens, draft-token acceptance, and what a user
would see: suggestions shown, `whole` (the suggestion is exactly how the typed text goes on: Tab
would take it) and the characters of shown suggestions that agree with what is typed next.

    python -m bench.context_sources [--typed-lines 12] [--max-files 3] [--scenarios unrelated,related]
                                    [--set NAME=VALUE ...]
"""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bench.common import (DEFAULT_OUT, add_file_options, add_model_options, add_set_option, bench_parser, close_all,
                          rotated, server_env, start_servers)
from bench.keystrokes import EDITOR_DEBOUNCE_MS, apply, block_start, cursor_after, utf16_column
from bench.replay import UsageError, load_scripts, server_settings
from completion.stats import percentile
from lsp import commands

CONFIGS = {
    "none": {"extraTokens": 0},
    "open": {"extraContextFrom": "open"},
    "open+edits": {"extraContextFrom": "open,edits"},
    "open+visits": {"extraContextFrom": "open,visits"},
    "open+yanks": {"extraContextFrom": "open,yanks"},
    "all": {"extraContextFrom": "open,edits,yanks,visits"},
}
SCENARIOS = ("unrelated", "related")


def uri(name: str) -> str:
    return f"file:///bench/{name}"


def position(line: int, character: int = 0) -> dict:
    return {"line": line, "character": character}


async def notify_all(clients, method: str, params: dict) -> None:
    for client in clients.values():
        await client.notify(method, params)


async def work_elsewhere(clients, scenario: str, script, others: dict[str, str]) -> None:
    """Open the other documents and edit, visit and yank in them (every server alike)."""
    for name, text in others.items():
        await notify_all(clients, "textDocument/didOpen", {"textDocument": {
            "uri": uri(name), "languageId": "python", "version": 0, "text": text}})
    names = list(others)
    if scenario == "related":
        (name,) = names
        lines = others[name].split("\n")
        edit_at, visit_at, yank_at = script.first_line, script.first_line, script.first_line + script.typed_lines // 2
        edited, visited = name, name
    else:
        edited, visited = names[0], names[-1]
        e_lines, lines = others[edited].split("\n"), others[visited].split("\n")
        edit_at = block_start(e_lines, 12)
        visit_at = yank_at = block_start(lines, 12)
    # The edit: a comment line above a function (the change every server gets alike).
    await notify_all(clients, "textDocument/didChange", {
        "textDocument": {"uri": uri(edited), "version": 1},
        "contentChanges": [{"range": {"start": position(edit_at), "end": position(edit_at)},
                            "text": "# reviewed\n"}]})
    await notify_all(clients, commands.VISITED, {"textDocument": {"uri": uri(visited)},
                                                 "position": position(visit_at + 1)})
    await notify_all(clients, commands.YANKED, {"textDocument": {"uri": uri(visited)},
                                                "text": "\n".join(lines[yank_at:yank_at + 2]) + "\n"})


async def replay(clients, scenario: str, scripts, all_texts: dict[str, str], time_scale: float) -> list[dict]:
    records, names, n = [], list(clients), 0
    for script in scripts:
        if scenario == "related":
            others = {f"old/{script.name}": all_texts[script.name]}
        else:
            others = {k: v for k, v in all_texts.items() if k != script.name}
        await work_elsewhere(clients, scenario, script, others)
        doc = uri(script.name)
        await notify_all(clients, "textDocument/didOpen", {"textDocument": {
            "uri": doc, "languageId": "python", "version": 0, "text": script.initial_text}})
        lines = script.initial_text.split("\n")
        for version, key in enumerate(script.keystrokes, start=1):
            pos = position(key.line, utf16_column(lines[key.line], key.character))
            await notify_all(clients, "textDocument/didChange", {
                "textDocument": {"uri": doc, "version": version},
                "contentChanges": [{"range": {"start": pos, "end": pos}, "text": key.text}]})
            lines = apply(lines, key)
            if key.request:
                line, col = cursor_after(key)
                typed_next = "".join(k.text for k in script.keystrokes[version:])
                at = {"textDocument": {"uri": doc}, "position": position(line, utf16_column(lines[line], col)),
                      "context": {"triggerKind": 2}}
                for name in rotated(names, n):
                    records.append(await ask(clients[name], name, scenario, at, typed_next))
                n += 1
            if time_scale > 0:
                await asyncio.sleep(key.gap_ms * time_scale / 1000)
        for name in [*others, script.name]:
            await notify_all(clients, "textDocument/didClose", {"textDocument": {"uri": uri(name)}})
    return records


async def ask(client, config: str, scenario: str, at: dict, typed_next: str) -> dict:
    jobs = (await client.execute(commands.STATS))["server"]["decode_jobs"]
    result, ms = await client.timed_request("textDocument/inlineCompletion", at)
    items = (result or {}).get("items", []) if isinstance(result, dict) else (result or [])
    text = items[0]["insertText"].replace("\r\n", "\n") if items else ""
    ran = (await client.execute(commands.STATS))["server"]["decode_jobs"] > jobs
    run = await client.execute(commands.LAST_COMPLETION) if ran else {}
    agree = 0
    while agree < min(len(text), len(typed_next)) and text[agree] == typed_next[agree]:
        agree += 1
    return {"config": config, "scenario": scenario, "latency_ms": ms, "shown": bool(text),
            "whole": bool(text) and typed_next.startswith(text), "agree_chars": agree,
            "ran_model": bool(run), "drafted": run.get("drafted", 0), "accepted": run.get("accepted", 0),
            "prompt_tokens": run.get("prompt_tokens", 0), "prefill_tokens": run.get("prefill_tokens", 0),
            "extra_sources": [c["source"] for c in run.get("extra_context", [])]}


def summarize(records: list[dict]) -> list[dict]:
    rows = []
    for scenario in SCENARIOS:
        for config in CONFIGS:
            rs = [r for r in records if r["config"] == config and r["scenario"] == scenario]
            if not rs:
                continue
            runs = [r for r in rs if r["ran_model"]]
            drafted = sum(r["drafted"] for r in runs)
            lat = [r["latency_ms"] for r in rs]
            rows.append({
                "scenario": scenario, "config": config, "requests": len(rs),
                "shown": sum(r["shown"] for r in rs), "whole": sum(r["whole"] for r in rs),
                "agree_chars": sum(r["agree_chars"] for r in rs),
                "p50_ms": round(percentile(lat, 50), 1), "p95_ms": round(percentile(lat, 95), 1),
                "prompt_tokens": round(sum(r["prompt_tokens"] for r in runs) / max(len(runs), 1), 1),
                "prefill_tokens": round(sum(r["prefill_tokens"] for r in runs) / max(len(runs), 1), 1),
                "draft_acceptance": round(sum(r["accepted"] for r in runs) / drafted, 3) if drafted else None,
            })
    return rows


def table(rows: list[dict]) -> str:
    out = ["| scenario | extraContextFrom | shown | whole (Tab takes it) | chars agreeing | draft acceptance "
           "| prompt / prefill tokens per run | p50 ms | p95 ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['scenario']} | {r['config']} | {r['shown']}/{r['requests']} | {r['whole']} | "
                   f"{r['agree_chars']} | {r['draft_acceptance']} | {r['prompt_tokens']} / {r['prefill_tokens']} | "
                   f"{r['p50_ms']} | {r['p95_ms']} |")
    return "\n".join(out)


def parse_args(argv):
    ap = bench_parser("python -m bench.context_sources", __doc__, description=__doc__.split("\n\n")[0])
    add_file_options(ap, files_help=None)
    ap.add_argument("--typed-lines", type=int, default=12)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    add_model_options(ap)
    add_set_option(ap, "a server setting for every configuration (e.g. extraTokens=512)")
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT / "context_sources")
    return ap.parse_args(argv)


async def run(args) -> list[dict]:
    scripts = load_scripts(args.files, args.typed_lines, args.seed, args.max_files, EDITOR_DEBOUNCE_MS)
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(args.files.glob("*.py"))}
    base = server_settings(args.target, args.draft, assignments=args.set)
    chosen = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in chosen if c not in CONFIGS]
    if bad:
        raise UsageError(f"--configs: unknown configuration {bad[0]!r} (known: {', '.join(CONFIGS)})")
    settings = {c: {**base, **CONFIGS[c]} for c in chosen}
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not chosen or not scenarios or set(scenarios) - set(SCENARIOS):
        raise UsageError(f"--configs/--scenarios: nothing to run or unknown scenario (known: {', '.join(SCENARIOS)})")
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for scenario in scenarios:
        clients = await start_servers(settings, server_env(args.threads), args.out / "logs")
        try:
            records += await replay(clients, scenario, scripts, texts, args.time_scale)
        finally:
            await close_all(clients)
    return records


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        records = asyncio.run(run(args))
    except UsageError as exc:
        print(f"python -m bench.context_sources: {exc}", file=sys.stderr)
        return 2
    rows = summarize(records)
    (args.out / "results.json").write_text(json.dumps({"rows": rows, "records": records}, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
