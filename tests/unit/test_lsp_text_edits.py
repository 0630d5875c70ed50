"""Incremental document edits (lsp/positions.py, LspTextDocument): the text is sliced around an
edit and its lines split again only around it; the result must be pygls' own edit, line for
line, whatever the edit (line breaks of three kinds, characters of two UTF-16 units, ranges past
a line's end or the last line, reversed ranges)."""
from __future__ import annotations

import random

from lsprotocol import types
from pygls.workspace import TextDocument

from lsp.positions import LspTextDocument, split_lines

PIECES = ["a", "bc", "é", "😀", "\n", "\r\n", "\r", " ", ""]


class PyglsDocument(TextDocument):
    """pygls' incremental edit as it is, over the same lines the server counts (split_lines)."""

    @property
    def lines(self):
        return split_lines(self.source)


def _edit(line: int, character: int, end_line: int, end_character: int, text: str):
    return types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line=line, character=character),
                          end=types.Position(line=end_line, character=end_character)), text=text)


def _documents(source: str):
    kind = types.TextDocumentSyncKind.Incremental
    return (LspTextDocument("file:///t.py", source=source, sync_kind=kind),
            PyglsDocument("file:///t.py", source=source, sync_kind=kind))


def test_an_edit_is_pygls_edit_and_its_lines_are_the_text_split_again():
    rng = random.Random(7)
    text = lambda n: "".join(rng.choice(PIECES) for _ in range(n))  # noqa: E731
    for _ in range(5000):
        ours, theirs = _documents(text(rng.randint(0, 12)))
        for _ in range(4):
            n = len(ours.lines) + 2
            line = rng.randint(0, n)
            end_line = rng.randint(line, n) if rng.random() < 0.9 else rng.randint(0, n)
            change = _edit(line, rng.randint(0, 5), end_line, rng.randint(0, 5), text(rng.randint(0, 4)))
            ours.apply_change(change)
            theirs.apply_change(change)
            assert ours.source == theirs.source, change
            assert ours.lines == split_lines(ours.source), change


def test_a_carriage_return_typed_before_a_line_feed_joins_them_into_one_line_break():
    ours, _ = _documents("ab\ncd\n")
    ours.apply_change(_edit(0, 2, 0, 2, "\r"))        # "ab\r\ncd\n": still two lines
    assert ours.lines == ("ab\r\n", "cd\n")
    ours.apply_change(_edit(0, 0, 1, 1, "x"))         # across lines: "xd\n"
    assert ours.lines == ("xd\n",) and ours.source == "xd\n"
