"""What the model sees around the cursor: the document split at the cursor, prefix and suffix
windows cut at line boundaries within token budgets, and extra chunks of other documents
(where they were opened, edited, visited) and of yanked text.

The prefix window's first line moves in steps of `step_lines`, not with every line typed, so
successive prompts share a long token prefix and the engine's KV cache stays valid.
"""
from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import cachetools

from completion.templates import ExtraChunk

MAX_DOCUMENT_CHARS = 8_000_000   # larger documents are refused with a clear error
# A lone surrogate: what a byte that is not UTF-8 becomes, read with errors="surrogateescape"
# (`specfill complete` reads files so, the server reads editors' messages so), or a JSON escape
# no real text has. Such a document is refused, the same way wherever it comes from.
NOT_UTF8 = re.compile("[\ud800-\udfff]")
CHARS_PER_TOKEN_FLOOR = 2        # for cutting a single over-long line by characters


@dataclass(frozen=True)
class Cursor:
    """A document split at the cursor, with line endings normalised to LF."""
    lines: list[str]       # LF-normalised lines (no terminators)
    eol: str               # the document's line ending, "\n" or "\r\n", for the ghost text
    line: int
    character: int         # clamped to the line length (LSP: past the end means the end)

    @property
    def line_prefix(self) -> str:
        return self.lines[self.line][:self.character]

    @property
    def rest_of_line(self) -> str:
        return self.lines[self.line][self.character:]

    def next_lines(self, n: int) -> list[str]:
        return self.lines[self.line + 1:self.line + 1 + n]

    def prefix_text(self) -> str:
        """Everything before the cursor (LF)."""
        return "\n".join(self.lines[:self.line] + [self.line_prefix])

    def suffix_head(self, chars: int) -> str:
        """The first `chars` characters after the cursor (LF)."""
        out, n = [self.rest_of_line], len(self.rest_of_line)
        for ln in self.lines[self.line + 1:]:
            if n >= chars:
                break
            out.append(ln)
            n += len(ln) + 1
        return "\n".join(out)[:chars]


