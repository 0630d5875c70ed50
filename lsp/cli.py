"""`specfill serve` and `specfill complete` (cli/main.py dispatches here; argv excludes the
subcommand). Keep torch out of this module's imports: `serve` must redirect stdout first."""
from __future__ import annotations

import argparse
import errno
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


TERMINAL_HINT = ("specfill serve: waiting for an editor's LSP messages on stdin (an editor starts this "
                 "itself: see editors/nvim or editors/vscode; or run specfill serve --tcp 127.0.0.1:2087 "
                 "and connect the editor there); Ctrl-C stops it")
EXIT_INTERRUPTED = 130   # 128 + SIGINT, as shells report a command stopped with Ctrl-C


def listen_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (None: it can), found by binding a socket
    as asyncio's server will (SO_REUSEADDR), before anything slow is imported."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        why = exc.strerror or str(exc)
        busy = " (another server is listening there: pick another port)" if exc.errno == errno.EADDRINUSE else ""
        return f"cannot listen on {host}:{port}: {why}{busy}"
    return None


def stop_on_interrupt() -> None:
    """Ctrl-C ends the server at once. Python's own KeyboardInterrupt would wait for the thread
    that reads stdin (a terminal: until the next line) and for a decode in progress. Nothing is
    logged from the handler: it may run while the logging or stderr lock is held."""
    import signal

    signal.signal(signal.SIGINT, lambda signum, frame: os._exit(EXIT_INTERRUPTED))


def serve_main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="specfill serve",
                                     description="Run the specfill language server (stdio by default).")
    parser.add_argument("--tcp", type=parse_tcp, metavar="HOST:PORT",
                        help="listen on TCP instead of stdio (host defaults to 127.0.0.1)")
    parser.add_argument("--stdio", action="store_true", help="use stdio (the default)")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"],
                        help="log level (to the client as window/logMessage once connected)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="a server option, e.g. --option debounceMs=200 (repeatable; for measuring "
                             "and tests, not an editor setting); python -m lsp.settings --options lists them")
    parser.add_argument("--version", action=VersionAction)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    from lsp.settings import SettingsError, parse_assignment, parse_options
    try:
        options = parse_options(dict(parse_assignment(item, options_only=True) for item in args.option))
    except SettingsError as exc:
        parser.error(f"--option: {exc}")
    if args.tcp:
        problem = listen_problem(*args.tcp)
        if problem:
            print(f"{parser.prog}: {problem}", file=sys.stderr)
            return EXIT_USAGE
    stop_on_interrupt()     # before the hint: a Ctrl-C right after it ends the server too
    if not args.tcp and sys.stdin.isatty():   # a person ran it: say what it waits for
        print(TERMINAL_HINT, file=sys.stderr)
    wire = None if args.tcp else protect_stdout()
    setup_logging(args.log_level, force=True, to_client=True)   # the server owns this process's logging
    log = logging.getLogger("specfill.serve")

    # After the redirect: this pulls in pygls (the engine, and torch, load with the models).
    from lsp.client_log import disconnect
    from lsp.pygls_compat import shutdown_requested, start_stdio
    from lsp.server import server, stop_work
    from lsp import collector
    server.state.settings = server.state.settings.replace(options=options)
    if args.option:
        log.info("server options: %s", options)
    collector.watch()      # the collector's passes, timed for specfill.stats
    try:
        if args.tcp:
            host, port = args.tcp
            log.info("listening on %s:%d", host, port)
            try:
                server.start_tcp(host, port)
            except OSError as exc:   # the port was taken after listen_problem looked
                print(f"{parser.prog}: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
                sys.stderr.flush()
                os._exit(EXIT_USAGE)
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


def read_document(path: str, line: int, col: int, max_chars: int) -> tuple[str | None, str | None]:
    """The text of `path` if (line, col), 1-based, is in it and the pipeline would take it:
    (text, None), else (None, why). Loads no torch, so a bad file is refused at once. The checks
    are the server's: the maxDocumentChars option (`max_chars`), and bytes that are not UTF-8 read as the
    server reads them from an editor (lone surrogates, which the pipeline refuses)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror}"
    text = data.decode("utf-8", errors="surrogateescape")

    from completion.context import parse_document
    from lsp.lines import split_lines
    from lsp.settings import document_too_large

    too_large = document_too_large(len(text), max_chars)
    if too_large:
        return None, f"{path}: {too_large}"
    lines = split_lines(text)
    last_line_open = not lines or lines[-1].endswith(("\n", "\r"))
    if line - 1 > len(lines) or (line - 1 == len(lines) and not last_line_open):
        return None, f"{path} has {len(lines)} lines, asked for line {line}"
    content = lines[line - 1].rstrip("\r\n") if line - 1 < len(lines) else ""
    if col - 1 > len(content):
        return None, f"line {line} of {path} has {len(content)} characters, asked for column {col}"
    try:   # the pipeline's own input checks (binary text, not UTF-8)
        parse_document(text, line - 1, col - 1)
    except ValueError as exc:
        return None, f"{path}: {exc}"
    return text, None


def model_problem(name: str, role: str) -> str | None:
    """A local model directory that does not exist, found before torch loads (in the engine's
    words: engine/load/models.py). Hub ids, `default` and the rest are the engine's to check."""
    looks_like_path = os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
    if looks_like_path and not os.path.isdir(os.path.expanduser(name)):
        return f"{role} model {name!r}: no such directory"
    return None


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
                        help="any other setting or server option, e.g. --set prefixTokens=512 or "
                             "--set remote.readTimeoutMs=5000 (repeatable); python -m lsp.settings "
                             "--markdown lists the settings, --options the options")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--json", action="store_true",
                        help='print {"text": ..., "stats": {...}}; the stats of the run also when '
                             'nothing is shown (stop_reason, decoded_tokens, cut_by, empty_reason)')
    parser.add_argument("--log-level", default="warning",
                        choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    setup_logging(args.log_level)

    # Everything the command line says is checked before seconds of torch and model loading.
    from lsp.settings import SettingsError, parse_assignment, settings_from

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
        settings = settings_from(raw)
    except SettingsError as exc:
        parser.error(str(exc))

    path, line, col = args.location
    text, problem = read_document(path, line, col, settings.options.maxDocumentChars)
    if problem:
        return _refuse(problem)
    from lsp.backend import is_remote

    if not is_remote(settings.targetModel):
        for name, role in ((settings.targetModel, "target"), (settings.draftModel, "draft")):
            problem = model_problem(name, role)
            if problem:
                return _refuse(problem)

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
    # An empty answer still has its run: what was decoded, why decoding stopped, what cut it.
    stats = dict(completion.stats) if completion is not None else dict(loaded.pipeline.last_stats)
    if args.json:
        out = {"text": ghost, "stats": stats}
        if completion is not None:
            out["replace_end"] = [completion.replace_end[0] + 1, completion.replace_end[1] + 1]
            out["from_cache"] = completion.from_cache
        print(json.dumps(out, default=str))
    elif ghost:
        sys.stdout.write(ghost + ("" if ghost.endswith("\n") else "\n"))
    else:
        why = stats.get("empty_reason", "")
        print(f"{parser.prog}: nothing to show here{': ' + why if why else ''} "
              "(--json shows the run's figures)", file=sys.stderr)
    return 0
