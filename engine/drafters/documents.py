"""The documents prompt lookup reads beyond the prompt: the rest of the document being completed
and the other open documents, as blocks of target ids indexed for lookup.

The texts are cut into blocks of lines (`line_blocks`), each tokenized with the target's tokenizer
and indexed once (`Block`: each run of KEY_NGRAM ids -> the latest position it ends at), cached
by the block's text (`BlockIndex`), so a keystroke re-tokenizes only the block it touched; each
text's cut into blocks is kept too, and so is the last request's corpus, so a keystroke inside
the prompt's lines reads nothing again. A request's blocks (`Corpus`) are looked up by the
sequence's last KEY_NGRAM ids, and the occurrence that matches the most tokens before them wins.
Reading them costs a request a few milliseconds; `DocumentsWorth` skips them while they do not pay.
"""
from __future__ import annotations

import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .base import Draft

DOCUMENT, OPEN_DOCUMENTS = "document", "open documents"   # Draft.source of a copy from them
MAX_MATCH = 32       # a lookup match this long is as good as any longer one (counted no further)

# Blocks are looked up by the sequence's last KEY_NGRAM ids: an occurrence in the documents
# must match at least that many (shorter matches there rarely propose what the target writes).
KEY_NGRAM = 8

# Blocks end at a blank line once they have BLOCK_MIN_LINES lines, and at BLOCK_MAX_LINES lines
# in any case: cut where the code is, an edit moves no boundary beyond the next blank line.
BLOCK_MIN_LINES = 8
BLOCK_MAX_LINES = 48
MAX_LINE_CHARS = 2000            # longer lines are data, not code: never read
WINDOW_LINES = 4000              # lines read on each side of the cursor (and of another document)
MAX_REQUEST_TOKENS = 32768       # tokens looked up per request, blocks nearest the cursor first
MAX_NEW_TOKENS = 8192            # tokens tokenized per request: a new large file fills in over requests
MAX_CACHED_TOKENS = 65536        # tokens kept indexed across requests (least recently used go)
# Texts whose cut into blocks is kept across requests (the document's two sides beyond the prompt,
# other open documents): a keystroke changes the lines the prompt holds, not those, and comparing
# them with the last request's costs a tenth of cutting them again.
MAX_KEPT_CUTS = 16
# Blocks not cached go to the tokenizer this many at a time, in reading order: the first block a
# request misses and the ones it would miss next, up to a cached one. One call for many texts
# skips the per-call overhead (and, where the tokenizers release has it, the character offsets).
TOKENIZE_BATCH = 16
# Fewer bytes a token than code takes, so a batch guessed to fit a request's tokenizing budget
# seldom tokenizes much past it (what is past it is dropped, not indexed).
BYTES_PER_TOKEN_LOW = 3
# Blocks a tokenizer call when indexing ahead of requests (BlockIndex.warm): a request that
# arrives meanwhile waits for one such call before its own work starts.
WARM_BATCH = 4


@dataclass(frozen=True)
class LookupText:
    """A text prompt lookup reads besides the request's own ids: its lines (LF, no line ends),
    and for the document being completed the cursor, where it is read as two texts: the text
    after the cursor is never proposed as what follows the text before it."""
    lines: Sequence[str]
    cursor: tuple[int, int] | None = None     # (line, character): the document being completed
    # lines [first, end) of the document being completed that its prompt holds (the request's own
    # ids cover them: reading them again would only tokenize each keystroke's block for nothing)
    in_prompt: tuple[int, int] | None = None


