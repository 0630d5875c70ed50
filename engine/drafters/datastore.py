"""A datastore of the target's own answers: a drafter with no model that has learnt the target.

Prompt lookup copies what followed the last few tokens in the text at hand. The datastore does
the same in a store of what the target itself wrote at many editor positions of other code
(made once per target by `python -m training.datastore`; the default pair ships one). A small
code model repeats itself across files, so what it wrote after a run of tokens elsewhere is
often what it writes here: retrieval drafting (REST) on on-policy data, i.e. distillation into
a table instead of a model. It costs a binary search per round; what follows a run of ids is
voted once and kept (short runs come back round after round).

Store: the answers' token ids, one array, each answer (with the last CONTEXT ids of its prompt
in front) followed by SEP. Index: the array reversed, its suffixes sorted by their first
MAX_MATCH ids (a suffix array, built at load in a few passes of numpy sorting). The reversed
suffix that starts where the sequence's last id sits reads the sequence backwards, so the
longest run of ids ending the sequence is found by one binary search, and all its
occurrences lie in one block of the sorted order. The proposal follows the majority: the
commonest next id among the occurrences, then among those that agree, and so on, while that
majority holds MIN_SHARE of them.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from array import array
from bisect import bisect_left
from pathlib import Path

import numpy as np

from ..files import write_whole
from ..settings import MAX_DRAFT_LENGTH
from .base import Draft

MAX_MATCH = 16              # ids compared at most
CONTEXT = 16                # prompt ids stored in front of each answer (FIM sentinels, the line)
SEP = 0x7FFFFFFF            # between answers: above every token id, and never matched
MAX_PROPOSAL = 64           # ids proposed at most (the engine asks for up to MAX_DRAFT_LENGTH)
PROPOSAL_CACHE = 4096       # proposals kept by the run they follow
MAX_VOTERS = 32             # occurrences a proposal is voted from (evenly spread over the block)
# The proposal stops where fewer than this share of the occurrences still agreeing go on with
# the same id: past there the target follows no better than chance, and each further id costs
# verify width (as the draft model stops below a top probability of 0.4).
MIN_SHARE = 0.4
_SEP_BYTES = SEP.to_bytes(4, "big")
FILE_NAME = "datastore.npz"  # `datastore: auto` loads this file from the target's directory


class DatastoreError(ValueError):
    """A datastore file that cannot serve this target."""


def vocab_fingerprint(vocab: dict[str, int]) -> str:
    """Names the tokenizer a store's ids belong to: another vocabulary must not use them."""
    return hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()[:16]


def save(path: str | Path, answers: list[tuple[list[int], list[int]]], vocab: dict[str, int]) -> int:
    """Write (prompt ids, answer ids) pairs as a store for the tokenizer of `vocab`; returns
    the ids stored."""
    flat: list[int] = []
    for prompt, answer in answers:
        if answer:
            flat += list(prompt[-CONTEXT:]) + list(answer) + [SEP]
    ids = np.asarray(flat, dtype=np.uint32)
    if ids.size and int(ids[ids != SEP].max(initial=0)) < 0xFFFF:
        ids = np.where(ids == SEP, 0xFFFF, ids).astype(np.uint16)   # half the size; SEP restored at load
    np.savez_compressed(path, ids=ids, vocab=np.asarray(vocab_fingerprint(vocab)))
    return int(ids.size)


def _sorted_suffixes(rev: np.ndarray) -> np.ndarray:
    """Start positions of rev's suffixes, sorted by their first MAX_MATCH ids (prefix doubling:
    ranks by the first h ids, then by pairs of ranks for 2h; the first ranks from 4 ids at once
    where the ids are small enough to pack)."""
    n = rev.size
    _, rank = np.unique(rev, return_inverse=True)
    rank = rank.astype(np.int64) + 1          # 0 is "past the end"
    base, h = int(rank.max(initial=0)) + 1, 1
    if base ** 4 < 1 << 62:
        key = np.zeros(n, dtype=np.int64)
        for j in range(4):
            shifted = np.zeros(n, dtype=np.int64)
            shifted[:max(0, n - j)] = rank[j:]
            key = key * base + shifted
        _, rank = np.unique(key, return_inverse=True)
        rank, h = rank.astype(np.int64) + 1, 4
    while h < MAX_MATCH:
        second = np.zeros(n, dtype=np.int64)
        if h < n:
            second[:n - h] = rank[h:]
        key = rank * (n + 1) + second
        _, rank = np.unique(key, return_inverse=True)
        rank = rank.astype(np.int64) + 1
        h *= 2
    return np.argsort(rank, kind="stable").astype(np.int32)


