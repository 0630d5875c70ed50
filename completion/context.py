"""What the model sees around the cursor: the document split at the cursor, prefix and suffix
windows cut at line boundaries within token budgets, and extra chunks from other open files.

The prefix window's first line moves in steps of `step_lines`, not with every line typed, so
successive prompts share a long token prefix and the engine's KV cache stays valid.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import cachetools

from completion.templates import ExtraChunk

MAX_DOCUMENT_CHARS = 8_000_000   # larger documents are refused with a clear error
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


def parse_document(text: str, line: int, character: int) -> Cursor:
    """Split text at (line, character), both 0-based python codepoints; bad input -> ValueError."""
    if not isinstance(text, str):
        raise ValueError("document text must be a string")
    if len(text) > MAX_DOCUMENT_CHARS:
        raise ValueError(f"document too large for completion ({len(text)} characters, "
                         f"limit {MAX_DOCUMENT_CHARS})")
    if "\x00" in text:
        raise ValueError("document looks binary (contains NUL characters); not completing")
    eol = "\r\n" if "\r\n" in text else "\n"
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
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
               step_lines: int = 16) -> Window:
    """Prefix/suffix windows within token budgets, cut at whole lines.

    The prefix starts at a multiple of `step_lines` (the first one that fits the budget), so it
    keeps the same first line while the cursor moves down until the budget forces a jump.
    """
    head = cur.line_prefix
    used = count(head)
    if used > prefix_tokens:            # one huge line (minified code): keep its tail
        head = head[-prefix_tokens * CHARS_PER_TOKEN_FLOOR:]
        used = count(head)
    first = cur.line                   # first line that fits
    while first > 0:
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
    while end < len(cur.lines):
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


class ExtraContext:
    """Ring buffer of chunks (line ranges) of other open documents, near where they were edited.

    Chunks change only when another document is noted, never while the user types in the
    current one, so the extra block at the head of the prompt does not break KV reuse.
    """

    def __init__(self, max_chunks: int = 16, chunk_lines: int = 32, max_documents: int = 64):
        self.max_chunks = max_chunks
        self.chunk_lines = chunk_lines
        self._chunks: OrderedDict[tuple[str, int], ExtraChunk] = OrderedDict()
        self._last: cachetools.LRUCache = cachetools.LRUCache(max_documents)

    def note(self, uri: str, text: str, line: int | None = None) -> None:
        """Record a document's current text; takes a chunk around `line` or the first changed line."""
        if not isinstance(text, str) or "\x00" in text or len(text) > MAX_DOCUMENT_CHARS:
            return
        lines = text.replace("\r\n", "\n").split("\n")
        old = self._last.get(uri)
        self._last[uri] = lines
        if line is None:
            if old == lines:
                return
            line = _first_difference(old or [], lines)
        line = max(0, min(line, len(lines) - 1))
        start = max(0, line - self.chunk_lines // 2)
        end = min(len(lines), start + self.chunk_lines)
        body = "\n".join(lines[start:end]).strip("\n")
        if not body.strip():
            return
        for key in [k for k in self._chunks if k[0] == uri and abs(k[1] - start) < self.chunk_lines]:
            del self._chunks[key]   # an overlapping older chunk of the same file is replaced
        self._chunks[(uri, start)] = ExtraChunk(path=uri_to_path(uri), text=body + "\n")
        while len(self._chunks) > self.max_chunks:
            self._chunks.popitem(last=False)

    def forget(self, uri: str) -> None:
        for key in [k for k in self._chunks if k[0] == uri]:
            del self._chunks[key]
        self._last.pop(uri, None)

    def select(self, exclude_uri: str, budget_tokens: int, count: Callable[[str], int]) -> tuple[ExtraChunk, ...]:
        """Newest chunks of other documents that fit the budget, oldest first (stable order)."""
        if budget_tokens <= 0:
            return ()
        picked, used = [], 0
        for (uri, _), chunk in reversed(self._chunks.items()):
            if uri == exclude_uri:
                continue
            n = count(chunk.path + "\n" + chunk.text)
            if used + n > budget_tokens:
                continue
            picked.append(chunk)
            used += n
        return tuple(reversed(picked))


def _first_difference(old: list[str], new: list[str]) -> int:
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b:
            return i
    return min(len(old), len(new))