def to_lf(text: str) -> str:
    """`text` with every line break (CRLF, a lone CR) as LF. A CR is looked for alone first: a
    search for the two characters "\r\n" scans a long text many times slower than one for a
    single character, and most texts have no CR at all."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def parse_document(text: str, line: int, character: int) -> Cursor:
    """Split text at (line, character), both 0-based python codepoints; bad input -> ValueError."""
    if not isinstance(text, str):
        raise ValueError("document text must be a string")
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ValueError(f"document too large for completion ({len(text)} characters, "
                         f"limit {MAX_DOCUMENT_CHARS})")
    if "\x00" in text:
        raise ValueError("document looks binary (contains NUL characters); not completing")
    bad = NOT_UTF8.search(text)
    if bad is not None:
        at = bad.start()
        raise ValueError(f"document is not valid UTF-8 text (line {text.count(chr(10), 0, at) + 1}, "
                         f"column {at - text.rfind(chr(10), 0, at)}); not completing")
    eol = "\r\n" if "\r" in text and "\r\n" in text else "\n"     # (the CR alone first, as in to_lf)
    lines = to_lf(text).split("\n")
    if not isinstance(line, int) or not isinstance(character, int) or line < 0 or character < 0:
        raise ValueError(f"invalid position line={line!r} character={character!r}")
    if line >= len(lines):
        raise ValueError(f"position line {line} is out of range (document has {len(lines)} lines)")
    return Cursor(lines=lines, eol=eol, line=line, character=min(character, len(lines[line])))


@dataclass(frozen=True)
class Window:
    prefix: str        # text the model sees before the cursor
    suffix: str        # text the model sees after the cursor
    start_line: int    # first document line in the prefix
    end_line: int      # first document line not in the suffix
    prefix_tokens: int
    suffix_tokens: int


class TokenCounter:
    """Tokens per line, memoised: windows are recut on every keystroke."""

    def __init__(self, encode: Callable[[str], list[int]], maxsize: int = 50_000):
        self._encode = encode
        self._memo: cachetools.LRUCache = cachetools.LRUCache(maxsize)

    def __call__(self, text: str) -> int:
        n = self._memo.get(text)
        if n is None:
            n = len(self._encode(text))
            self._memo[text] = n
        return n


def cut_window(cur: Cursor, count: Callable[[str], int], prefix_tokens: int, suffix_tokens: int,
               step_lines: int = 16, within: tuple[int, int] | None = None) -> Window:
    """Prefix/suffix windows within token budgets, cut at whole lines.

    The prefix starts at a multiple of `step_lines` (the first one that fits the budget), so it
    keeps the same first line while the cursor moves down until the budget forces a jump.
    `within` (first line, first line after): the window stays inside those lines (another
    window's start_line and end_line, cut with the same step).
    """
    low, high = within if within is not None else (0, len(cur.lines))
    head = cur.line_prefix
    used = count(head)
    if used > prefix_tokens:            # one huge line (minified code): keep its tail
        head = head[-prefix_tokens * CHARS_PER_TOKEN_FLOOR:]
        used = count(head)
    first = cur.line                   # first line that fits
    while first > low:
        n = count(cur.lines[first - 1] + "\n")
        if used + n > prefix_tokens:
            break
        used += n
        first -= 1
    start = 0 if first == 0 else min(cur.line, math.ceil(first / step_lines) * step_lines)
    body = cur.lines[start:cur.line]
    prefix = "".join(ln + "\n" for ln in body) + head
    p_tokens = used - sum(count(ln + "\n") for ln in cur.lines[first:start])

    tail = cur.rest_of_line
    s_used = count(tail)
    if s_used > suffix_tokens:
        tail = tail[:suffix_tokens * CHARS_PER_TOKEN_FLOOR]
        s_used = count(tail)
    end = cur.line + 1
    parts = [tail]
    while end < min(high, len(cur.lines)):
        n = count("\n" + cur.lines[end])
        if s_used + n > suffix_tokens:
            break
        parts.append(cur.lines[end])
        s_used += n
        end += 1
    # The newline after the last included line is part of the document too.
    suffix = "\n".join(parts) + ("\n" if end < len(cur.lines) else "")
    return Window(prefix=prefix, suffix=suffix, start_line=start, end_line=end,
                  prefix_tokens=p_tokens, suffix_tokens=s_used)


def uri_to_path(uri: str) -> str:
    """A short path for file headers: the last two components of a file URI."""
    parsed = urlparse(uri)
    path = unquote(parsed.path) if parsed.scheme else uri
    return "/".join(path.rstrip("/").split("/")[-2:]) or uri


# Where a chunk of extra context came from (the `extraContextFrom` setting lists these).
SOURCES = ("open", "edits", "yanks", "visits")
SIMILAR = 0.9           # a new chunk evicts older ones sharing this share of their lines
MIN_TRIMMED_TOKENS = 32  # a chunk too big for what is left of the budget is cut down to no less
MIN_YANK_CHARS = 12      # shorter yanks (a word, a bracket) say nothing worth a prompt line


@dataclass(frozen=True)
class ContextChunk(ExtraChunk):
    """An ExtraChunk that remembers where it came from (for stats)."""
    source: str = "open"


@dataclass(frozen=True)
class _Chunk:
    uri: str
    start: int | None           # first document line; None: not a place in the document (a yank)
    lines: tuple[str, ...]
    focus: int                  # index of the line it is centred on (the edit, the cursor)
    source: str


def similarity(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """Share of lines two chunks have in common, 0..1 (llama.vim's measure: lines of `a` found in `b`)."""
    if not a or not b:
        return 0.0
    in_b = set(b)
    return 2.0 * sum(ln in in_b for ln in a) / (len(a) + len(b))


class ExtraContext:
    """Ring buffer of chunks of other documents: around where they were opened, edited or
    visited, and text the user yanked.

    Newest chunks win the budget; a new chunk replaces an overlapping one of the same document
    and evicts chunks it nearly repeats. The prompt lists the picked chunks oldest first, and
    the set changes only when a chunk is noted, never while the user types in the current
    document (its own chunks are not offered to it), so the extra block keeps KV reuse.
    """

    def __init__(self, max_chunks: int = 16, chunk_lines: int = 32, max_documents: int = 64):
        self.max_chunks = max_chunks
        self.chunk_lines = chunk_lines
        self._ring: list[_Chunk] = []                 # oldest first
        self._last: OrderedDict[str, list[str]] = OrderedDict()   # uri -> its latest lines, newest last
        self.max_documents = max_documents
        self.evicted_similar = 0

    def note(self, uri: str, text: str, line: int | None = None, source: str = "open") -> None:
        """Record a document's current text; takes a chunk around `line` or the first changed line."""
        if not isinstance(text, str) or "\x00" in text or len(text) > MAX_DOCUMENT_CHARS:
            return
        lines = (text.replace("\r\n", "\n") if "\r" in text else text).split("\n")
        old = self._last.pop(uri, None)
        self._last[uri] = lines
        if len(self._last) > self.max_documents:
            self._last.popitem(last=False)
        if line is None:
            if old == lines:
                return
            line = _first_difference(old or [], lines)
        line = max(0, min(line, len(lines) - 1))
        start = max(0, line - self.chunk_lines // 2)
        end = min(len(lines), start + self.chunk_lines)
        while start < end and not lines[start].strip():
            start += 1
        while end > start and not lines[end - 1].strip():
            end -= 1
        if start == end:
            return
        focus = min(max(line - start, 0), end - start - 1)
        self._add(_Chunk(uri, start, tuple(lines[start:end]), focus, source))

    def note_text(self, uri: str, text: str, source: str = "yanks") -> None:
        """Record text that is not a place in a document (a yank): its first `chunk_lines` lines."""
        if not isinstance(text, str) or "\x00" in text:
            return
        lines = text.replace("\r\n", "\n").strip("\n").split("\n")[:self.chunk_lines]
        if len("".join(lines).strip()) < MIN_YANK_CHARS:
            return
        self._add(_Chunk(uri, None, tuple(lines), 0, source))

    def _add(self, new: _Chunk) -> None:
        if any(c.lines == new.lines for c in self._ring):
            return   # already there: keeping its place keeps the prompt (and its cache) as it is
        kept = []
        for c in self._ring:
            overlaps = (new.start is not None and c.start is not None and c.uri == new.uri
                        and abs(c.start - new.start) < self.chunk_lines)
            if overlaps:
                continue                       # the same place, newer text
            # Nearly the same text again (a place seen anew, a yank repeated) replaces the older
            # chunk. Places in two documents both stay: a document's own chunks are never offered
            # to it, so the other one may be what its prompts need (select keeps one of them).
            related = c.uri == new.uri or c.start is None or new.start is None
            if related and similarity(c.lines, new.lines) > SIMILAR:
                self.evicted_similar += 1
                continue
            kept.append(c)
        kept.append(new)
        self._ring = kept[-self.max_chunks:]

    def forget(self, uri: str) -> None:
        self._ring = [c for c in self._ring if c.uri != uri or c.start is None]
        self._last.pop(uri, None)

    def documents(self, exclude_uri: str) -> list[list[str]]:
        """The latest lines of every document noted (opened, edited, visited) and not closed,
        newest first, but `exclude_uri`'s."""
        return [lines for uri, lines in reversed(self._last.items()) if uri != exclude_uri]

    def chunks(self) -> list[tuple[str, str, int]]:
        """(uri, source, lines) of every chunk, oldest first (for tests and stats)."""
        return [(c.uri, c.source, len(c.lines)) for c in self._ring]

    def select(self, exclude_uri: str, budget_tokens: int, count: Callable[[str], int],
               visible: str = "") -> tuple[ContextChunk, ...]:
        """Newest chunks that fit the budget, oldest first (stable order). Places in
        `exclude_uri` (the document asked about) are left out, and so is text already in
        `visible` (its window) or nearly what a newer picked chunk says; a chunk too big for
        what is left is cut down around its focus line."""
        if budget_tokens <= 0:
            return ()
        picked: list[tuple[int, ContextChunk]] = []
        seen: set[str] = set()
        kept: list[tuple[str, ...]] = []
        used = 0
        for i in range(len(self._ring) - 1, -1, -1):
            c = self._ring[i]
            if c.start is not None and c.uri == exclude_uri:
                continue
            body = "\n".join(c.lines)
            if body in seen or (visible and body.strip() and body.strip() in visible):
                continue
            if any(similarity(c.lines, other) > SIMILAR for other in kept):
                continue   # nearly what a newer chunk already says
            path = uri_to_path(c.uri)
            left = budget_tokens - used - count(path + "\n")
            lines = _fit(c, [count(ln + "\n") for ln in c.lines], left)
            if not lines:
                continue
            text = "\n".join(lines) + "\n"
            seen.add(body)
            kept.append(c.lines)
            used += count(path + "\n") + sum(count(ln + "\n") for ln in lines)
            picked.append((i, ContextChunk(path=path, text=text, source=c.source)))
        return tuple(chunk for _, chunk in sorted(picked, key=lambda p: p[0]))


def _fit(chunk: _Chunk, costs: list[int], left: int) -> list[str]:
    """The chunk's lines within `left` tokens: all of them, or the lines around its focus
    (nothing when less than MIN_TRIMMED_TOKENS is left)."""
    if sum(costs) <= left:
        return list(chunk.lines)
    if left < MIN_TRIMMED_TOKENS:
        return []
    lo = hi = chunk.focus
    used = costs[lo]
    if used > left:
        return []
    while True:
        grew = False
        if hi + 1 < len(costs) and used + costs[hi + 1] <= left:
            hi += 1
            used += costs[hi]
            grew = True
        if lo > 0 and used + costs[lo - 1] <= left:
            lo -= 1
            used += costs[lo]
            grew = True
        if not grew:
            return list(chunk.lines[lo:hi + 1])


def _first_difference(old: list[str], new: list[str]) -> int:
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b:
            return i
    return min(len(old), len(new))
