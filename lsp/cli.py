"""`specfill serve` and `specfill complete` (cli/main.py dispatches here; argv excludes the
subcommand). Keep torch out of this module's imports: `serve` must redirect stdout first."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from lsp.arguments import EXIT_USAGE, OneLineParser, VersionAction


def protect_stdout():
    """Keep the real stdout for the protocol and point fd 1 (and sys.stdout) at stderr, so a
    stray print or a native library writing to stdout cannot corrupt the LSP stream."""
    sys.stdout.flush()
    wire = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return wire


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CLIENT_LOG_FORMAT = "%(name)s: %(message)s"   # the client has the level (message type) and time


def setup_logging(level: str, force: bool = False, to_client: bool = False) -> None:
    """Log to stderr; with `to_client`, to the LSP client once it connects (lsp/client_log.py)."""
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter(LOG_FORMAT))
    handler = stderr
    if to_client:
        from lsp.client_log import ClientLogHandler   # pulls in pygls, not torch
        handler = ClientLogHandler(stderr)
        handler.setFormatter(logging.Formatter(CLIENT_LOG_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper()), force=force, handlers=[handler])
    if level.upper() != "DEBUG":
        # pygls logs every message it sends at INFO (whole documents included).
        logging.getLogger("pygls").setLevel(logging.WARNING)


def parse_tcp(value: str) -> tuple[str, int]:
    """HOST:PORT, :PORT or PORT; the host defaults to 127.0.0.1 (never all interfaces unless
    asked)."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        port_no = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}") from None
    if not 0 < port_no < 65536:
        raise argparse.ArgumentTypeError(f"port out of range: {port_no}")
    return host, port_no


def serve_main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="specfill serve",
                                     description="Run the specfill language server (stdio by default).")
    parser.add_argument("--tcp", type=parse_tcp, metavar="HOST:PORT",
                        help="listen on TCP instead of stdio (host defaults to 127.0.0.1)")
    parser.add_argument("--stdio", action="store_true", help="use stdio (the default)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"],
                        help="log level (to the client as window/logMessage once connected)")
    parser.add_argument("--version", action=VersionAction)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    wire = None if args.tcp else protect_stdout()
    setup_logging(args.log_level, force=True, to_client=True)   # the server owns this process's logging

    # After the redirect: this pulls in pygls, and the settings table pulls in torch.
    from lsp.client_log import disconnect
    from lsp.pygls_compat import shutdown_requested, start_stdio
    from lsp.server import server, stop_work
    from lsp import collector
    collector.watch()      # the collector's passes, timed for specfill.stats
    log = logging.getLogger("specfill.serve")
    try:
        if args.tcp:
            host, port = args.tcp
            log.info("listening on %s:%d", host, port)
            server.start_tcp(host, port)
        else:
            start_stdio(server, sys.stdin.buffer, wire)
    except (KeyboardInterrupt, SystemExit):  # `exit` notification over TCP ends in SystemExit
        pass
    finally:
        disconnect()
        stop_work(server)
    code = 0 if shutdown_requested(server) else 1   # LSP: exit without shutdown -> 1
    log.info("server stopped (exit code %d)", code)
    logging.shutdown()
    sys.stderr.flush()
    # A decode or load still running on the worker must not keep a dead server alive.
    os._exit(code)


def parse_location(value: str) -> tuple[str, int, int]:
    path, sep, rest = value.rpartition(":")
    path2, sep2, line = path.rpartition(":")
    if not sep or not sep2 or not line.isdigit() or not rest.isdigit():
        raise argparse.ArgumentTypeError(f"expected FILE:LINE:COL (1-based), got {value!r}")
    if int(line) < 1 or int(rest) < 1:
        raise argparse.ArgumentTypeError(f"LINE and COL are 1-based, got {line}:{rest}")
    return path2, int(line), int(rest)


def _refuse(message: str) -> int:
    print(f"specfill complete: {message}", file=sys.stderr)
    return EXIT_USAGE


