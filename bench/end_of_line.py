"""End-of-line benchmark: the cursor at the end of code lines of held-out files, where the server
asks for a multi-line answer, through the real language server over stdio.

    python -m bench.end_of_line [--files DIR | --real-files] [--per-file 6] [--configs no-draft,ngram,default,...]

`--files` takes the .py files of a folder (bench/files: three small project-written files, which
the prompt's window holds whole); `--real-files` takes real source files of 8-40 KB from the
packages the shipped pair never trained on (training/corpus.py HELD_OUT_PACKAGES), one per
package, the first by path: files longer than the prompt's window, where prompt lookup reads
the rest of the document (`ngram-prompt-only` reads only the prompt and recent completions).

Every configuration runs in its own server, all started before the first request; requests go
round-robin (one position, every configuration, next position), so a busy machine slows all
configurations alike. Prints p50/p95 latency, tokens decoded per token shown, tokens per target
call and acceptance, what lookup proposed from the documents and how much of it the target wrote
too, and checks that every configuration shows the same ghost text.
"""
from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (DRAFT_CONFIGS, add_file_options, add_model_options, bench_parser, close_all, rotated,
                          server_env, start_servers, usage_error)
from bench.lsp_client import LspClient
from bench.replay import UsageError, chosen, python_files
from completion.stats import percentile
from lsp import commands
from lsp.arguments import number

PROG = "python -m bench.end_of_line"
CONFIGS = {
    **DRAFT_CONFIGS,
    # prompt lookup alone, reading only the prompt and recent completions (not the documents or the datastore)
    "ngram-prompt-only": {"draftModel": "ngram", "lookupDocuments": False, "datastore": "none"},
    "no-draft-cut-after": {"draftModel": "none", "stopWhileDecoding": False},  # decode all, cut afterwards
}


REAL_FILE_BYTES = (8_000, 40_000)


@dataclass
class Position:
    file: str
    text: str
    line: int
    character: int     # utf-16 column (what LSP counts)


def end_of_line_cursors(text: str, n: int) -> list[tuple[int, int]]:
    """(line, column) at the end of `n` code lines spread over `text` (no blank or comment lines)."""
    lines = text.split("\n")
    code = [i for i, ln in enumerate(lines)
            if ln.strip() and not ln.lstrip().startswith(("#", '"""', "'''")) and i > 0]
    step = max(1, len(code) // n)
    return [(i, len(lines[i])) for i in code[step // 2::step][:n]]


def end_of_line_positions(path: Path, per_file: int) -> list[Position]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    return [Position(path.name, text, line, len(lines[line][:col].encode("utf-16-le")) // 2)
            for line, col in end_of_line_cursors(text, per_file)]


def real_files(n: int) -> list[Path]:
    """`n` real .py files of 8-40 KB from the packages held out of the shipped pair's training
    (training/corpus.py), one per package in that order, the first by path (test folders and
    files left out as in the corpus): the same files wherever the same versions are installed."""
    import importlib.util

    from training.corpus import HELD_OUT_PACKAGES, SKIP_DIRS

    found = []
    for name in HELD_OUT_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
            rel = path.relative_to(root)
            if SKIP_DIRS.intersection(rel.parts[:-1]) or rel.name.startswith("test_") or "test_utils" in rel.parts:
                continue
            if REAL_FILE_BYTES[0] <= path.stat().st_size <= REAL_FILE_BYTES[1]:
                found.append(path)
                break
        if len(found) == n:
            break
    return found


async def ask(client: LspClient, pos: Position, version: int) -> dict:
    uri = f"file:///bench/eol/{version}/{pos.file}"     # a fresh document: no cache between configurations
    await client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 0, "text": pos.text}})
    result, ms = await client.timed_request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": {"line": pos.line, "character": pos.character},
        "context": {"triggerKind": 1}})
    run = await client.execute(commands.LAST_COMPLETION) or {}
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    items = (result or {}).get("items", []) if isinstance(result, dict) else (result or [])
    return {"ms": ms, "text": items[0]["insertText"] if items else "", **run}


async def run(configs: list[str], base: dict, positions: list[Position], log_dir: Path, env: dict) -> dict:
    clients = await start_servers({name: {**base, **CONFIGS[name]} for name in configs}, env, log_dir)
    try:
        return await ask_at(clients, positions)
    finally:
        await close_all(clients)


async def ask_at(clients: dict[str, LspClient], positions: list[Position]) -> dict[str, list[dict]]:
    """Every server asked at every position: one position, each configuration in turn (who goes
    first rotates), next position. First one warm-up request each (first-call costs)."""
    names = list(clients)
    for name in names:
        await ask(clients[name], positions[-1], 0)
    records: dict[str, list[dict]] = {name: [] for name in names}
    for version, pos in enumerate(positions, start=1):
        for name in rotated(names, version):
            records[name].append(await ask(clients[name], pos, version))
    return records


def summarize(records: dict[str, list[dict]]) -> list[dict]:
    first = next(iter(records.values()))
    rows = []
    for name, rs in records.items():
        lat = [r["ms"] for r in rs]
        total = lambda key: sum(r.get(key) or 0 for r in rs)  # noqa: E731
        decoded, shown = total("decoded_tokens"), total("shown_tokens")
        stops: dict[str, int] = {}
        for r in rs:
            stops[r.get("stop_reason")] = stops.get(r.get("stop_reason"), 0) + 1
        proposed, written = documents_lookup(rs)
        rows.append({
            "config": name, "requests": len(rs), "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
            "documents_proposed": proposed, "documents_written": written, "read_ms": read_ms(rs),
            "decoded_per_request": decoded / len(rs), "shown_per_request": shown / len(rs),
            "decoded_per_shown": decoded / shown if shown else None,
            "tokens_per_target_call": ((total("new_tokens") - total("first_from_prefill")) / total("rounds")
                                       if total("rounds") else None),
            "acceptance": total("accepted") / total("drafted") if total("drafted") else None,
            "same_text": sum(a["text"] == b["text"] for a, b in zip(rs, first)),
            "stop_reasons": stops,
        })
    return rows


