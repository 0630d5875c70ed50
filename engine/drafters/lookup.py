"""Prompt lookup: a drafter with no model. It copies what followed an earlier occurrence of the
sequence's last few ids: in the request's own ids, in recent answers, and in the documents beyond
the prompt (documents.py). For example, after the ids [1, 2, 3, 4, 5, 9, 1, 2, 3] its last three,
[1, 2, 3], occurred at the start, followed by [4, 5, 9]: that is the proposal, and the 3 matched
ids (with any before them that match too) are its `match`, which tells the policy how far to
trust it.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque
from typing import Sequence

from ..settings import MAX_DRAFT_LENGTH
from .base import Draft
from .documents import MAX_MATCH, MAX_REQUEST_TOKENS, BlockIndex, Corpus, DocumentsWorth, LookupText

ANSWER_END = -1      # after each recent answer in their joined ids: never a token id


def as_bytes(ids: Sequence[int]) -> bytes:
    """Ids as 4-byte strings: a run of ids is then found with bytes.rfind (C speed)."""
    return array("i", ids).tobytes()


def latest_copy(text: bytes, ids: Sequence[int], tail: bytes, k: int, stops) -> tuple[list[int], int]:
    """Up to k ids after the latest occurrence of `tail` in `ids` that has something after it
    (cut before an id in `stops`), and where that occurrence starts (-1: none). `text` is
    as_bytes(ids), `tail` as_bytes of the ids looked for; an occurrence ending at the last id has
    nothing after it and is not one.

        >>> seq = [1, 2, 3, 4, 5, 9, 1, 2, 3]
        >>> latest_copy(as_bytes(seq), seq, as_bytes([1, 2, 3]), 3, set())
        ([4, 5, 9], 0)
        >>> latest_copy(as_bytes(seq), seq, as_bytes([9]), 3, set())
        ([1, 2, 3], 5)
    """
    n, end = len(tail) // 4, len(text) - 4
    while (at := text.rfind(tail, 0, end)) >= 0:
        end = at + len(tail) - 1      # the next search: occurrences starting before this one
        if at % 4:                    # across ids: not an occurrence
            continue
        start = at // 4
        out = []
        for t in ids[start + n:start + n + k]:
            if t in stops:
                break
            out.append(t)
        if out:
            return out, start
    return [], -1


def matched_before(source: Sequence[int], start: int, seq: list[int], n: int) -> int:
    """How many ids before a matched n-gram (source[start:start + n] == seq[-n:]) match too, up
    to MAX_MATCH - n: a long match predicts its continuation far better than a short one."""
    m = 0
    while n + m < MAX_MATCH and start - m - 1 >= 0 and len(seq) - n - m - 1 >= 0 \
            and source[start - m - 1] == seq[len(seq) - n - m - 1]:
        m += 1
    return m


def repeated(copy: list[int], k: int) -> list[int]:
    """A copy that ran into the sequence's end, continued for k ids as the period it found (what
    looking the same n-gram up in seq + copy, again and again, would propose): repeated lines and
    runs of one token are where this pays."""
    return [copy[i % len(copy)] for i in range(k)]


class GrowingBytes:
    """as_bytes(seq) of the engine's sequence, kept as it grows: the engine only appends to a
    request's sequence, so each round converts its new ids only (another list is converted whole)."""

    def __init__(self):
        self.seq: list[int] | None = None
        self.data, self.done = bytearray(), 0

    def of(self, seq: list[int]) -> bytearray:
        if seq is not self.seq or self.done > len(seq):
            self.seq, self.data, self.done = seq, bytearray(), 0
        if len(seq) > self.done:
            self.data += as_bytes(seq[self.done:])
            self.done = len(seq)
        return self.data


class RecentAnswers:
    """The last few answers, joined (each followed by ANSWER_END) so that one search finds the
    latest occurrence in the newest answer that has one: what was just suggested is often what
    gets typed and asked for again."""

    def __init__(self, keep: int, special_ids):
        self.answers: deque[list[int]] = deque(maxlen=keep)
        self.stops = frozenset(special_ids) | {ANSWER_END}
        self._join()

    def add(self, answer: list[int]) -> None:
        self.answers.append(list(answer))
        self._join()

    def clear(self) -> None:
        self.answers.clear()
        self._join()

    def _join(self) -> None:
        self.ids, self.starts = [], []
        for a in self.answers:
            self.starts.append(len(self.ids))
            self.ids += a + [ANSWER_END]
        self.text = as_bytes(self.ids)

    def find(self, tail: bytes, k: int, seq: list[int], n: int) -> Draft | None:
        out, start = latest_copy(self.text, self.ids, tail, k, self.stops)
        if not out:
            return None
        c = bisect_right(self.starts, start) - 1
        return Draft(out, match=n + matched_before(self.answers[c], start - self.starts[c], seq, n),
                     source="completions")


