"""Post-processing cases from real editing: the document with `|` at the cursor, the model's
raw middle, and what the editor must show (text, characters replaced after the cursor)."""
from __future__ import annotations

import pytest

from completion.context import parse_document
from completion.postprocess import clean_completion, with_eol


def run(doc: str, middle: str, **kw):
    """doc has one '|' at the cursor."""
    i = doc.index("|")
    text = doc[:i] + doc[i + 1:]
    before = text[:i].replace("\r\n", "\n")
    line = before.count("\n")
    character = len(before) - (before.rfind("\n") + 1)
    cur = parse_document(text, line, character)
    out = clean_completion(middle, cur, **kw)
    if out is None:
        return None
    return with_eol(out.text, cur.eol), out.replace_chars


CASES = [
    # auto-closed brackets and quotes: replace them instead of duplicating
    ("print(|)", "'hello')", ("'hello')", 1)),
    ("print(|)", "'hello'", ("'hello'", 0)),
    ("foo(bar(|))", "x))", ("x))", 2)),
    ("foo(bar(|))", "x)", ("x)", 1)),
    ('print("|")', 'hi there")', ('hi there")', 2)),
    ("items = [|]", "1, 2, 3]", ("1, 2, 3]", 1)),
    ("foo(|)", "a).bar()", ("a).bar()", 1)),            # closes ours, then goes on
    ("foo(|)", "bar(x)", ("bar(x)", 0)),                # its own brackets are not ours
    ("foo(|)", "x]", ("x", 0)),                         # closes something that is not there
    ("call(|)\n", "\n    a,\n    b,\n)", ("\n    a,\n    b,\n)", 1)),
    # cursor in the middle of a line: one line, never the rest of the line again
    ("x = |  # note\n", "compute()  # note\nmore()", ("compute()", 0)),
    ("total = |b\n", "a + b", ("a + ", 0)),
    ("if |x > 0:\n", "not \n    pass", ("not ", 0)),
    ("total = |b\n", "b", None),
    # completion repeating the next line(s)
    ("def f(x):\n    |\n    return y\n", "y = x * 2\n    return y", ("y = x * 2", 0)),
    ("def f(x):\n    |\n    return y\n", "return y", None),
    ("def f(x):\n    ret|\n    return y\n", "urn y", None),
    ("for i in range(3):\n    |\n\nprint(done)\n", "total += i\n\nprint(done)", ("total += i", 0)),
    # end of line: multi-line, cut at dedent / blank line after a complete block / max lines
    ("def f(x):\n    y = 1|\n", "\n    z = 2\nprint(z)", ("\n    z = 2", 0)),
    ("def f(x):|\n", "\n    return x\n\ndef g():\n    pass", ("\n    return x", 0)),
    ("def f(x):|\n", "\n    a = [\n\n        1]\n    return a", ("\n    a = [\n\n        1]\n    return a", 0)),
    ("class A:|\n", "\n    x = 1\n    y = 2\n    z = 3", ("\n    x = 1\n    y = 2", 0), {"max_lines": 3}),
    ("if (ok) {|\n}\n", "\n    run();\n}\nother();", ("\n    run();", 0)),
    ("x = 1|\n", "\n\n", None),
    ("class P:\n    def __init__(self):\n        |\n", "self.a = 1\n        self.x = x\n        self.x = x\n"
     "        self.x = x\n        self.x = x", ("self.a = 1\n        self.x = x", 0)),   # a looping model
    # tabs: the block is measured in columns
    ("def f(x):\n\tif x:\n\t\t|\n", "return 1\n\treturn 2\nprint()", ("return 1", 0)),
    ("def f(x):\n\tif x:|\n", "\n\t\treturn 1\n\treturn 2", ("\n\t\treturn 1\n\treturn 2", 0)),
    # CRLF documents get CRLF ghost text
    ("def f(x):\r\n    |\r\n", "a = 1\n    return a", ("a = 1\r\n    return a", 0)),
    ("def f(x):|\r\n\r\nprint(f(1))\r\n", "\r\n    return x\r\n\r\nprint(f(1))", ("\r\n    return x", 0)),
    # control characters (not tab or newline) end the answer: never typed in, drawn as ^K
    ("def f(x):\n    |\n", "\x0bFIELookey = 1", None),
    ("def f(x):\n    |\n", "y = x\x0b + 1", ("y = x", 0)),
    ("x = |", "a\x00b\x1bc", ("a", 0)),
    # nothing worth showing
    ("x = |", "", None),
    ("x = |", "   \n  ", None),
]


@pytest.mark.parametrize("case", CASES, ids=[repr(c[0])[:40] for c in CASES])
def test_cleaning(case):
    doc, middle, expected = case[:3]
    kw = case[3] if len(case) > 3 else {}
    assert run(doc, middle, **kw) == expected


def test_multiline_settings():
    doc, middle = "def f(x):|\n", "\n    return x"
    assert run(doc, middle, multiline="never") is None            # first line is empty
    assert run("x = |\n", "1\ny = 2", multiline="never") == ("1", 0)
    assert run("x = |y\n", "1 +\nz", multiline="always") == ("1 +\nz", 0)
    assert run("x = |y\n", "1 +\nz", multiline="auto") == ("1 +", 0)


def test_position_handling():
    cur = parse_document("ab\r\ncd", 1, 99)           # LSP: past the end means end of line
    assert (cur.line, cur.character, cur.eol, cur.rest_of_line) == (1, 2, "\r\n", "")
    with pytest.raises(ValueError, match="out of range"):
        parse_document("ab\ncd", 2, 0)
    with pytest.raises(ValueError, match="binary"):
        parse_document("ab\x00cd", 0, 0)
    with pytest.raises(ValueError, match="invalid position"):
        parse_document("ab", -1, 0)
