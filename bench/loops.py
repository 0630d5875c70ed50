"""Answers that loop: a run of tokens written again and again.

A small target often falls into such a loop (the demo pair writes the same line or two over and
over in most of the suite's `generate` answers), and prompt lookup drafts a loop for free: it
copies the run it has just seen. So a speed-up measured on looping answers says little of one on
code; the suite reports them in a row of their own (bench/suite.py).
"""
from __future__ import annotations

from collections.abc import Sequence

RUN, TIMES = 6, 3      # a run of 6 tokens written 3 times


def loops(ids: Sequence, n: int = RUN, r: int = TIMES) -> bool:
    """Whether some run of n consecutive items occurs r times or more in `ids`, no two of the
    occurrences overlapping: a line written again and again (a loop whose period is longer than
    n), a run back to back, a token written r x n times in a row."""
    if n < 1 or r < 2:
        raise ValueError(f"a loop is a run of at least 1 item written at least twice (n={n}, r={r})")
    seen: dict[tuple, tuple[int, int]] = {}     # run -> (occurrences counted, where the last one ends)
    for i in range(len(ids) - n + 1):
        run = tuple(ids[i:i + n])
        count, end = seen.get(run, (0, 0))
        if i >= end:               # not overlapping the last occurrence counted
            if count + 1 >= r:
                return True
            seen[run] = (count + 1, i + n)
    return False
