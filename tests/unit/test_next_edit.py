"""Next-edit suggestions one layer at a time: the edit history from didChange-sized changes, the
prompt of each format (golden prompts), the prompt's ids on a real tokenizer, the parse of an
answer, and the minimal edit (CRLF, non-ASCII, a region at the file's start and end)."""
from __future__ import annotations

import pytest

from completion.context import parse_document
from completion.edit_formats import FORMATS, format_for
from completion.edit_history import EditHistory, line_edit
from completion.next_edit import (NextEditPrompt, Region, minimal_edit, original_lines, parse_answer, prompt_parts,
                                  prompt_text, region_at, with_final_line_break)

DOC = "import os\n\n\ndef area(w, height):\n    result = width * height\n    return result\n"
BEFORE = DOC.replace("area(w,", "area(width,")
URI = "file:///src/pkg/shapes.py"


def history_of(*versions: str, key: str = "k", path: str = "pkg/shapes.py", lines=None) -> EditHistory:
    h = EditHistory()
    for a, b in zip(versions, versions[1:]):
        h.changed(key, path, a, b, lines)
    return h


def parts_at(text: str, line: int, col: int, fmt_name: str, history: EditHistory):
    return prompt_parts(URI, parse_document(text, line, col), FORMATS[fmt_name], history, "k")


# ------------------------------------------------------------------------------- history

def test_changes_near_each_other_are_one_edit_and_a_far_one_starts_another():
    a = "".join(f"line {i}\n" for i in range(40))
    b = a.replace("line 3\n", "line three\n")
    c = b.replace("line 5\n", "line five\n")          # 2 lines away: the same group
    d = c.replace("line 30\n", "line thirty\n")       # 25 lines away: a new group
    h = EditHistory()
    h.changed("k", "f.py", a, b, (3, 3, 3))
    h.changed("k", "f.py", b, c, (5, 5, 5))
    h.changed("k", "f.py", c, d, (30, 30, 30))
    edits = h.edits()
    assert [(e.line, e.old, e.new) for e in edits] == [
        (3, ("line 3", "line 4", "line 5"), ("line three", "line 4", "line five")),
        (30, ("line 30",), ("line thirty",))]
    # Another document's change is a group of its own; closing a document forgets its edits.
    h.changed("other", "g.py", "x\n", "y\n", (0, 0, 0))
    assert [e.path for e in h.edits()] == ["f.py", "f.py", "g.py"]
    h.forget("k")
    assert [e.path for e in h.edits()] == ["g.py"]


def test_only_the_newest_groups_are_kept_and_an_undone_group_shows_nothing():
    h = EditHistory(max_groups=3)
    texts = [f"v{i}\n" for i in range(6)]
    for i in range(5):
        h.changed(f"doc{i}", f"d{i}.py", texts[i], texts[i + 1], (0, 0, 0))
    assert [e.path for e in h.edits()] == ["d2.py", "d3.py", "d4.py"]
    assert [e.path for e in h.edits(limit=2)] == ["d3.py", "d4.py"]
    h.changed("doc4", "d4.py", texts[5], texts[4], (0, 0, 0))    # typed and deleted again
    assert [e.path for e in h.edits()] == ["d2.py", "d3.py"]


def test_an_edit_as_a_unified_diff_hunk():
    edit = line_edit("f.py", "a\nb\nc\nd\ne\n", "a\nb\nC\nC2\nd\ne\n")
    assert edit.unified_diff() == "@@ -1,5 +1,6 @@\n a\n b\n-c\n+C\n+C2\n d\n e\n"
    assert line_edit("f.py", "a\r\nb\r\n", "a\nb\n") is None      # line ends only: no edit


# ------------------------------------------------------------------------------- prompts

def test_zeta_golden_prompt():
    h = history_of(BEFORE, DOC)
    text = prompt_text(FORMATS["zeta"], parts_at(DOC, 4, 4, "zeta", h))
    assert text == (
        "### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then "
        "rewrite an excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking "
        "into account the cursor location.\n\n"
        "### User Edits:\n\n"
        'User edited "pkg/shapes.py":\n```diff\n@@ -1,6 +1,6 @@\n import os\n \n \n-def area(width, height):\n'
        "+def area(w, height):\n     result = width * height\n     return result\n```\n\n"
        "### User Excerpt:\n\n```pkg/shapes.py\n<|start_of_file|>\n<|editable_region_start|>\n"
        "import os\n\n\ndef area(w, height):\n    <|user_cursor_is_here|>result = width * height\n"
        "    return result\n\n<|editable_region_end|>\n```\n\n"
        "### Response:\n```pkg/shapes.py\n<|start_of_file|>\n<|editable_region_start|>\n")