def line_blocks(lines: Sequence[str], start: int = 0, end: int | None = None) -> list[str]:
    """lines[start:end] as block texts, each line with its "\\n" but the list's last line, cut
    after a blank line once a block has BLOCK_MIN_LINES lines, at BLOCK_MAX_LINES lines, and
    around over-long lines (left out)."""
    end = len(lines) if end is None else end
    blocks: list[str] = []
    first = start
    for i in range(start, end):
        line = lines[i]
        if len(line) > MAX_LINE_CHARS:
            if first < i:
                blocks.append("\n".join(lines[first:i]) + "\n")
            first = i + 1
            continue
        n = i - first + 1
        if n >= BLOCK_MAX_LINES or (n >= BLOCK_MIN_LINES and not line.strip()):
            blocks.append("\n".join(lines[first:i + 1]) + ("\n" if i + 1 < len(lines) else ""))
            first = i + 1
    if first < end:
        blocks.append("\n".join(lines[first:end]) + ("\n" if end < len(lines) else ""))
    return [b for b in blocks if b.strip()]


class Block:
    """One block's target ids, and where each run of KEY_NGRAM of them last ends (keyed by
    its hash: checked against the ids when used)."""
    __slots__ = ("ids", "ends")

    def __init__(self, ids: list[int]):
        self.ids = array("i", ids)
        self.ends = _last_ends(ids, KEY_NGRAM)


def _last_ends(ids: list[int], n: int) -> dict[int, int]:
    """hash(ids[i - n + 1:i + 1]) -> i, the latest i of each (a dict keeps the last value given)."""
    # The block's last token is never a key's end: a key needs a continuation in its own block
    # (this is also why the text before the cursor never proposes the text after it).
    body = ids[:-1]
    runs = zip(*(body[j:] for j in range(n)))
    return dict(zip(map(hash, runs), range(n - 1, len(body))))


@dataclass
class IndexStats:
    blocks_tokenized: int = 0       # blocks tokenized and indexed (cache misses)
    tokens_tokenized: int = 0
    tokens_warmed: int = 0          # of those, tokenized ahead of requests (`warm`)
    last_ms: float = 0.0            # building the latest request's corpus
    last_tokenized: int = 0         # tokens tokenized for it (0 where the last corpus was reused)


