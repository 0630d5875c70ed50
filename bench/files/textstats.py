"""Word and line statistics for text files, printed as a small table."""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

WORD = re.compile(r"[A-Za-z']+")


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return path.read_text(encoding="latin-1")


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def line_lengths(text: str) -> list[int]:
    return [len(line) for line in text.splitlines()]


def summarize(text: str, top: int = 10) -> dict:
    counts = Counter(words(text))
    lengths = line_lengths(text)
    return {
        "lines": len(lengths),
        "words": sum(counts.values()),
        "unique": len(counts),
        "longest_line": max(lengths, default=0),
        "mean_line": sum(lengths) / len(lengths) if lengths else 0.0,
        "top": counts.most_common(top),
    }


def format_summary(name: str, stats: dict) -> str:
    out = [f"== {name}",
           f"lines: {stats['lines']}  words: {stats['words']}  unique: {stats['unique']}",
           f"longest line: {stats['longest_line']}  mean line: {stats['mean_line']:.1f}"]
    for word, count in stats["top"]:
        out.append(f"  {count:6d}  {word}")
    return "\n".join(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=10, help="most common words to show")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    status = 0
    for path in args.paths:
        if not path.is_file():
            print(f"{path}: not a file", file=sys.stderr)
            status = 1
            continue
        print(format_summary(str(path), summarize(read_text(path), args.top)))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