def test_sweep_golden_prompt_shows_the_region_before_and_after_the_latest_edit():
    h = history_of(BEFORE, DOC)
    text = prompt_text(FORMATS["sweep"], parts_at(DOC, 4, 4, "sweep", h))
    assert text == (
        "<|file_sep|>pkg/shapes.py.diff\noriginal:\ndef area(width, height):\nupdated:\ndef area(w, height):\n"
        "<|file_sep|>original/pkg/shapes.py\nimport os\n\n\ndef area(width, height):\n    result = width * height\n"
        "    return result\n\n"
        "<|file_sep|>current/pkg/shapes.py\nimport os\n\n\ndef area(w, height):\n    result = width * height\n"
        "    return result\n\n"
        "<|file_sep|>updated/pkg/shapes.py\n")


def test_the_window_is_clipped_and_zeta_shows_context_around_it():
    text = "".join(f"x{i} = {i}\n" for i in range(40))
    h = history_of(text.replace("x20 = 20", "x20 = 0"), text)
    parts = parts_at(text, 20, 0, "zeta", h)
    assert (parts.region.first, parts.region.last) == (10, 30)
    assert parts.above == tuple(f"x{i} = {i}" for i in range(5, 10)) and not parts.at_file_start
    zeta = prompt_text(FORMATS["zeta"], parts)
    assert "<|start_of_file|>" not in zeta
    assert "x9 = 9\n<|editable_region_start|>\nx10 = 10\n" in zeta
    assert "x30 = 30\n<|editable_region_end|>\nx31 = 31\n" in zeta and "x35 = 35\n```" in zeta
    # At the file's end the window stops at the last line (the empty one after the final newline).
    end = parts_at(text, 39, 0, "zeta", h)
    assert (end.region.first, end.region.last, end.below) == (29, 40, ())
    assert region_at(parse_document("only\n", 0, 2), 10, 10) == Region(0, ("only", ""), (0, 2))


def test_the_demo_format_is_the_region_and_a_blank_line():
    h = history_of(BEFORE, DOC)
    parts = parts_at(DOC, 4, 4, "copy", h)
    assert (parts.region.first, parts.region.last) == (2, 6)
    assert prompt_text(FORMATS["copy"], parts) == "\ndef area(w, height):\n    result = width * height\n    return result\n\n\n"


def test_auto_picks_the_format_by_the_models_name():
    assert format_for("auto", "demo").name == "copy"
    assert format_for("auto", "/models/sweep-next-edit-1.5B").name == "sweep"
    assert format_for("auto", "zed-industries/zeta").name == "zeta"
    assert format_for("auto", "/models/some-coder").name == "zeta"
    assert format_for("sweep", "zeta").name == "sweep"


def test_the_original_region_undoes_the_latest_edit_where_it_lies_in_the_region():
    region = Region(10, ("a", "b", "NEW1", "NEW2", "e"), (12, 0))
    edit = line_edit("f.py", "".join(f"{x}\n" for x in [*"0123456789", "a", "b", "c", "e"]),
                     "".join(f"{x}\n" for x in [*"0123456789", "a", "b", "NEW1", "NEW2", "e"]))
    assert original_lines(region, edit) == ("a", "b", "c", "e")
    far = line_edit("f.py", "q\n" * 50, "q\n" * 40 + "z\n" + "q\n" * 9)
    assert original_lines(region, far) == region.lines


@pytest.fixture(scope="module")
def qwen():
    from engine.load.models import load_model
    from tests.real_tokenizers import model_dir

    return load_model(model_dir("qwen3"), "target", device="cpu", dtype="float32")


def test_sentinels_are_one_token_and_the_region_is_the_copy_source(qwen):
    prompt = NextEditPrompt("sweep", "", parts_at(DOC, 4, 4, "sweep", history_of(BEFORE, DOC)), {}, qwen)
    p = prompt.tokens()
    sep = qwen.tokenizer.get_vocab()["<|file_sep|>"]
    assert p.target_ids.count(sep) == 4            # the edit's, original/, current/ and updated/
    assert qwen.tokenizer.decode(p.target_ids) == prompt.text
    assert sep in p.stop_ids and qwen.tokenizer.eos_token_id in p.stop_ids
    # The copy source is the region as an answer that keeps it writes it, and as the prompt holds it.
    region = prompt.parts.region.text
    assert qwen.tokenizer.decode(list(p.copy_source)) == region + "\n"
    ids, src = p.target_ids, list(p.copy_source)
    assert any(ids[i:i + len(src)] == src for i in range(len(ids))), "the region's ids are in the prompt"