class BlockIndex:
    """Block text -> Block, least recently used dropped past `max_cached_tokens`. `encode` is
    the target's tokenizer on plain text."""

    def __init__(self, encode, dummy_prefix: bool = False, max_cached_tokens: int = MAX_CACHED_TOKENS,
                 encode_many=None):
        self._encode = encode
        # several texts in one call (TokenVocab.encode_texts; TOKENIZE_BATCH)
        self._encode_many = encode_many or (lambda texts: [encode(t) for t in texts])
        self._marker = encode("\n") if dummy_prefix else None
        self.max_cached_tokens = max_cached_tokens
        self._blocks: OrderedDict[str, Block] = OrderedDict()
        self.cached_tokens = 0
        self.stats = IndexStats()
        # (lines cut, their first and last) -> (the lines, their block texts): `cut`
        self._cuts: OrderedDict[tuple, tuple[list[str], list[str]]] = OrderedDict()
        self._last_corpus: tuple | None = None     # (its shape, its segments' block lists, the corpus)

    def cut(self, lines: Sequence[str], start: int = 0, end: int | None = None) -> list[str]:
        """line_blocks(lines, start, end), kept for the next request: lines equal to the ones cut
        before (compared whole) give their blocks back without cutting them again."""
        end = len(lines) if end is None else min(end, len(lines))
        part = list(lines[start:end])
        key = (len(part), end < len(lines), part[0] if part else None, part[-1] if part else None)
        kept = self._cuts.get(key)
        if kept is not None and kept[0] == part:
            self._cuts.move_to_end(key)
            return kept[1]
        blocks = line_blocks(lines, start, end)
        self._cuts[key] = (part, blocks)
        self._cuts.move_to_end(key)
        while len(self._cuts) > MAX_KEPT_CUTS:
            self._cuts.popitem(last=False)
        return blocks

    def encode_block(self, text: str) -> list[int]:
        """A block's ids as they come in the middle of a text (encode_blocks of one)."""
        return self.encode_blocks([text])[0]

    def encode_blocks(self, texts: list[str]) -> list[list[int]]:
        """Each block's ids as they come in the middle of a text, in one call to the tokenizer: a
        tokenizer with a SentencePiece dummy prefix would put a space in front of a block's first
        word, so each block is encoded behind a newline, whose ids are then dropped."""
        if self._marker is None:
            return self._encode_many(texts)
        n = len(self._marker)
        return [ids[n:] if ids[:n] == self._marker else self._encode(text)
                for ids, text in zip(self._encode_many(["\n" + t for t in texts]), texts)]

    def block(self, text: str) -> Block | None:
        """The cached block of `text` (now the most recently used), or None."""
        found = self._blocks.get(text)
        if found is not None:
            self._blocks.move_to_end(text)
        return found

    def tokenize_run(self, texts: Sequence[str], room: int) -> dict[str, Block]:
        """Tokenize and index texts[0] and the texts after it that are not cached either (up to
        the first cached one, TOKENIZE_BATCH in all), in one tokenizer call, as many as their
        bytes, at BYTES_PER_TOKEN_LOW a token, leave `room` tokens for; of those, each is indexed
        while the tokens indexed before it stay under `room`, as reading block by block would
        (the rest are dropped). Their blocks by text, in order: the caller reads them from here,
        where the cache may already have let the first ones go."""
        batch, guess = [texts[0]], len(texts[0].encode("utf-8")) // BYTES_PER_TOKEN_LOW
        for t in texts[1:TOKENIZE_BATCH]:
            if t in self._blocks or "\x00" in t or t in batch:
                break
            guess += len(t.encode("utf-8")) // BYTES_PER_TOKEN_LOW
            if guess >= room:
                break
            batch.append(t)
        run, added = {}, 0
        for t, ids in zip(batch, self.encode_blocks(batch)):
            if added >= room:
                break
            run[t] = Block(ids)
            self._add(t, run[t])
            added += len(ids)
        return run

    def warm(self, texts: Sequence[LookupText], max_tokens: int = MAX_REQUEST_TOKENS,
             stop: Callable[[], bool] = lambda: False) -> int:
        """Tokenize and index the blocks of `texts` that are not cached, in the order a request
        reads them, before any request asks (a document just opened, while no request waits):
        WARM_BATCH blocks a tokenizer call, until `stop()` (asked before each call) is true or
        max_tokens are tokenized. Returns the tokens tokenized."""
        done = 0
        for one in texts:
            if done >= max_tokens or stop():
                break
            # cut here, not through `cut`: a document being opened must not push the cuts that
            # requests keep across keystrokes out of that cache
            segments = _segments([one])
            todo = [t for t in dict.fromkeys(segments[s].texts[i] for s, i in _reading_order(segments))
                    if t not in self._blocks and "\x00" not in t]
            for a in range(0, len(todo), WARM_BATCH):
                if done >= max_tokens or stop():
                    break
                batch = [t for t in todo[a:a + WARM_BATCH] if t not in self._blocks]
                for text, ids in zip(batch, self.encode_blocks(batch)):
                    self._add(text, Block(ids))
                    done += len(ids)
        self.stats.tokens_warmed += done
        return done

    def _add(self, text: str, block: Block) -> None:
        self._blocks[text] = block
        n = len(block.ids)
        self.stats.blocks_tokenized += 1
        self.stats.tokens_tokenized += n
        self.cached_tokens += n
        while self.cached_tokens > self.max_cached_tokens and len(self._blocks) > 1:
            _, old = self._blocks.popitem(last=False)
            self.cached_tokens -= len(old.ids)

    def corpus(self, texts: Sequence[LookupText], max_tokens: int = MAX_REQUEST_TOKENS,
               max_new_tokens: int = MAX_NEW_TOKENS) -> "Corpus":
        """The blocks of `texts` (the document being completed first, then others, newest
        first), nearest the cursor first, up to `max_tokens` tokens, of which up to about
        `max_new_tokens` tokenized now (blocks not cached beyond that wait for later requests)."""
        t0 = time.perf_counter()
        tokenized0 = self.stats.tokens_tokenized
        segments = _segments(texts, self.cut)
        # Where every text is cut as last time (`cut` hands back the same lists), the corpus is
        # the last one: a keystroke inside the prompt's lines changes none of it.
        shape = (max_tokens, [(seg.source, seg.nearest_last) for seg in segments])
        last = self._last_corpus
        if last is not None and last[0] == shape and all(a is seg.texts for a, seg in zip(last[1], segments)):
            corpus = last[2]
        else:
            corpus = Corpus.of(self, segments, max_tokens, max_new_tokens)
            # (one that left blocks for later requests to tokenize is built again next time)
            self._last_corpus = (shape, [seg.texts for seg in segments], corpus) if corpus.complete else None
        self.stats.last_ms = (time.perf_counter() - t0) * 1000
        self.stats.last_tokenized = self.stats.tokens_tokenized - tokenized0
        return corpus