def _cached_order(ids: np.ndarray, rev: np.ndarray) -> np.ndarray:
    """The suffix order of `rev`, kept on disk by the store's content (SPECFILL_CACHE, default
    ~/.cache/specfill): sorting 2M ids takes seconds, reading the order back milliseconds."""
    digest = hashlib.sha256(ids.tobytes()).hexdigest()[:24]
    folder = Path(os.environ.get("SPECFILL_CACHE") or Path.home() / ".cache" / "specfill")
    path = folder / f"datastore-{digest}-{MAX_MATCH}.npy"
    try:
        order = np.load(path, allow_pickle=False)
        if order.shape == (rev.size,) and order.dtype == np.int32:
            return order
    except (OSError, ValueError):
        pass
    order = _sorted_suffixes(rev)
    def save(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            np.save(fh, order)
    try:
        write_whole(path, save)
    except OSError:
        pass     # a read-only home: sort again next time
    return order


class Datastore:
    """Finds what the target wrote after the longest run of ids that ends a sequence."""

    def __init__(self, ids: np.ndarray):
        ids = ids.astype(np.int64)
        self.size = int(ids.size)
        rev = ids[::-1].copy()
        # Big-endian bytes compare as the ids do; a slice of MAX_MATCH ids is a suffix's key.
        self._bytes = rev.astype(">u4").tobytes()
        self._order = array("i", _cached_order(ids, rev).tobytes())
        # the ids forward, big-endian, with SEP past the end: an occurrence's continuation is a slice
        self._proposals: dict[tuple, tuple[int, ...]] = {}    # (run, k, special ids) -> proposal
        self._forward = np.concatenate([ids, np.full(MAX_PROPOSAL, SEP)]).astype(">u4").tobytes()

    @classmethod
    def load(cls, path: str | Path, vocab: dict[str, int]) -> "Datastore":
        try:
            data = np.load(path, allow_pickle=False)
            if not isinstance(data, np.lib.npyio.NpzFile):    # a plain .npy array
                raise ValueError
            with data:
                ids, fingerprint = data["ids"], str(data["vocab"])
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
            raise DatastoreError(f"datastore {str(path)!r}: not a datastore file (.npz with ids and "
                                 "vocab, as specfill datastore writes it)") from None
        if fingerprint != vocab_fingerprint(vocab):
            raise DatastoreError(f"datastore {str(path)!r}: made for another tokenizer than the target's")
        if ids.dtype == np.uint16:     # stored small: 0xFFFF stood for SEP
            ids = np.where(ids == 0xFFFF, SEP, ids.astype(np.int64))
        return cls(ids)

    def _key(self, r: int) -> bytes:
        return self._bytes[4 * r:4 * (r + MAX_MATCH)]

    def find(self, seq: list[int], k: int, special_ids=frozenset()) -> Draft | None:
        """The majority continuation (up to k ids) of the longest run of ids ending `seq` found
        in the store, with `match` = that run's length; None when not even its last id is there."""
        if k <= 0 or not seq or self.size == 0:
            return None
        k = min(k, MAX_PROPOSAL)
        tail = seq[:-MAX_MATCH - 1:-1]
        # big-endian 4-byte ids, as the index holds them (struct, not numpy: a round's one
        # query of 16 ids is cheaper without an array made and dropped)
        query = struct.pack(f">{len(tail)}I", *tail)
        at = bisect_left(self._order, query, key=self._key)
        before, after = self._common(query, at - 1), self._common(query, at)
        match = max(before, after)
        if match == 0:
            return None
        prefix = query[:4 * match]
        # what follows a run depends on the run alone: short runs come back round after round
        if not isinstance(special_ids, frozenset):
            special_ids = frozenset(special_ids)
        cache_key = (prefix, k, special_ids)
        ids = self._proposals.get(cache_key)
        if ids is None:
            # the run's occurrences are one block of the sorted order, around `at`
            ids = self._proposals[cache_key] = self._vote(prefix, at - 1 if before == match else at, k, special_ids)
            if len(self._proposals) > PROPOSAL_CACHE:
                del self._proposals[next(iter(self._proposals))]    # the oldest
        return Draft(list(ids), match=match, source="datastore") if ids else None

    def _vote(self, prefix: bytes, inside: int, k: int, special_ids) -> tuple[int, ...]:
        """The majority continuation of the occurrences of `prefix` (a run of ids, reversed),
        whose block of the sorted order holds position `inside`."""
        lo, hi = self._block_around(prefix, inside)
        order = self._order
        block = [order[r] for r in range(lo, hi, (hi - lo) // MAX_VOTERS + 1)] if hi - lo > MAX_VOTERS \
            else order[lo:hi]
        # each occurrence's next k ids as big-endian bytes (past the end: SEP), sorted: the
        # occurrences that agree on the ids proposed so far are one run of this list, and
        # within it those that go on with the same id are one run too (SEP, the largest, last)
        fwd, last = self._forward, self.size - 1
        conts = sorted([fwd[4 * (last - r + 1):4 * (last - r + 1 + k)] for r in block])
        return tuple(_majority(conts, k, special_ids))

    def _block_around(self, prefix: bytes, inside: int) -> tuple[int, int]:
        """[lo, hi): the sorted suffixes that start with `prefix`, one of which is at `inside`.
        Galloping out from there: a long run's block is a few suffixes wide, found in a few
        comparisons where two binary searches over the whole order took some 45."""
        order, n, key = self._order, len(self._order), self._key
        step, lo = 1, inside      # lo: a suffix known to start with prefix
        while lo - step >= 0 and key(order[lo - step]).startswith(prefix):
            lo, step = lo - step, 2 * step
        lo = bisect_left(order, prefix, lo=max(0, lo - step), hi=lo, key=key)
        step, hi = 1, inside
        while hi + step < n and key(order[hi + step]).startswith(prefix):
            hi, step = hi + step, 2 * step
        hi = bisect_left(order, prefix + b"\x80", lo=hi, hi=min(n, hi + step), key=key)
        return lo, hi

    def _common(self, query: bytes, at: int) -> int:
        """Ids that query and the at-th suffix in sorted order have in common at their start."""
        if not 0 <= at < len(self._order):
            return 0
        return _common_ids(self._key(self._order[at]), query)


def _common_ids(a: bytes, b: bytes) -> int:
    """How many 4-byte ids two big-endian id strings share at their start."""
    n = min(len(a), len(b))
    diff = int.from_bytes(a[:n], "big") ^ int.from_bytes(b[:n], "big")
    return (n - (diff.bit_length() + 7) // 8) // 4


def _majority(conts: list[bytes], k: int, special_ids) -> list[int]:
    """Follow the majority through the sorted continuations `conts`: at each id, among the
    occurrences that agreed so far and have not reached an answer's end, the commonest next id
    (the smallest among equals), kept while all agree or while it holds MIN_SHARE of them."""
    out: list[int] = []
    a, b, j = 0, len(conts), 0
    while j < k:
        at = 4 * j
        end = b      # those that reached an answer's end (SEP here) sort last: leave them out
        while end > a and conts[end - 1][at:at + 4] == _SEP_BYTES:
            end -= 1
        if end == a:
            break
        first, final = conts[a], conts[end - 1]
        if first[at:at + 4] == final[at:at + 4]:     # all agree: as far as they go on agreeing
            run = _common_ids(first[at:], final[at:])
            ids = struct.unpack(f">{run}I", first[at:at + 4 * run])
            for t in ids:
                if t in special_ids or t == SEP:
                    break
                out.append(t)
                j += 1
            else:
                b = end
                continue
            break
        counts, i = [], a     # (count, start) of each run of the same next id
        while i < end:
            chunk, start = conts[i][at:at + 4], i
            while i < end and conts[i][at:at + 4] == chunk:
                i += 1
            counts.append((i - start, start))
        top = max(c for c, _ in counts)
        if top < MIN_SHARE * (b - a):
            break
        start = next(s for c, s in counts if c == top)   # the smallest id among the commonest
        best = int.from_bytes(conts[start][at:at + 4], "big")
        if best in special_ids:
            break
        out.append(best)
        a, b, j = start, start + top, j + 1
    return out


class DatastoreDrafter:
    """The datastore as a drafter: what the target wrote after the longest run of ids that ends
    the sequence, elsewhere."""
    name, free, longest = "datastore", True, MAX_DRAFT_LENGTH

    def __init__(self, store: Datastore, special_ids=frozenset()):
        self.store = store
        self.special_ids = frozenset(special_ids)

    def begin(self, prompt, draft_prompt=None) -> tuple[int, int]:
        return 0, 0

    def propose(self, seq, generated, k, sampling) -> Draft:
        return self.store.find(seq, k, self.special_ids) or Draft([])

    def end(self, answer) -> None:
        pass

    def forward_ms(self) -> float:
        return 0.0

    def clear(self) -> None:
        pass


def resolve(setting: str, target_dir: str | None) -> Path | None:
    """The store file a `datastore` setting names: `none` -> None, `auto` -> the target
    directory's FILE_NAME when there is one, else the path given."""
    if setting == "none":
        return None
    if setting == "auto":
        path = Path(target_dir) / FILE_NAME if target_dir else None
        return path if path is not None and path.is_file() else None
    path = Path(setting).expanduser()
    if not path.is_file():
        raise DatastoreError(f"datastore {setting!r}: no such file")
    return path