# ------------------------------------------------------------------------------- answers

REGION = Region(3, ("def area(w, height):", "    result = width * height", "    return result"), (4, 4))


def test_zeta_answers():
    zeta = FORMATS["zeta"]
    new = "def area(w, height):\n    result = w * height\n    return result"
    assert parse_answer(zeta, new + "\n<|editable_region_end|>\n```", "region_end", REGION).rewrite == new
    # The cursor mark is dropped, and a repeated excerpt head before the region is skipped.
    marked = new.replace("result =", "<|user_cursor_is_here|>result =")
    assert parse_answer(zeta, "```f.py\n<|editable_region_start|>\n" + marked + "\n<|editable_region_end|>",
                        "region_end", REGION).rewrite == new
    assert parse_answer(zeta, new, "max_tokens", REGION).verdict == "unterminated"
    assert parse_answer(zeta, new, "eos", REGION).verdict == "malformed"


def test_sweep_and_copy_answers():
    sweep, copy = FORMATS["sweep"], FORMATS["copy"]
    assert parse_answer(sweep, "a\nb\n", "eos", REGION).rewrite == "a\nb"
    assert parse_answer(sweep, "a\nb\n<|file_sep|>", "eos", REGION).rewrite == "a\nb"
    assert parse_answer(sweep, "a\nb\n", "max_tokens", REGION).verdict == "unterminated"
    assert parse_answer(copy, "x\ny\nz\n", "region_end", REGION).rewrite == "x\ny\nz"
    assert parse_answer(copy, "x\ny\nz\nmore", "max_tokens", REGION).rewrite == "x\ny\nz"
    assert parse_answer(copy, "x\ny", "max_tokens", REGION).verdict == "unterminated"
    assert parse_answer(copy, "x\ny", "eos", REGION).rewrite == "x\ny"      # it ended: a shorter region


def test_the_edit_is_minimal_and_none_when_the_rewrite_is_the_region():
    assert minimal_edit(REGION, REGION.text) is None
    e = minimal_edit(REGION, REGION.text.replace("= width *", "= w *"))
    assert (e.start, e.end, e.text) == ((4, 14), (4, 18), "")    # "width" -> "w": "idth" goes
    e = minimal_edit(REGION, REGION.text + "\n\n\ndef volume(w, h, d):")
    assert (e.start, e.end, e.text) == ((5, 17), (5, 17), "\n\n\ndef volume(w, h, d):")
    e = minimal_edit(REGION, "def area(w, height):\n    return result")
    assert (e.start, e.end, e.text) == ((4, 6), (5, 6), "")    # "sult = ... height\n    re" goes


def test_crlf_and_non_ascii_lines():
    text = "x = 'é'\r\ny = '😀'\r\nz = 1\r\n"
    cur = parse_document(text, 1, 5)
    region = region_at(cur, 10, 10)
    assert region.lines == ("x = 'é'", "y = '😀'", "z = 1", "")
    # codepoint columns (the server turns them into the client's units)
    e = minimal_edit(region, "x = 'é'\ny = '😀😀'\nz = 1\n", cur.eol)
    assert (e.start, e.end, e.text) == ((1, 6), (1, 6), "😀")
    e = minimal_edit(region, "x = 'e'\ny = '😀'\nz = 1\n", cur.eol)
    assert (e.start, e.end, e.text) == ((0, 5), (0, 6), "e")
    # the new text in the document's line ending
    e = minimal_edit(region, "x = 'é'\ny = '😀'\nw = 2\nz = 1\n", cur.eol)
    assert (e.start, e.end, e.text) == ((2, 0), (2, 0), "w = 2\r\n")


def test_a_rewrite_of_the_files_end_keeps_its_final_line_break():
    region = region_at(parse_document("a = 1\nb = 2\n", 1, 0), 10, 10)      # ("a = 1", "b = 2", "")
    kept = with_final_line_break(region, 3, "a = 1\nb = 3")
    assert kept == "a = 1\nb = 3\n"
    edit = minimal_edit(region, kept)
    assert (edit.start, edit.end, edit.text) == ((1, 4), (1, 5), "3")
    assert with_final_line_break(region, 3, "a = 1\nb = 2\n") == "a = 1\nb = 2\n"
    # a region that stops before the document's end, or a document without a final line break
    inner = region_at(parse_document("a = 1\nb = 2\nc = 3\n", 0, 0), 0, 1)
    assert with_final_line_break(inner, 4, "a = 1\nb = 3") == "a = 1\nb = 3"
    bare = region_at(parse_document("a = 1\nb = 2", 1, 0), 10, 10)
    assert with_final_line_break(bare, 2, "a = 1") == "a = 1"
