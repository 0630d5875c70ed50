"""completion/selected.py: the document as if the completion menu's selected item were accepted,
and the answer that continues it over the item's range."""
from __future__ import annotations

from completion.selected import Selected, WithSelected, answer, apply
from lsp.positions import split_lines


def test_the_selected_text_replaces_its_range_and_the_cursor_follows_it():
    lines = split_lines("def add(a, b):\n    re\n")
    got = apply(lines, Selected((1, 4), (1, 6), "return"))
    assert got == WithSelected("def add(a, b):\n    return\n", (1, 10))


def test_text_after_the_range_stays_after_the_cursor():
    lines = split_lines("x = print(va)\r\ny = 1\r\n")
    got = apply(lines, Selected((0, 10), (0, 12), "value"))
    assert got == WithSelected("x = print(value)\r\ny = 1\r\n", (0, 15))


def test_a_multi_line_item_puts_the_cursor_on_its_last_line():
    lines = split_lines("if x:\n    pa")
    got = apply(lines, Selected((1, 4), (1, 6), "pass\n    # done"))
    assert got == WithSelected("if x:\n    pass\n    # done", (2, 10))


def test_a_range_outside_the_document_or_reversed_is_refused():
    lines = split_lines("a\nb\n")
    assert apply(lines, Selected((5, 0), (5, 1), "x")) is None
    assert apply(lines, Selected((1, 1), (1, 0), "x")) is None
    assert apply(lines, Selected((1, 0), (0, 1), "x")) is None
    assert apply(lines, Selected((0, -1), (0, 1), "x")) is None
    # The empty line after a final newline is in the document.
    assert apply(lines, Selected((2, 0), (2, 0), "c")) == WithSelected("a\nb\nc", (2, 1))


def test_the_answer_starts_with_the_selected_text_and_replaces_its_range_and_the_closers():
    sel = Selected((0, 10), (0, 12), "value")
    assert answer(sel, ", end=''", 0) == ("value, end=''", (0, 12))
    assert answer(sel, ")", 1) == ("value)", (0, 13))
