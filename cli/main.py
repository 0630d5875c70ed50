"""`specfill generate|complete|serve|bench`: pick the subcommand, hand it the rest of argv.

Every subcommand module keeps torch out of its own imports (the engine is imported inside
the subcommand that runs it): `serve` must point stdout at stderr before torch loads.
"""
from __future__ import annotations

import sys
from typing import Callable

from bench.replay import main as bench_main
from cli.generate import generate_main
from lsp.cli import complete_main, serve_main

COMMANDS: dict[str, Callable[[list[str]], int | None]] = {
    "generate": generate_main,
    "complete": complete_main,
    "serve": serve_main,
    "bench": bench_main,
}

USAGE = """usage: specfill {generate,complete,serve,bench} [options]
  generate  continue a prompt file (speculative decoding)
  complete  ghost text for FILE:LINE:COL, as the editor would get it
  serve     language server (stdio, or --tcp HOST:PORT)
  bench     keystroke-replay latency benchmark"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    return COMMANDS[argv[0]](argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
