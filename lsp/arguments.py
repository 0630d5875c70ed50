"""Pieces of the `specfill` command line shared by every subcommand: a parser whose errors are
one line on stderr with exit code 2 (no usage block), number checks, and the version line.
Nothing heavy is imported here (see cli/main.py: no torch before `serve` redirects stdout)."""
from __future__ import annotations

import argparse
import platform
from importlib.metadata import PackageNotFoundError, version

EXIT_USAGE = 2   # a bad command line, as argparse and the README say


class OneLineParser(argparse.ArgumentParser):
    """argparse, except that an error is one line: `prog: message (see prog --help)`."""

    def error(self, message: str):   # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


class VersionAction(argparse.Action):
    """`--version`: print `version_line()` as it is (argparse's own action re-wraps it)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="print the version (with Python's and the main libraries') and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit(0)


def keyword_or_path(value: str, keywords: tuple[str, ...]) -> str:
    """A keyword in any case (lowered), else the value as given: a path or a model name keeps its case."""
    return value.lower() if value.lower() in keywords else value


def number(kind: type, low: float | None = None, high: float | None = None,
           low_open: bool = False):
    """An argparse `type` for an int or float within [low, high] (low excluded if low_open)."""
    def parse(value: str):
        try:
            n = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a{'n integer' if kind is int else ' number'}, "
                                             f"got {value!r}") from None
        too_low = low is not None and (n <= low if low_open else n < low)
        if too_low or (high is not None and n > high):
            if low_open:
                bounds = f"above {low:g}" + (f" and at most {high:g}" if high is not None else "")
            elif high is None:
                bounds = f"at least {low:g}"
            else:
                bounds = f"{low:g}-{high:g}"
            raise argparse.ArgumentTypeError(f"expected {bounds}, got {value}")
        return n
    return parse


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


SPECFILL_VERSION = package_version("specfill") or "0+unknown"


def version_line() -> str:
    """`specfill 0.1.0 (Python 3.11.7, torch 2.13.0, ...; CPU 16-bit: ...)`: what a bug report or
    an editor's health check needs, read from package metadata and the CPU's flags (torch is
    not imported)."""
    parts = [f"Python {platform.python_version()}"]
    for dist in ("torch", "transformers", "pygls"):
        found = package_version(dist)
        parts.append(f"{dist} {found}" if found else f"{dist} missing")
    from engine.forward.cpu import system_line   # torch-free: the engine package loads its names lazily

    return f"specfill {SPECFILL_VERSION} ({', '.join(parts)}; {system_line()})"
