"""A datastore of the target's own answers: a drafter with no model that has learnt the target.

Prompt lookup copies what followed the last few tokens in the text at hand. The datastore does
the same in a store of what the target itself wrote at many editor positions of other code
(made once per target by `python -m training.datastore`; the default pair ships one). A small
code model repeats itself across files, so what it wrote after a run of tokens elsewhere is
often what it writes here: retrieval drafting (REST) on on-policy data, i.e. distillation into
a table instead of a model. It costs a binary search and a few array reads per round.

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
import zipfile
from array import array
from bisect import bisect_left
from collections import Counter
from pathlib import Path

import numpy as np

from .control import DATASTORE_SOURCE
from .drafters import Draft

MAX_MATCH = 16              # ids compared at most (the controller's top class is 16+)
CONTEXT = 16                # prompt ids stored in front of each answer (FIM sentinels, the line)
SEP = 0x7FFFFFFF            # between answers: above every token id, and never matched
MAX_VOTERS = 32             # occurrences a proposal is voted from (evenly spread over the block)
# The proposal stops where fewer than this share of the occurrences still agreeing go on with
# the same id: past there the target follows no better than chance, and each further id costs
# verify width (as the draft model stops below a top probability of 0.4).
MIN_SHARE = 0.4
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
    try:   # written whole, then renamed: a reader never sees half a file
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            np.save(fh, order)
        os.replace(tmp, path)
    except OSError:
        pass     # a read-only home: sort again next time
    return order


class Datastore:
    """Finds what the target wrote after the longest run of ids that ends a sequence."""

    def __init__(self, ids: np.ndarray):
        ids = ids.astype(np.int64)
        self.size = int(ids.size)
        self._ids = array("q", ids.tobytes())    # read a few at a time: faster than numpy here
        rev = ids[::-1].copy()
        # Big-endian bytes compare as the ids do; a slice of MAX_MATCH ids is a suffix's key.
        self._bytes = rev.astype(">u4").tobytes()
        self._order = array("i", _cached_order(ids, rev).tobytes())

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
        tail = seq[:-MAX_MATCH - 1:-1]
        query = np.asarray(tail, dtype=">u4").tobytes()
        at = bisect_left(self._order, query, key=self._key)
        match = max(self._common(query, at - 1), self._common(query, at))
        if match == 0:
            return None
        prefix = query[:4 * match]
        lo = bisect_left(self._order, prefix, key=self._key)
        hi = bisect_left(self._order, prefix + b"\x80", lo=lo, key=self._key)
        block = self._order[lo:hi]
        if len(block) > MAX_VOTERS:
            block = block[::len(block) // MAX_VOTERS + 1]
        ids, last = self._ids, self.size - 1
        ends = [last - r for r in block]      # where each occurrence ends in ids
        out: list[int] = []
        for j in range(1, k + 1):
            nxt = [(e, ids[e + j]) for e in ends if e + j <= last and ids[e + j] != SEP]
            if not nxt:
                break
            first = nxt[0][1]
            if all(t == first for _, t in nxt):      # the common case past the first ids
                best = first
            else:
                counts = Counter(t for _, t in nxt)
                top = max(counts.values())
                if top < MIN_SHARE * len(ends):
                    break
                best = min(t for t, c in counts.items() if c == top)
            if best in special_ids:
                break
            out.append(best)
            ends = [e for e, t in nxt if t == best]
        return Draft(out, match=match, source=DATASTORE_SOURCE) if out else None

    def _common(self, query: bytes, at: int) -> int:
        """Ids that query and the at-th suffix in sorted order have in common at their start."""
        if not 0 <= at < len(self._order):
            return 0
        key = self._key(self._order[at])
        n = 0
        while 4 * n + 4 <= min(len(key), len(query)) and key[4 * n:4 * n + 4] == query[4 * n:4 * n + 4]:
            n += 1
        return n


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
