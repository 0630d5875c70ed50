"""Remote target benchmark: a real llama.cpp server (the shipped target as f32 GGUF, `--parallel N`
slots on 127.0.0.1) behind the real `specfill serve`.

    python -m bench.remote [--editors 8] [--slots 8] [--typed-lines 6] [--per-file 4] [--skip-eol]

(a) End of line: the bench/end_of_line.py positions asked of a server whose targetModel is the
    llama-server URL, beside the local no-draft engine (interleaved, as there).
(b) Load: N simulated editors, each its own `specfill serve` over stdio, typing the keystroke
    replay of bench/replay.py (each a different file or seed) at the same time into the one
    llama-server. Per editor: p50/p95 latency, answers, errors (goal: none); for the server:
    its prompt-cache reuse (/metrics: prompt tokens taken from the cache vs evaluated).

llama-server is the cached build of tests/e2e/remote/install_llama_server.py (build it first:
`python -m tests.e2e.remote.install_llama_server`).
"""
from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

import httpx

from bench.common import (add_file_options, bench_parser, close_all, server_env, start_server, start_servers,
                          wait_loaded)
from bench.end_of_line import ask_at, base_settings, positions_in, summarize, table
from bench.keystrokes import EDITOR_DEBOUNCE_MS, typing_script
from bench.lsp_client import LspClient, LspError
from bench.replay import UsageError, python_files, replay_interleaved
from completion.stats import percentile
from lsp import commands
from lsp.arguments import EXIT_USAGE, number

PROG = "python -m bench.remote"
LOG_DIR = Path("/tmp/specfill-bench-remote-logs")


def llama_server(slots: int, threads: int, ctx: int, binary: Path | None = None):
    """A started llama-server with the shipped target: `binary`, else the tests' cached build
    (raises UsageError when there is none)."""
    from tests.e2e.remote import install_llama_server as install
    from tests.e2e.remote.gguf_target import convert
    from tests.e2e.remote.server import LlamaServer

    binary = binary or install.installed()
    if binary is None:
        raise UsageError(f"llama-server is not built in {install.cache_dir()}: run "
                         "python -m tests.e2e.remote.install_llama_server first (tens of minutes on 2 cores)")
    return LlamaServer(binary, convert(), ctx=ctx, slots=slots, threads=threads, extra=("--metrics",)).start()