class LookupDrafter:
    """Searches the request's own ids first (the latest occurrence of their last 3, 2 or 1 ids,
    the longest first), then the recent answers, then the documents given by `read` (where an
    occurrence must match KEY_NGRAM ids or more). The proposal that matched the most ids before it
    wins; the nearer one among equals."""
    name, free, longest = "lookup", True, MAX_DRAFT_LENGTH

    def __init__(self, max_ngram: int = 3, special_ids=frozenset(), recent: int = 8,
                 index: BlockIndex | None = None):
        self.max_ngram = max_ngram
        self.special_ids = special_ids
        self.recent = RecentAnswers(recent, special_ids)
        self.seq_bytes = GrowingBytes()
        self.index = index
        self.corpus = Corpus()
        # what `read` gave, until the request's first search needs the blocks (`documents`)
        self.unread: tuple[Sequence[LookupText], int] | None = None
        self.worth = DocumentsWorth()
        self.skipped = False    # the request skipped the documents (DocumentsWorth)

    def begin(self, prompt, draft_prompt=None) -> tuple[int, int]:
        return 0, 0

    def end(self, answer: list[int]) -> None:
        if len(answer) > self.max_ngram:
            self.recent.add(answer)

    def forward_ms(self) -> float:
        return 0.0

    def clear(self) -> None:
        self.recent.clear()    # the block index stays: it holds tokenized text, not model state

    def read(self, texts: Sequence[LookupText] = (), max_tokens: int = MAX_REQUEST_TOKENS) -> None:
        """The documents the next request looks up besides its own ids (none: only those), unless
        reading them has not paid lately (DocumentsWorth). They are cut into blocks and tokenized
        at the request's first search, not here: an answer that the prefill's token ends never
        pays for them."""
        self.corpus, self.skipped = Corpus(), False
        if texts and self.index is not None:
            self.worth.skipped += 1
            self.skipped = not self.worth.wanted()
        self.unread = (texts, max_tokens) if texts and self.index is not None and not self.skipped else None

    def documents(self) -> Corpus:
        """The request's blocks beyond the prompt, read the first time a search asks."""
        if self.unread is not None:
            texts, max_tokens = self.unread
            self.unread = None
            self.corpus = self.index.corpus(texts, max_tokens)
        return self.corpus

    def judge(self, written: int, step_ms: float) -> None:
        """The request that read the documents ended: their proposals' tokens the target wrote
        too, at `step_ms` a target step, against what reading them took (DocumentsWorth)."""
        if self.corpus.blocks:
            self.worth.record(self.index.stats.last_ms, written, step_ms)

    def summary(self) -> dict:
        """The latest request's reading of the documents: blocks and tokens read, tokens it had to
        tokenize for that and the time it took, or that it skipped them and what reading them has
        gained on average; blocks tokenized since the start (cache misses) and tokens tokenized
        ahead of requests (`BlockIndex.warm`)."""
        if self.index is None:
            return {}
        s, read = self.index.stats, bool(self.corpus.blocks)
        return dict(blocks=len(self.corpus.blocks), block_tokens=self.corpus.tokens,
                    read_tokenized=s.last_tokenized if read else 0, read_ms=round(s.last_ms, 3) if read else 0.0,
                    blocks_tokenized=s.blocks_tokenized, cached_tokens=self.index.cached_tokens,
                    warmed_tokens=s.tokens_warmed, documents_skipped=self.skipped,
                    documents_gain_ms=round(self.worth.gain_ms, 3))

    def propose(self, seq, generated, k, sampling) -> Draft:
        found = self.near(seq, k)
        if k > 0 and (found is None or found.match < MAX_MATCH) and self.documents().blocks:
            far = self.corpus.find(seq, k, found.match if found else 0, self.special_ids)
            found = far or found
        return found or Draft([])

    def near(self, seq: list[int], k: int) -> Draft | None:
        """The latest occurrence of seq's last 3, 2 or 1 ids (the longest first) in seq itself,
        else in the recent answers (the newest first), that has something after it. A copy from
        seq itself that runs into seq's end goes on as the period it found (`repeated`)."""
        if k <= 0:      # (a slice by a negative k would take ids from the end)
            return None
        text = self.seq_bytes.of(seq)
        for n in range(min(self.max_ngram, len(seq) - 1), 0, -1):
            tail = text[-4 * n:]
            out, start = latest_copy(text, seq, tail, k, self.special_ids)
            if out:
                if len(out) < k and start + n + len(out) == len(seq):
                    out = repeated(out, k)
                return Draft(out, match=n + matched_before(seq, start, seq, n), source="prompt")
            found = self.recent.find(tail, k, seq, n) if self.recent.answers else None
            if found is not None:
                return found
        return None
