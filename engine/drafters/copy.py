"""The copy drafter: an edit model rewrites a region of the document and keeps most of it, so
its answer is drafted by copying the original region (the prompt's `copy_source`) from the point
the rewrite has reached. A copy is right nearly always, so it proposes long chains
(MAX_COPY_LENGTH); the policy judges each proposal by how many ids before it matched (`match`),
as it judges prompt lookup's, and by whether the answer so far is a copy of the region's start
(source "copy") or parted from the region and was aligned again: "realigned" where the region
goes on at or after the place the answer parted from it, the match found there starting at most
NEAR ids past that place (a changed, inserted or deleted line, a renamed identifier), "realigned
far" elsewhere (after a change a short match found far away is often in the wrong place), and
picks the length worth verifying.

Where the rewrite replaced a few of the region's ids and then met the region again (an
identifier renamed), the drafter learns the replacement (`edits`) and makes it wherever the
region has those ids again, so a rename costs the target its first place only. A replacement
the target then does not make (it wrote the region's ids there) is forgotten.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..settings import MAX_COPY_LENGTH
from .base import Draft
from .lookup import as_bytes

MAX_TAIL = 32     # the newest ids of the rewrite that are matched against the region, at most
MAX_EDIT = 8      # the most ids on either side of a replacement the drafter learns
NEAR = 16         # a match found after a change this many ids past where the answer parted, at most, is "near"


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
    """Proposes the original region of a rewrite (`region`, the target's ids), with the
    replacements learned so far, from where the answer has followed the region (`follow`) or,
    after a change, was aligned with it again (`aligned`); its source is "copy" while the answer
    is a copy of the region's start, else "realigned" or "realigned far"."""
    name, free, longest = "copy", True, MAX_COPY_LENGTH

    def __init__(self, region: Sequence[int]):
        self.region = list(region)
        self.region_bytes = as_bytes(self.region)
        self.begin([])

    def begin(self, prompt, draft_prompt=None) -> tuple[int, int]:
        self.start = len(prompt)    # where the answer starts in the sequence
        self.near = 0               # the region position of the latest alignment
        self.anchor = (0, 0)        # (ids of the answer, region position) it has followed up to
        self.since = 0              # where in the answer that following began (its match)
        self.pending: tuple[int, int, int] | None = None    # an alignment after a change, to confirm
        self.edits: dict[tuple[int, ...], tuple[int, ...]] = {}     # region ids -> ids written instead
        return 0, 0

    def pieces(self, at: int) -> list[tuple[tuple[int, ...], int, tuple[int, ...] | None]]:
        """What the rewrite may write at region position `at`: (ids, the position after them, the
        replaced ids or None), a learned replacement first, then the region's own id."""
        out = [(new, at + len(old), old) for old, new in self.edits.items()
               if tuple(self.region[at:at + len(old)]) == old]
        return out + ([((self.region[at],), at + 1, None)] if at < len(self.region) else [])

    def follow(self, out: Sequence[int]) -> tuple[int, int, tuple[int, ...]]:
        """Move the anchor over the answer's ids that follow the region (the learned replacements
        made, or the region's ids where the target did not make one: then it is forgotten).
        Returns (the ids followed, the region position after them, the rest of a piece the answer
        has begun and not finished: to propose first)."""
        a, p = self.anchor
        while a < len(out):
            for ids, after, old in self.pieces(p):
                written = tuple(out[a:a + len(ids)])
                if written == ids:
                    a, p = a + len(ids), after
                    break
                if written == ids[:len(written)] and len(written) < len(ids):     # the answer ends in it
                    self.anchor = (a, p)
                    return len(out), after, ids[len(written):]
                kept = tuple(out[a:a + len(old)]) if old is not None else ()
                if kept and kept == old[:len(kept)]:       # the region's ids written (or begun) instead
                    del self.edits[old]
                    break
            else:
                break
        self.anchor = (a, p)
        return a, p, ()

    def confirm(self, out: Sequence[int]) -> bool:
        """After a change, the last proposal's alignment (`pending`: the answer's first `length`
        ids, whose last n end at region position `at`) is confirmed when the answer went on as the
        region does there (its next id, or a learned replacement): the anchor moves there, and
        what the answer wrote since it parted from the region, in place of the region's ids up to
        there, is learned as a replacement (a few ids each way)."""
        if self.pending is None:
            return False
        length, at, n = self.pending
        self.pending = None
        if len(out) <= length or all(ids[0] != out[length] for ids, _, _ in self.pieces(at)):
            return False
        a, p = self.anchor
        old, new = tuple(self.region[p:at - n]), tuple(out[a:length - n])
        if at - n >= p and 0 < len(old) <= MAX_EDIT and 0 < len(new) <= MAX_EDIT and old != new:
            self.edits[old] = new
        self.anchor, self.since = (length, at), length - n
        return True

    def expand(self, at: int, k: int) -> list[int]:
        """k ids of the region from position `at`, the learned replacements made."""
        if not self.edits:
            return self.region[at:at + k]
        out: list[int] = []
        while len(out) < k and at < len(self.region):
            ids, at, _ = self.pieces(at)[0]
            out.extend(ids)
        return out[:k]

    def propose(self, seq, generated, k, sampling) -> Draft:
        out = seq[self.start:]
        a, at, rest = self.follow(out)
        if a < len(out) and self.confirm(out):
            a, at, rest = self.follow(out)
        if a == len(out):
            n, self.pending = min(len(out) - self.since, MAX_TAIL), None
            source = "copy" if self.region[:len(out)] == out else "realigned"
        else:
            at, n = aligned(self.region_bytes, out, self.near)
            self.pending = (len(out), at, n) if at >= 0 else None
            parted = self.anchor[1]
            source = "realigned" if at >= parted and at - n - parted <= NEAR else "realigned far"
        if at < 0 or k <= 0:
            return Draft([])
        self.near = at
        tokens = (list(rest) + self.expand(at, k))[:k]
        return Draft(tokens, match=n, source=source) if tokens else Draft([])

    def end(self, answer: list[int]) -> None:
        pass

    def forward_ms(self) -> float:
        return 0.0

    def clear(self) -> None:
        pass