@dataclass
class Segment:
    """A contiguous text as its block texts, in document order: a continuation runs on into the next."""
    source: str              # DOCUMENT (the one being completed) or OPEN_DOCUMENTS
    texts: list[str]
    nearest_last: bool = False   # the document before the cursor: its last block is the nearest


def _segments(texts: Sequence[LookupText], cut=line_blocks) -> list[Segment]:
    """The texts as segments of block texts; `cut(lines, start, end)` cuts lines into blocks."""
    out = []
    for t in texts:
        lines = t.lines
        if t.cursor is None:
            out.append(Segment(OPEN_DOCUMENTS, cut(lines, 0, min(len(lines), 2 * WINDOW_LINES))))
            continue
        line, char = t.cursor
        if not 0 <= line < len(lines):
            continue
        if t.in_prompt is not None and t.in_prompt[0] <= line < t.in_prompt[1]:
            first, end = t.in_prompt
            before = lines[max(0, first - WINDOW_LINES):first]
            after = lines[end:end + WINDOW_LINES]
        else:
            before = [*lines[max(0, line - WINDOW_LINES):line], lines[line][:char]]
            after = [lines[line][char:], *lines[line + 1:line + 1 + WINDOW_LINES]]
        out += [Segment(DOCUMENT, cut(before), nearest_last=True), Segment(DOCUMENT, cut(after))]
    return out


def _reading_order(segments: list[Segment]) -> list[tuple[int, int]]:
    """(segment, block) pairs, nearest first: the document's two sides take turns block by block
    from the cursor, then the other documents from their tops, newest document first."""
    sides = [[(s, i) for i in (reversed(range(len(seg.texts))) if seg.nearest_last else range(len(seg.texts)))]
             for s, seg in enumerate(segments) if seg.source == DOCUMENT]
    order = []
    for turn in range(max(map(len, sides), default=0)):
        order += [side[turn] for side in sides if turn < len(side)]
    return order + [(s, i) for s, seg in enumerate(segments) if seg.source != DOCUMENT for i in range(len(seg.texts))]


