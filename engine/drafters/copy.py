"""The copy drafter: an edit model rewrites a region of the document and keeps most of it, so
its answer is drafted by copying the original region (the prompt's `copy_source`) from the point
the rewrite has reached. A copy is right nearly always, so it proposes long chains
(MAX_COPY_LENGTH); the policy judges each proposal by how many ids before it matched (`match`),
as it judges prompt lookup's, and by whether the answer so far is a copy of the region's start
(source "copy") or parted from the region and was aligned again ("realigned": after a change a
short match is often found in the wrong place), and picks the length worth verifying.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..settings import MAX_COPY_LENGTH
from .base import Draft
from .lookup import as_bytes

MAX_TAIL = 32     # the newest ids of the rewrite that are matched against the region, at most


def occurrence_end(region: bytes, tail: bytes, near: int) -> int:
    """Where an occurrence of `tail` (ids as bytes) in `region` ends, in ids: the first that ends
    at or after `near`, else the last that ends before it; -1 where there is none."""
    at = region.find(tail, max(0, 4 * near - len(tail)))
    while at > 0 and at % 4:        # across ids: not an occurrence
        at = region.find(tail, at + 1)
    if at >= 0:
        return (at + len(tail)) // 4
    at = region.rfind(tail, 0, 4 * near)
    while at > 0 and at % 4:
        at = region.rfind(tail, 0, at + len(tail) - 1)
    return (at + len(tail)) // 4 if at >= 0 else -1


def aligned(region: bytes, out: Sequence[int], near: int) -> tuple[int, int]:
    """Where the rewrite `out` has reached in the region (`region`: its ids as bytes):
    (the region's position after the longest tail of `out` found in it, that tail's length),
    or (-1, 0) where not even the newest id is in the region. The tail is looked for where the
    rewrite was last aligned (`near`) and after: the first occurrence ending there or later,
    else the last ending before. The rewrite starts aligned with the region's start.

    A copy goes on where it is; after a change (ids the region does not have there) nothing
    aligns until the rewrite writes the region's ids again: the rest of a changed line or the
    line after it (a changed, inserted or deleted line), or what follows a renamed identifier.
    The longer the tail found, the likelier the copy is right (the policy's estimate by
    `match`). For example, with the region [5, 6, 7, 0, 8, 6, 9, 0, 4, 6, 7, 0] (three lines of
    three ids, each ending with the newline id 0):

        >>> region = as_bytes([5, 6, 7, 0, 8, 6, 9, 0, 4, 6, 7, 0])
        >>> aligned(region, [5, 6, 7, 0, 8], 4)      # a copy so far: go on after 8
        (5, 5)
        >>> aligned(region, [5, 6, 7, 0, 3, 3], 4)   # line two changed: 3 is not in the region
        (-1, 0)
        >>> aligned(region, [5, 6, 7, 0, 3, 3, 9, 0], 4)   # the line's end: after [9, 0]
        (8, 2)
        >>> aligned(region, [5, 6, 7, 0, 8, 6, 9, 0, 4, 6], 8)   # [6] is also in lines one and two
        (10, 10)
    """
    if not out:
        return 0, 0
    tail = as_bytes(out[-MAX_TAIL:])
    found = (-1, 0)
    for n in range(1, min(len(out), MAX_TAIL) + 1):
        end = occurrence_end(region, tail[-4 * n:], near)
        if end < 0:      # a longer tail contains this one: it is not in the region either
            break
        found = (end, n)
    return found


class CopyDrafter:
    """Proposes the original region of a rewrite (`region`, the target's ids), from where the
    answer so far is aligned with it (`aligned`); its source is "copy" while the answer is a copy
    of the region's start, else "realigned"."""
    name, free, longest = "copy", True, MAX_COPY_LENGTH

    def __init__(self, region: Sequence[int]):
        self.region = list(region)
        self.region_bytes = as_bytes(self.region)
        self.start = 0      # where the answer starts in the sequence
        self.near = 0       # the region position of the latest alignment

    def begin(self, prompt, draft_prompt=None) -> tuple[int, int]:
        self.start, self.near = len(prompt), 0
        return 0, 0

    def propose(self, seq, generated, k, sampling) -> Draft:
        out = seq[self.start:]
        if self.region[:len(out)] == out:      # a copy of the region's start so far: no search
            at, n, source = len(out), min(len(out), MAX_TAIL), "copy"
        else:
            (at, n), source = aligned(self.region_bytes, out, self.near), "realigned"
        if at < 0 or k <= 0:
            return Draft([])
        self.near = at
        return Draft(self.region[at:at + k], match=n, source=source)

    def end(self, answer: list[int]) -> None:
        pass

    def forward_ms(self) -> float:
        return 0.0

    def clear(self) -> None:
        pass