def read_document(path: str, line: int, col: int) -> tuple[str | None, str | None]:
    """The text of `path` if (line, col), 1-based, is in it and the pipeline would take it:
    (text, None), else (None, why). Loads no torch, so a bad file is refused at once."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    text = data.decode("utf-8", errors="replace")

    from completion.context import parse_document
    from lsp.positions import split_lines

    lines = split_lines(text)
    last_line_open = not lines or lines[-1].endswith(("\n", "\r"))
    if line - 1 > len(lines) or (line - 1 == len(lines) and not last_line_open):
        return None, f"{path} has {len(lines)} lines, asked for line {line}"
    content = lines[line - 1].rstrip("\r\n") if line - 1 < len(lines) else ""
    if col - 1 > len(content):
        return None, f"line {line} of {path} has {len(content)} characters, asked for column {col}"
    try:   # the pipeline's own input checks (binary text, size)
        parse_document(text, line - 1, col - 1)
    except ValueError as exc:
        return None, str(exc)
    return text, None


def complete_main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog="specfill complete",
        description="Complete FILE at LINE:COL (1-based; COL counts characters) with the same "
                    "pipeline as the language server and print the ghost text.")
    parser.add_argument("location", type=parse_location, metavar="FILE:LINE:COL")
    parser.add_argument("--target", help="targetModel (default: the shipped pair)")
    parser.add_argument("--draft", help="draftModel: default, hub id, path, ngram or none")
    parser.add_argument("--draft-length", help="draftLength: auto or a number")
    parser.add_argument("--max-new-tokens", help="maxNewTokens")
    parser.add_argument("--multiline", help="auto, always or never")
    parser.add_argument("--device", help="device, e.g. auto, cpu or cuda:1")
    parser.add_argument("--dtype", help="dtype, e.g. auto or float32")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="any other setting, e.g. --set prefixTokens=512 (repeatable); "
                             "python -m lsp.settings --markdown lists them")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--json", action="store_true", help='print {"text": ..., "stats": {...}}')
    parser.add_argument("--log-level", default="warning",
                        choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(args.log_level)

    path, line, col = args.location
    text, problem = read_document(path, line, col)   # before seconds of torch and model loading
    if problem:
        return _refuse(problem)

    from lsp.settings import Settings, SettingsError, parse_assignment, parse_settings

    raw: dict = {}
    for name, value in (("targetModel", args.target), ("draftModel", args.draft),
                        ("draftLength", args.draft_length), ("maxNewTokens", args.max_new_tokens),
                        ("multiline", args.multiline), ("device", args.device),
                        ("dtype", args.dtype)):
        if value is not None:
            raw[name] = value
    if args.trust_remote_code:
        raw["trustRemoteCode"] = True
    try:
        raw.update(parse_assignment(item) for item in args.set)
        settings = parse_settings(raw, Settings())
    except SettingsError as exc:
        parser.error(str(exc))

    from lsp import backend

    try:
        loaded = backend.load_backend(settings)
    except Exception as exc:
        if backend.is_model_load_error(exc):
            return _refuse(str(exc))
        raise
    import threading

    request = backend.completion_request(Path(path).resolve().as_uri(), text, line - 1, col - 1)
    try:
        completion = loaded.pipeline.complete(request, backend.completion_options(settings),
                                              cancel=threading.Event())
    except ValueError as exc:   # the pipeline refusing the input
        return _refuse(str(exc))
    if loaded.pipeline.last_stats.get("remote_error"):   # a remote target failed: say why
        return _refuse(loaded.pipeline.last_stats["remote_error"])
    ghost = completion.text if completion is not None else ""
    if args.json:
        stats = dict(completion.stats) if completion is not None else {}
        out = {"text": ghost, "stats": stats}
        if completion is not None:
            out["replace_end"] = [completion.replace_end[0] + 1, completion.replace_end[1] + 1]
            out["from_cache"] = completion.from_cache
        print(json.dumps(out, default=str))
    else:
        sys.stdout.write(ghost + ("\n" if ghost and not ghost.endswith("\n") else ""))
    return 0
