"""Deciding while decoding: `find_cut` is asked about the text generated so far after every
round. Each rule on text, the property that an early cut is the final cut, and the cut
indentation at the cursor."""
from __future__ import annotations

import random

import pytest

from completion.context import parse_document
from completion.postprocess import AnswerCut, clean_completion, find_cut


def cursor(doc: str):
    """doc has one '|' at the cursor."""
    i = doc.index("|")
    text = doc[:i] + doc[i + 1:]
    line = text[:i].count("\n")
    return parse_document(text, line, i - (text.rfind("\n", 0, i) + 1))


def early(text: str, cur, **kw):
    return find_cut(text, cur, final=False, **kw)


BODY = "def f(x):\n    y = 1|\n\n\nprint(f(2))\n"


def test_nothing_is_decided_while_the_last_line_can_still_grow():
    cur = cursor(BODY)
    for text in ("", "  # note", "\n    z = 2", "\n    z = 2\n    ", "\n    z = 2\n    w"):
        assert early(text, cur) is None, text


def test_max_lines_is_decided_when_the_last_shown_line_ends():
    cur = cursor("class A:|\n")
    text = "\n    x = 1\n    y = 2\n    z = 3"
    assert early(text[:len("\n    x = 1\n    y = 2")], cur, max_lines=3) is None
    cut = early(text[:len("\n    x = 1\n    y = 2\n")], cur, max_lines=3)
    assert (cut.reason, cut.end) == ("max_lines", len("\n    x = 1\n    y = 2"))
    assert cut.decided_at == len("\n    x = 1\n    y = 2\n")


def test_dedent_is_decided_at_the_first_visible_character():
    cur = cursor(BODY)
    assert early("\n    z = 2\n", cur) is None
    cut = early("\n    z = 2\np", cur)
    assert (cut.reason, cut.end, cut.decided_at) == ("dedent", len("\n    z = 2"), len("\n    z = 2\np"))


def test_blank_line_after_a_complete_block():
    cur = cursor("def f(x):|\n")
    assert early("\n    return x\n", cur) is None
    cut = early("\n    return x\n\n", cur)
    assert (cut.reason, cut.end) == ("blank_line", len("\n    return x"))
    # inside an open bracket a blank line does not end the block
    assert early("\n    a = [\n\n", cur) is None


def test_a_line_that_repeats_the_code_below():
    cur = cursor("def f(x):\n    |\n    return y\n")
    cut = early("y = x * 2\n    return y\n", cur)
    assert (cut.reason, cut.end) == ("suffix_repeat", len("y = x * 2"))
    cut = early("return y\n", cur)                      # the first line is already the next line
    assert (cut.reason, cut.end) == ("suffix_repeat", 0)
    assert early("return y", cur) is None              # ... but only once it is complete


@pytest.mark.parametrize("text,kept", [
    ("\n    a = 1\n    a = 1\n", "\n    a = 1"),                                 # a line twice in a row
    ("\n    a = 1\n    b = 2\n    a = 1\n    b = 2\n", "\n    a = 1\n    b = 2"),   # a cycle of two lines
    ("\n    a()\n    b()\n    c()\n    a()\n    b()\n    c()\n", "\n    a()\n    b()\n    c()"),
])
def test_loops_keep_one_copy(text, kept):
    cut = early(text, cursor("def f(x):|\n"), max_lines=16)
    assert (cut.reason, text[:cut.end]) == ("loop", kept)


def test_single_line_stops_at_the_newline():
    cur = cursor("x = |  # note\n")
    assert early("compute()", cur) is None
    cut = early("compute()  # note\nmore", cur)
    assert (cut.reason, cut.end, cut.decided_at) == ("newline", len("compute()  # note"), len("compute()  # note\n"))


def test_final_cut_always_answers():
    cur = cursor(BODY)
    assert find_cut("\n    z = 2", cur).reason == "end"
    assert find_cut("", cur).end == 0


# ------------------------------------------------------------------- early cut == final cut

DOCS = [
    "def f(x):\n    y = 1|\n\n\nprint(f(2))\n",
    "def f(x):|\n    return x\n",
    "class P:\n    def __init__(self):\n        |\n        self.b = 2\n",
    "def f(x):\n\tif x:\n\t\t|\n\treturn 0\n",
    "items = [|]\n",
    "print(|)\n",
    "x = |  # note\n",
    "if (ok) {|\n}\n",
    "for i in range(3):\n    |\n",
    "|",
]
PIECES = ["x = 1", "return y", "self.b = 2", "foo(", ")", "pass", "a, b", "]", "'s'", "}", "# done", "if x:",
          "y = x * 2", "return x", "return 0"]