def server_metrics(url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (`llamacpp:NAME value`) by NAME."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {m[1]: float(m[2]) for m in re.finditer(r"^llamacpp:(\w+) ([0-9.eE+-]+)$", text, re.M)}


def cache_reuse(before: dict, after: dict) -> dict:
    evaluated = after.get("prompt_tokens_total", 0) - before.get("prompt_tokens_total", 0)
    cached = after.get("prompt_tokens_cached_total", 0) - before.get("prompt_tokens_cached_total", 0)
    return {"prompt_tokens_evaluated": int(evaluated), "prompt_tokens_cached": int(cached),
            "reuse": cached / (cached + evaluated) if cached + evaluated else None,
            "tokens_predicted": int(after.get("tokens_predicted_total", 0) - before.get("tokens_predicted_total", 0))}


# ------------------------------------------------------------------------------ (a) end of line

async def end_of_line(url: str, positions, max_new_tokens: int, env: dict) -> list[dict]:
    settings = {"remote (llama-server)": base_settings(url, "none", max_new_tokens),
                "local no-draft": base_settings("default", "none", max_new_tokens)}
    clients = await start_servers(settings, env, LOG_DIR)
    try:
        return summarize(await ask_at(clients, positions))
    finally:
        await close_all(clients)


# ------------------------------------------------------------------------------ (b) editors under load

async def editor(name: str, client: LspClient, script, time_scale: float) -> dict:
    """One editor typing its script; what it saw and what its server counted."""
    fatal = ""
    try:
        records = await replay_interleaved({name: client}, [script], time_scale, EDITOR_DEBOUNCE_MS)
    except (LspError, asyncio.TimeoutError) as exc:    # a request refused or the server gone
        records, fatal = [], f"{type(exc).__name__}: {exc}"
    stats = await client.execute(commands.STATS)
    remote = stats["pipeline"].get("remote") or {}
    # One failed request is counted once (the remote's failures), though it is also logged and,
    # the first of its kind, shown; the messages are listed once each.
    messages = [m["message"] for m in client.messages if m.get("type") == 1]
    lat = [r["latency_ms"] for r in records]
    return {"editor": name, "file": script.name, "requests": len(records),
            "answered": sum(bool(r["text"]) for r in records),
            "remote_runs": sum(bool(r["ran_model"]) for r in records),
            "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95),
            "errors": stats["server"]["errors"] + sum(remote.get("failures", {}).values()) + bool(fatal),
            "error_messages": [m for m in dict.fromkeys([*messages, fatal, remote.get("last_error", "")]) if m]}


async def load_run(url: str, editors: int, files: list[Path], typed_lines: int, time_scale: float,
                   max_new_tokens: int, env: dict, read_timeout_ms: int = 30000) -> tuple[list[dict], dict]:
    settings = {**base_settings(url, "none", max_new_tokens), "debounceMs": 0, "remote.readTimeoutMs": read_timeout_ms}
    # Editor i types file i (round robin), each with its own typist (seed): no two alike.
    scripts = [typing_script(p.name, p.read_text(encoding="utf-8"), typed_lines, seed, EDITOR_DEBOUNCE_MS)
               for seed, p in enumerate(files * (editors // len(files) + 1))][:editors]
    clients: dict[str, LspClient] = {}
    try:
        for i in range(editors):
            clients[f"editor-{i + 1}"] = await start_server(f"editor-{i + 1}", settings, env, LOG_DIR)
        for client in clients.values():
            await wait_loaded(client)
        before = server_metrics(url)
        rows = await asyncio.gather(*(editor(name, client, script, time_scale)
                                      for (name, client), script in zip(clients.items(), scripts)))
        return list(rows), cache_reuse(before, server_metrics(url))
    finally:
        await close_all(clients)


def load_table(rows: list[dict], reuse: dict, meta: str) -> str:
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    out = [meta, "", "| editor | file typed | requests | answered | ran the remote | p50 ms | p95 ms | errors |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['editor']} | {r['file']} | {r['requests']} | {r['answered']} | {r['remote_runs']} "
                   f"| {fmt(r['p50_ms'], '.0f')} | {fmt(r['p95_ms'], '.0f')} | {r['errors']} |")
    errors = sum(r["errors"] for r in rows)
    out += ["", f"Errors: {errors} (goal: none)"
            + "".join(f"\n- {r['editor']}: {m}" for r in rows for m in r["error_messages"][:3]),
            f"llama-server prompt cache (/metrics): {reuse['prompt_tokens_cached']} prompt tokens from the cache, "
            f"{reuse['prompt_tokens_evaluated']} evaluated (reuse {fmt(reuse['reuse'], '.0%')}); "
            f"{reuse['tokens_predicted']} tokens generated"]
    return "\n".join(out)


# ------------------------------------------------------------------------------ CLI

def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = bench_parser(PROG, __doc__)
    add_file_options(ap)
    ap.add_argument("--editors", type=number(int, 1), default=8, help="simulated editors in the load run")
    ap.add_argument("--slots", type=number(int, 0), default=0, help="llama-server --parallel (0: one per editor)")
    ap.add_argument("--llama-server", type=Path, default=None,
                    help="a llama-server binary (default: the tests' cached build, compiled at -O0)")
    ap.add_argument("--server-threads", type=number(int, 1), default=2, help="llama-server -t")
    ap.add_argument("--ctx", type=number(int, 128), default=512, help="context per slot")
    ap.add_argument("--typed-lines", type=number(int, 1), default=6, help="lines each editor types")
    ap.add_argument("--time-scale", type=number(float, 0), default=1.0,
                    help="real sleep per keystroke gap as a fraction of the typist's (1 = real time)")
    ap.add_argument("--per-file", type=number(int, 1), default=4, help="end-of-line positions per file")
    ap.add_argument("--max-new-tokens", type=number(int, 1), default=32)
    ap.add_argument("--threads", type=number(int, 1), default=1, help="torch threads of the local server")
    ap.add_argument("--read-timeout-ms", type=number(int, 1), default=30000,
                    help="the editors' readTimeoutMs in the load run (the setting's default: 30000)")
    ap.add_argument("--skip-eol", action="store_true", help="only the load run")
    ap.add_argument("--out", type=Path, default=None, help="also write the tables to this file")
    args = ap.parse_args(argv)
    try:
        files = python_files(args.files)[:args.max_files]
        positions = positions_in(args.files, args.max_files, args.per_file) if not args.skip_eol else []
        if args.llama_server is not None and not args.llama_server.is_file():
            raise UsageError(f"--llama-server: no such file: {args.llama_server}")
        server = llama_server(args.slots or args.editors, args.server_threads, args.ctx, args.llama_server)
    except (UsageError, FileNotFoundError, RuntimeError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    env = server_env(args.threads)
    command = f"`{PROG} {' '.join(argv)}`".replace(" `", "`")
    parts = []
    try:
        if positions:
            t0 = time.perf_counter()
            rows = asyncio.run(end_of_line(server.url, positions, args.max_new_tokens, env))
            parts.append(table(rows, f"(a) End of line, {len(positions)} positions, maxNewTokens "
                                     f"{args.max_new_tokens}, remote = llama-server ({args.slots or args.editors} "
                                     f"slots, -t {args.server_threads}) on loopback, {time.perf_counter() - t0:.0f} s; "
                                     f"{command}"))
            print(parts[-1], flush=True)
        t0 = time.perf_counter()
        rows, reuse = asyncio.run(load_run(server.url, args.editors, files, args.typed_lines, args.time_scale,
                                           args.max_new_tokens, env, args.read_timeout_ms))
        parts.append(load_table(rows, reuse, f"(b) Load: {args.editors} editors (each its own specfill serve) "
                                             f"typing {args.typed_lines} lines each at time scale {args.time_scale:g} "
                                             f"into one llama-server with {args.slots or args.editors} slots, "
                                             f"{time.perf_counter() - t0:.0f} s; {command}"))
        print(parts[-1], flush=True)
    finally:
        server.stop()
    if args.out:
        args.out.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return 1 if sum(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
