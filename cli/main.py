"""`specfill generate|complete|serve|bench|distill|datastore`: pick the subcommand, hand it the rest of argv.

Every subcommand module keeps torch out of its own imports (the engine is imported inside
the subcommand that runs it): `serve` must point stdout at stderr before torch loads.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Callable

from bench.replay import main as bench_main
from cli.datastore import datastore_main
from cli.distill import distill_main
from cli.generate import generate_main
from lsp.arguments import EXIT_USAGE, version_line
from lsp.cli import complete_main, serve_main

COMMANDS: dict[str, Callable[[list[str]], int | None]] = {
    "generate": generate_main,
    "complete": complete_main,
    "serve": serve_main,
    "bench": bench_main,
    "distill": distill_main,
    "datastore": datastore_main,
}

USAGE = """usage: specfill {generate,complete,serve,bench,distill,datastore} [options]
       specfill --version | --help
  generate  continue a prompt file (speculative decoding)
  complete  ghost text for FILE:LINE:COL, as the editor would get it
  serve     language server (stdio, or --tcp HOST:PORT)
  bench     keystroke-replay latency benchmark (--suite: every workload, draft configurations side by side)
  distill   train a draft model on its target's own answers to your code
  datastore a table of the target's own answers to your code, for prompt lookup to draft from
Run specfill COMMAND --help for a command's options."""


# Commands that, run as the process's own command line, end the process as soon as their answer
# is written: a Python that has imported torch and loaded a model takes 0.5-0.6 s to finalize
# (torch's module teardown and freeing the weights), which would count in the command's wall time.
END_AT_ONCE = frozenset({"complete"})


def end_process(code: int) -> None:
    """Flush what was written (stdout, stderr, log handlers) and end the process with `code`
    without Python's finalization. For a command that holds no file open for writing and runs
    no thread that still works: nothing else is left to do at exit."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):    # a closed pipe: the reader is gone, nothing to keep
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Run the command named in `argv` (the process's own arguments when None). Called with
    None, as the `specfill` script and `python -m cli` call it, a command of END_AT_ONCE ends
    the process after its answer (end_process); called with a list, it returns."""
    own_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argv[0] if argv else None
    if first in ("-h", "--help"):
        print(USAGE)
        return 0
    if first in ("-V", "--version"):
        print(version_line())
        return 0
    if first not in COMMANDS:
        # One line, as for every other command-line error.
        what = f"unknown command {first!r}" if first is not None else "missing command"
        print(f"specfill: {what} (one of {', '.join(COMMANDS)}; see specfill --help)",
              file=sys.stderr)
        return EXIT_USAGE
    code = COMMANDS[first](argv[1:]) or 0
    if own_command_line and first in END_AT_ONCE:
        end_process(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
