"""Where accepting a suggestion leads (lsp/prefetch.py): the document and cursor a prefetch
completes at must be exactly what the editor has after the accept, and a document is "on the
way" there only while what changed is the suggestion's own start at its cursor."""
from __future__ import annotations

from completion.context import parse_document
from lsp.prefetch import Answer, accepted_document, on_the_way


def answer(text: str, cursor, insert: str, replace: int = 0) -> Answer:
    return Answer("file:///a.py", text, cursor, (cursor[0], cursor[1] + replace), insert)


def test_one_line_suggestion_lands_after_its_text():
    a = answer("def f(x):\n    return \n", (1, 11), "x + 1")
    assert accepted_document(a) == ("def f(x):\n    return x + 1\n", 1, 16)


def test_multi_line_suggestion_moves_the_cursor_to_its_last_line():
    a = answer("def f(x):\n    \nprint(f(2))\n", (1, 4), "y = x * 2\n    return y")
    text, line, character = accepted_document(a)
    assert text == "def f(x):\n    y = x * 2\n    return y\nprint(f(2))\n"
    assert (line, character) == (2, len("    return y"))
    # The pipeline splits there exactly as the editor's cursor does.
    cur = parse_document(text, line, character)
    assert cur.prefix_text().endswith("return y") and cur.rest_of_line == ""


def test_replaced_closers_and_crlf_are_kept_as_the_editor_has_them():
    # An auto-closed ")" replaced by the suggestion's own; the document uses CRLF.
    a = answer("x = max(\r\ny = 1\r\n", (0, 8), "a, b)\r\nz = 2", replace=1)
    a = Answer(a.uri, "x = max()\r\ny = 1\r\n", (0, 8), (0, 9), a.insert)
    assert accepted_document(a) == ("x = max(a, b)\r\nz = 2\r\ny = 1\r\n", 1, 5)


def test_on_the_way_while_the_suggestion_is_typed_through_and_not_after_other_edits():
    a = answer("def f(x):\n    return \n", (1, 11), "x + 1")
    assert on_the_way(a, a.text)
    assert on_the_way(a, "def f(x):\n    return x +\n")             # typed through
    assert on_the_way(a, "def f(x):\n    return x + 1\n")           # accepted already
    assert on_the_way(a, "def f(x):\r\n    return x\r\n")           # line endings do not count
    assert not on_the_way(a, "def f(x):\n    return y\n")           # typed something else
    assert not on_the_way(a, "def g(x):\n    return \n")            # edited elsewhere
    assert not on_the_way(a, "def f(x):\n    return x + 1 + 2\n")   # typed past its end