INDENTS = ["", "", "    ", "    ", "        ", "\t", "\t\t", "  "]


def random_middle(rng: random.Random) -> str:
    lines: list[str] = []
    for _ in range(rng.randint(0, 9)):
        roll = rng.random()
        if roll < 0.15:
            lines.append("")
        elif roll < 0.3 and lines:
            lines.append(lines[-1])                                  # loops
        elif roll < 0.4 and len(lines) >= 2:
            lines.extend(lines[-2:])
        else:
            lines.append(rng.choice(INDENTS) + rng.choice(PIECES))
    text = "\n".join(lines)
    if rng.random() < 0.5:
        text = rng.choice(["", "\n", "z", " "]) + text
    return text + rng.choice(["", "\n", "\n\n", " "])


def test_an_early_cut_is_the_final_cut():
    """Property: wherever decoding would have stopped, the ghost text is what the whole decode
    would have shown, and the cut lies at a line boundary (never mid-word)."""
    rng = random.Random(1234)
    decided = 0
    for _ in range(600):
        cur = parse_document(*_split(rng.choice(DOCS)))
        text = random_middle(rng)
        kw = dict(max_lines=rng.choice([1, 2, 3, 8]), multiline=rng.choice(["auto", "auto", "always", "never"]))
        final = find_cut(text, cur, final=True, **kw)
        whole = clean_completion(text, cur, **kw)
        for n in range(len(text) + 1):
            cut = find_cut(text[:n], cur, final=False, **kw)
            if cut is None:
                continue
            decided += 1
            assert cut.decided_at <= n
            assert cut.end == final.end, (text, n, cut, final)
            assert cut.end in (0, len(text)) or text[cut.end] == "\n"      # 0: nothing to show
            assert clean_completion(text[:n], cur, **kw) == whole, (text, n)
            assert find_cut(text[:cut.decided_at], cur, final=False, **kw) == cut
    assert decided > 1000        # the property was exercised, not vacuously true


def test_one_answer_cut_asked_again_and_again_answers_as_find_cut():
    """Property: the stop check kept for a request (AnswerCut, which does not scan again the
    complete lines it kept) answers every question as a fresh `find_cut` does, asked as the engine
    asks it: about the answer so far as it grows, and about that answer plus each round's drafts
    (which share its lines, then part from it)."""
    rng = random.Random(99)
    resumed = 0
    for _ in range(300):
        cur = parse_document(*_split(rng.choice(DOCS)))
        kw = dict(max_lines=rng.choice([1, 2, 3, 8]), multiline=rng.choice(["auto", "auto", "always", "never"]))
        rules = AnswerCut(cur, **kw)
        answer, n = random_middle(rng), 0
        while n < len(answer):
            for _ in range(rng.randint(0, 2)):          # drafts after the answer so far
                draft = answer[:n] + random_middle(rng)[:rng.randint(0, 30)]
                resumed += bool(rules._kept)
                assert rules(draft, final=False) == find_cut(draft, cur, final=False, **kw), (answer[:n], draft)
            n += rng.randint(1, 8)
            assert rules(answer[:n], final=False) == find_cut(answer[:n], cur, final=False, **kw), answer[:n]
        final = rng.random() < 0.5
        assert rules(answer, final=final) == find_cut(answer, cur, final=final, **kw)
    assert resumed > 200     # lines kept by earlier calls were reused, not only scanned afresh


def _split(doc: str):
    cur = cursor(doc)
    return "\n".join(cur.lines), cur.line, cur.character


# ------------------------------------------------------------------- indentation at the cursor

@pytest.mark.parametrize("doc,middle,shown", [
    ("def f(x):\n    |\n", "    return x", "return x"),                  # same indentation again
    ("def f(x):\n    |\n", "        return x", "    return x"),          # deeper: keep the extra
    ("def f(x):\n    |\n", "return x", "return x"),                      # nothing to undo
    ("def f(x):\n\t|\n", "\treturn x", "return x"),                      # tabs
    ("def f(x):\n\t|\n", "\t\treturn x", "\treturn x"),
    ("def f(x):\n\t|\n", "    return x", "return x"),                    # spaces after tabs: dropped
    ("class A:\n    def f(self):\n        |\n", "        a = 1\n        return a", "a = 1\n        return a"),
    ("x = 1|\n", "  # note", "  # note"),                                # after code: untouched
    ("|\n", "    x = 1", "    x = 1"),                                   # column 0: the model's own indent
])
def test_indentation_at_the_cursor_is_not_doubled(doc, middle, shown):
    out = clean_completion(middle, cursor(doc))
    assert out is not None and out.text == shown
