"""LSP positions (utf-16 or utf-8 code units, as negotiated) <-> python codepoint columns, on
lines as LSP clients count them (lsp/lines.py).
"""
from __future__ import annotations

from typing import Optional, Sequence

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace
from pygls.workspace.position_codec import PositionCodec

from lsp.lines import split_lines


def _content(line: str) -> str:
    return line.rstrip("\r\n")


def to_codepoints(lines: Sequence[str], codec: PositionCodec,
                  position: types.Position) -> Optional[tuple[int, int]]:
    """(line, codepoint column) for a client position; None when the line does not exist.

    A column past the end of its line is clamped to the line end (clients send those after
    deletions race with requests); the line after a final newline exists and is empty.
    """
    line, character = position.line, position.character
    if line < 0 or character < 0:
        return None
    if line >= len(lines):
        if line == len(lines) and (not lines or lines[-1].endswith(("\n", "\r"))):
            return line, 0
        return None
    content = _content(lines[line])
    units = codec.client_num_units(content)
    character = min(character, units)
    # pygls' codec counts code units per codepoint; it would mutate an out-of-range position,
    # so it only ever gets a clamped copy.
    converted = codec.position_from_client_units([content], types.Position(line=0, character=character))
    return line, min(converted.character, len(content))


def to_client(lines: Sequence[str], codec: PositionCodec, line: int, character: int) -> types.Position:
    """Client position for a (line, codepoint column) pair."""
    if line >= len(lines):
        return types.Position(line=line, character=0)
    content = _content(lines[line])
    return types.Position(line=line, character=codec.client_num_units(content[:character]))


class LspTextDocument(TextDocument):
    """pygls TextDocument that splits lines the way LSP clients count them, once per edit
    (pygls splits the whole text again for every change and every position lookup)."""

    _split_of: Optional[str] = None
    _split: tuple[str, ...] = ()

    @property
    def lines(self) -> Sequence[str]:
        source = self.source
        if self._split_of is not source:
            self._split, self._split_of = split_lines(source), source
        return self._split

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        """pygls' incremental edit without writing the whole text out again line by line in
        Python (a keystroke in a 3,000-line file took 0.9-1.0 ms of the server's loop, under 0.1 ms this
        way: `python -m bench.server_cost`). The text is sliced around the edit and its lines are
        split again only around it, with the line on each side: a CR and an LF that meet across
        the edit's ends are one line break. A range pygls treats oddly (reversed, or starting
        past the last line) goes to pygls."""
        lines = self.lines
        edit = self._position_codec.range_from_client_units(lines, change.range)
        first, last = edit.start.line, edit.end.line
        if (last, edit.end.character) < (first, edit.start.character) or first >= len(lines):
            super()._apply_incremental_change(change)
            return
        source, text = self.source, change.text
        a, b = max(first - 1, 0), min(last + 2, len(lines))   # the lines split again: a .. b - 1
        at_a = sum(map(len, lines[:a]))                       # where line a starts in the text
        at_first = at_a + sum(map(len, lines[a:first]))
        at_b = at_a + sum(map(len, lines[a:b]))
        # a column past its line's end is the line's end, line break included (as pygls slices)
        start = at_first + min(edit.start.character, len(lines[first]))
        end = (at_first + sum(map(len, lines[first:last])) + min(edit.end.character, len(lines[last]))
               if last < len(lines) else len(source))
        new = source[:start] + text + source[end:]
        grown = len(text) - (end - start)
        self._source, self._split_of = new, new
        self._split = lines[:a] + split_lines(new[at_a:at_b + grown]) + lines[b:]


class LspWorkspace(Workspace):
    def _create_text_document(self, doc_uri, source=None, version=None, language_id=None):
        return LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                               sync_kind=self._sync_kind, position_codec=self._position_codec)