@dataclass
class Corpus:
    """The blocks one request looks up, in reading priority (the first wins among equal matches)."""
    blocks: list[Block] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    next_in_text: list[int] = field(default_factory=list)   # the block its text goes on with, or -1
    tokens: int = 0
    ends: list[dict] = field(default_factory=list)            # each block's table, for the lookup loop
    complete: bool = True     # no block was left out for the request's tokenizing budget

    @classmethod
    def of(cls, index: BlockIndex, segments: list[Segment], max_tokens: int, max_new_tokens: int) -> "Corpus":
        """Blocks in reading order, from the cache or tokenized now, until `max_tokens`."""
        corpus, placed, new0 = cls(), {}, index.stats.tokens_tokenized
        run: dict[str, Block] = {}     # blocks tokenized in one call ahead of their turn
        order = _reading_order(segments)
        texts = [segments[s].texts[i] for s, i in order]
        for n, (s, i) in enumerate(order):
            if corpus.tokens >= max_tokens:
                break
            text = texts[n]
            if "\x00" in text:
                continue
            block = run.pop(text, None) or index.block(text)
            spent = index.stats.tokens_tokenized - new0
            if block is None and spent < max_new_tokens:
                run = index.tokenize_run(texts[n:n + TOKENIZE_BATCH],
                                         min(max_new_tokens - spent, max_tokens - corpus.tokens))
                block = run.pop(text)
            if block is None:
                corpus.complete = False
                continue
            placed[(s, i)] = len(corpus.blocks)
            corpus.blocks.append(block)
            corpus.sources.append(segments[s].source)
            corpus.tokens += len(block.ids)
        corpus.ends = [b.ends for b in corpus.blocks]
        corpus.next_in_text = [-1] * len(corpus.blocks)
        for (s, i), at in placed.items():
            corpus.next_in_text[at] = placed.get((s, i + 1), -1)
        return corpus

    def find(self, seq: list[int], k: int, better_than: int, special_ids: frozenset) -> Draft | None:
        """The occurrence of seq's last KEY_NGRAM ids that matches the most tokens (more than
        `better_than`), the first in reading priority among equals, and up to k ids after it."""
        if len(seq) < KEY_NGRAM or better_than >= MAX_MATCH:
            return None
        best: Draft | None = None
        key = hash(tuple(seq[-KEY_NGRAM:]))
        for b, table in enumerate(self.ends):
            end = table.get(key)
            if end is None:
                continue
            m = _match_len(self.blocks[b].ids, end, seq)
            if m < KEY_NGRAM or m <= better_than or (best is not None and m <= best.match):
                continue
            out = self._follow(b, end + 1, k, special_ids)
            if out:
                best = Draft(out, match=m, source=self.sources[b])
                if m >= MAX_MATCH:
                    break
        return best

    def _follow(self, b: int, start: int, k: int, special_ids: frozenset) -> list[int]:
        out: list[int] = []
        while b >= 0 and len(out) < k:
            for t in self.blocks[b].ids[start:start + k - len(out)]:
                if t in special_ids:
                    return out
                out.append(t)
            b, start = self.next_in_text[b], 0
        return out


def _match_len(ids, end: int, seq: list[int]) -> int:
    """How many tokens ending at ids[end] equal seq's last ones (up to MAX_MATCH)."""
    m, n = 0, len(seq)
    while m < MAX_MATCH and end - m >= 0 and m < n and ids[end - m] == seq[n - 1 - m]:
        m += 1
    return m


# Reading the documents (cutting them into blocks, tokenizing and indexing those not cached) pays
# only where the target copies from them. Requests skip them where, on average over the requests that read
# them, their proposals saved less than reading took (DocumentsWorth), and every
# DOCUMENTS_PROBE-th request reads them again.
DOCUMENTS_PROBE = 16
DOCUMENTS_EMA = 0.25      # weight of the latest request that read them


@dataclass
class DocumentsWorth:
    """Whether reading the documents pays: a running average, over the requests that read any
    blocks of them and ran to their end, of the ms their proposals could have saved (the tokens
    of them the target wrote too, drafted or not, at one target step each) less the ms the read
    took. It starts at 0 (read), so that one cold first read, which tokenizes what later reads
    find cached, does not shut them out for long."""
    gain_ms: float = 0.0
    skipped: int = 0          # requests since the last one that measured them

    def wanted(self) -> bool:
        return self.gain_ms >= 0 or self.skipped >= DOCUMENTS_PROBE

    def record(self, read_ms: float, tokens: int, step_ms: float) -> None:
        self.gain_ms += DOCUMENTS_EMA * (tokens * step_ms - read_ms - self.gain_ms)
        self.skipped = 0
