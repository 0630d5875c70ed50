"""Which edited documents the server notes as extra context, and when (lsp/documents.py)."""
from __future__ import annotations

from lsprotocol import types

from lsp.documents import EDIT_NOTE_INTERVAL_S, EditNotes, edited_line


def test_the_first_edit_of_a_burst_is_noted_at_once_the_last_when_the_user_moves_on():
    notes = EditNotes()
    assert notes.edited("a", 10, now=100.0)                  # first edit: at once
    assert not notes.edited("a", 11, now=100.2)              # within the interval: waits
    assert not notes.edited("a", 12, now=100.4)
    assert notes.take_others("a", now=100.5) == []           # still typing in a
    assert notes.take_others("b", now=100.6) == [("a", 12)]  # moved on to b: a's last edit
    assert notes.take_others("b", now=100.7) == []           # once
    assert not notes.edited("a", 13, now=100.6 + EDIT_NOTE_INTERVAL_S / 2)
    assert notes.edited("a", 14, now=100.6 + EDIT_NOTE_INTERVAL_S)   # the interval passed
    assert notes.take_others("b", now=102.0) == []           # nothing left over
    notes.edited("c", 1, now=200.0)
    notes.edited("c", 2, now=200.1)
    notes.forget("c")                                        # closed: nothing pending, no throttle
    assert notes.take_others("b", now=200.2) == []
    assert notes.edited("c", 3, now=200.3)


def test_the_edited_line_is_where_the_cursor_ends_after_the_last_change():
    def partial(line: int, text: str):
        pos = types.Position(line=line, character=0)
        return types.TextDocumentContentChangePartial(range=types.Range(start=pos, end=pos), text=text)
    assert edited_line([partial(4, "x")]) == 4
    assert edited_line([partial(4, "x"), partial(9, "a\n    b")]) == 10
    assert edited_line([types.TextDocumentContentChangeWholeDocument(text="all new")]) is None
    assert edited_line([]) is None