DOCUMENTS = ("document", "open documents")   # where lookup found what it proposed, beyond the prompt


def documents_lookup(records: list[dict]) -> tuple[int, int] | tuple[None, None]:
    """Tokens lookup proposed from the documents over these requests, and how many of them the
    target wrote too (drafted or not); None without lookup."""
    runs = [r["lookup"] for r in records if r.get("lookup")]
    if not runs:
        return None, None
    return (sum(run["tokens"].get(s, 0) for run in runs for s in DOCUMENTS),
            sum(run["agreed"].get(s, 0) for run in runs for s in DOCUMENTS))


def read_ms(records: list[dict]) -> list[float]:
    """Per request that read documents: ms spent reading them (blocks cut, looked up in the
    cache, new ones tokenized)."""
    return [r["lookup"]["read_ms"] for r in records if r.get("lookup") and r["lookup"].get("blocks")]


def table(rows: list[dict], meta: str) -> str:
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    out = [meta, "",
           "| configuration | p50 ms | p95 ms | tokens decoded / shown (per request) | decoded per shown "
           "| tokens / target call | acceptance | lookup from documents: tokens proposed / written too "
           "| same text | why decoding stopped |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        stops = ", ".join(f"{k} {v}" for k, v in sorted(r["stop_reasons"].items(), key=lambda kv: -kv[1]))
        out.append(f"| {r['config']} | {fmt(r['p50_ms'], '.0f')} | {fmt(r['p95_ms'], '.0f')} "
                   f"| {r['decoded_per_request']:.1f} / {r['shown_per_request']:.1f} "
                   f"| {fmt(r['decoded_per_shown'], '.2f')} | {fmt(r['tokens_per_target_call'], '.2f')} "
                   f"| {fmt(r['acceptance'], '.2f')} | {documents_cell(r)} | {r['same_text']}/{r['requests']} | {stops} |")
    out += ["", "*Lookup from documents*: tokens prompt lookup proposed from the document beyond the prompt "
            "and the other open documents, and how many of them the target wrote too (whether the "
            "controller drafted them or not); the time a request spent reading the documents, p50 "
            "(the most: a file's first request tokenizes it)."]
    goal = [r for r in rows if r["decoded_per_request"] <= 1.2 * r["shown_per_request"] + 4]
    out += ["", "Goal (tokens decoded <= 1.2 x shown + 4 per request, on average) met by: "
            + (", ".join(r["config"] for r in goal) or "none")]
    return "\n".join(out)


def documents_cell(row: dict) -> str:
    if row["documents_proposed"] is None:
        return "-"
    read = row["read_ms"]
    took = f"; read {percentile(read, 50):.1f} ms (max {max(read):.0f})" if read else ""
    return f"{row['documents_proposed']} / {row['documents_written']}{took}"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = bench_parser(PROG, __doc__)
    add_file_options(ap)
    ap.add_argument("--real-files", action="store_true",
                    help="real held-out source files of 8-40 KB instead of --files (see above)")
    ap.add_argument("--per-file", type=number(int, 1), default=6, help="end-of-line positions per file")
    add_model_options(ap, draft_help="the draft of the configurations that use one")
    ap.add_argument("--max-new-tokens", type=number(int, 1), default=64)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {', '.join(CONFIGS)}")
    ap.add_argument("--threads", type=number(int, 1), default=1, help="torch threads per server")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    try:
        configs = chosen(args.configs, CONFIGS)
        positions = (real_positions(args.max_files, args.per_file) if args.real_files
                     else positions_in(args.files, args.max_files, args.per_file))
    except UsageError as exc:
        return usage_error(PROG, exc)
    base = base_settings(args.target, args.draft, args.max_new_tokens)
    t0 = time.perf_counter()
    records = asyncio.run(run(configs, base, positions, Path("/tmp/specfill-bench-logs"), server_env(args.threads)))
    files = sorted({p.file for p in positions})
    meta = (f"End of line, {len(positions)} positions in {len(files)} held-out files "
            f"({', '.join(files)}), maxNewTokens {args.max_new_tokens}, "
            f"{args.threads} torch thread(s) per server, {time.perf_counter() - t0:.0f} s; "
            f"`{PROG} {' '.join(argv)}`".rstrip())
    text = table(summarize(records), meta)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


def positions_in(folder: Path, max_files: int, per_file: int) -> list[Position]:
    """`per_file` end-of-line positions in each of the first `max_files` .py files of `folder`."""
    positions = [pos for p in python_files(folder)[:max_files] for pos in end_of_line_positions(p, per_file)]
    if not positions:
        raise UsageError(f"--files: no code lines in {folder}")
    return positions


def real_positions(max_files: int, per_file: int) -> list[Position]:
    """`per_file` end-of-line positions in each of `max_files` real held-out files."""
    files = real_files(max_files)
    if not files:
        raise UsageError("--real-files: none of the held-out packages (training/corpus.py) is installed "
                         "with a .py file of 8-40 KB")
    return [pos for p in files for pos in end_of_line_positions(p, per_file)]


def base_settings(target: str, draft: str, max_new_tokens: int) -> dict:
    """What every configuration's server is given before its own settings: no debounce (each
    request is a fresh cursor position, asked once)."""
    return {"targetModel": target, "draftModel": draft, "maxNewTokens": max_new_tokens,
            "device": "cpu", "debounceMs": 0}


if __name__ == "__main__":
    raise SystemExit(main())
