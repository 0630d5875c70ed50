"""Context windows (token budgets, line cuts, coarse steps), extra context from other files,
and the KV reuse of the chosen prompt layout over a replayed typing session."""
from __future__ import annotations

import inspect
import textwrap

from completion.context import ExtraContext, TokenCounter, cut_window, parse_document, similarity
from bench.measure_layout import prompt_reuse, typing_session
from completion.templates import load_template
from tests.tiny_models import tiny_tokenizers


def target_template():
    return load_template(tiny_tokenizers()[0])


def test_windows_respect_budgets_and_cut_at_lines():
    t = target_template()
    count = TokenCounter(t.encode_infill)
    src = inspect.getsource(textwrap)
    lines = src.split("\n")
    line = len(lines) // 2
    cur = parse_document(src, line, 4)
    w = cut_window(cur, count, prefix_tokens=300, suffix_tokens=100, step_lines=16)
    assert len(t.encode_infill(w.prefix)) <= 300 + 5            # per-line counts: small seam error
    assert len(t.encode_infill(w.suffix)) <= 100 + 5
    assert w.prefix == "\n".join(lines[w.start_line:line]) + "\n" + lines[line][:4]
    assert w.suffix == lines[line][4:] + "\n" + "\n".join(lines[line + 1:w.end_line]) + "\n"
    assert w.start_line % 16 == 0 and w.start_line > 0
    whole = cut_window(parse_document("a = 1\nb = 2\n", 1, 3), count, 300, 100)
    assert (whole.prefix, whole.suffix, whole.start_line) == ("a = 1\nb =", " 2\n", 0)


def test_window_within_another_windows_lines():
    """`within` keeps a window inside another's lines (the draft's inside the target's): a
    bigger budget adds nothing beyond them, a smaller one cuts inside them."""
    count = TokenCounter(target_template().encode_infill)
    src = inspect.getsource(textwrap)
    cur = parse_document(src, len(src.split("\n")) // 2, 4)
    outer = cut_window(cur, count, prefix_tokens=300, suffix_tokens=100, step_lines=16)
    lines = (outer.start_line, outer.end_line)
    same = cut_window(cur, count, 3000, 1000, 16, within=lines)
    assert (same.prefix, same.suffix) == (outer.prefix, outer.suffix)
    inner = cut_window(cur, count, 100, 30, 16, within=lines)
    assert outer.start_line < inner.start_line and inner.end_line < outer.end_line
    assert outer.prefix.endswith(inner.prefix) and outer.suffix.startswith(inner.suffix)
    assert inner == cut_window(cur, count, 100, 30, 16)      # a smaller budget: as without `within`


def test_window_start_moves_in_coarse_steps_while_typing():
    t = target_template()
    count = TokenCounter(t.encode_infill)
    session = typing_session(inspect.getsource(textwrap))
    starts = []
    for k in session:
        w = cut_window(parse_document(k.text, k.line, k.character), count, 400, 100, step_lines=16)
        starts.append(w.start_line)
    changes = sum(a != b for a, b in zip(starts, starts[1:]))
    assert changes >= 1                     # the budget did force the window down...
    assert changes <= len(set(k.line for k in session)) // 8 + 1   # ...but rarely, by whole steps
    assert all(s % 16 == 0 for s in starts)


def test_extra_context_ring_buffer():
    t = target_template()
    count = TokenCounter(t.encode_infill)
    ring = ExtraContext(max_chunks=3, chunk_lines=8)
    doc = "\n".join(f"line_{i} = {i}" for i in range(100))
    ring.note("file:///p/util.py", doc)                       # first sight: chunk at the top
    edited = doc.replace("line_50 = 50", "line_50 = 'changed'")
    ring.note("file:///p/util.py", edited)                    # chunk around the edit
    chunks = ring.select("file:///p/main.py", 1000, count)
    assert [c.path for c in chunks] == ["p/util.py", "p/util.py"]
    assert "line_50 = 'changed'" in chunks[1].text and "line_0 = 0" in chunks[0].text
    assert ring.select("file:///p/util.py", 1000, count) == ()   # never the document itself
    for i in range(5):                                        # ring: oldest chunks drop out
        ring.note(f"file:///p/m{i}.py", f"value_{i} = {i}\n")
    assert [c.path for c in ring.select("file:///x.py", 1000, count)] == ["p/m2.py", "p/m3.py", "p/m4.py"]
    small = ring.select("file:///x.py", count("p/m4.py\nvalue_4 = 4\n"), count)
    assert [c.path for c in small] == ["p/m4.py"]            # budget: newest first


def test_extra_context_from_edits_yanks_and_visits():
    """Chunks come from edits (around the edited line), yanks and visits; newest first within
    the budget, listed oldest first in the prompt; the document asked about gives none of its
    places, but its yanks count unless their text is already in view."""
    t = target_template()
    count = TokenCounter(t.encode_infill)
    ring = ExtraContext(max_chunks=8, chunk_lines=8)
    util = "\n".join(f"def helper_{i}(x):\n    return x + {i}" for i in range(40))
    ring.note("file:///p/util.py", util)                                   # opened: the top
    ring.note("file:///p/util.py", util, line=60, source="edits")         # edited at line 60
    ring.note_text("file:///p/main.py", "total = helper_7(3) + helper_9(4)\n", source="yanks")
    ring.note("file:///p/notes.py", "\n".join(f"note_{i} = {i}" for i in range(50)), line=30, source="visits")
    chunks = ring.select("file:///p/main.py", 10_000, count)
    assert [c.source for c in chunks] == ["open", "edits", "yanks", "visits"]
    assert "helper_30" in chunks[1].text and "helper_0" not in chunks[1].text
    assert "note_30 = 30" in chunks[3].text
    assert chunks[2].text == "total = helper_7(3) + helper_9(4)\n" and chunks[2].path == "p/main.py"
    # Asked from main.py with the yanked text already in its window: the yank is left out.
    seen = ring.select("file:///p/main.py", 10_000, count, visible="x = 1\ntotal = helper_7(3) + helper_9(4)\n")
    assert [c.source for c in seen] == ["open", "edits", "visits"]
    # Asked from util.py: its own places are left out, the yank from main.py is offered.
    assert [c.source for c in ring.select("file:///p/util.py", 10_000, count)] == ["yanks", "visits"]
    # Short yanks (a word) say nothing; they are not kept.
    ring.note_text("file:///p/main.py", "helper")
    assert len(ring.chunks()) == 4


def test_extra_context_newest_first_within_the_budget_and_trimmed_around_the_focus():
    t = target_template()
    count = TokenCounter(t.encode_infill)
    ring = ExtraContext(max_chunks=8, chunk_lines=32)
    big = "\n".join(f"value_{i} = compute({i}, {i * 7})" for i in range(200))
    ring.note("file:///p/old.py", "old_thing = 1\nother_old_thing = 2\n")
    ring.note("file:///p/big.py", big, line=100, source="edits")
    full = ring.select("file:///p/main.py", 100_000, count)
    assert [c.path for c in full] == ["p/old.py", "p/big.py"] and full[1].text.count("\n") == 32
    budget = count("p/big.py\n") + sum(count(f"value_{i} = compute({i}, {i * 7})\n") for i in range(98, 103))
    small = ring.select("file:///p/main.py", budget, count)
    # The newest chunk takes the budget, cut down to the lines around its edited line.
    assert [c.path for c in small] == ["p/big.py"]
    assert "value_100 = " in small[0].text and 3 <= small[0].text.count("\n") <= 5
    assert ring.select("file:///p/main.py", budget, count) == small   # same ring, same prompt


def test_extra_context_dedups_and_evicts_similar_chunks():
    t = target_template()
    count = TokenCounter(t.encode_infill)
    ring = ExtraContext(max_chunks=8, chunk_lines=16)
    block = "\n".join(f"row_{i} = load({i})" for i in range(12))
    ring.note_text("file:///p/a.py", block)
    ring.note("file:///p/b.py", "unrelated = True\nmore = False\n")
    ring.note_text("file:///p/c.py", block)                     # the same text again: kept in place
    assert ring.chunks() == [("file:///p/a.py", "yanks", 12), ("file:///p/b.py", "open", 2)]
    # Nearly the same text (one line of twelve changed) evicts the older chunk.
    nearly = block.replace("row_5 = load(5)", "row_5 = load(55)")
    assert similarity(tuple(block.split("\n")), tuple(nearly.split("\n"))) > 0.9
    ring.note_text("file:///p/a.py", nearly)
    assert ring.chunks() == [("file:///p/b.py", "open", 2), ("file:///p/a.py", "yanks", 12)]
    assert ring.evicted_similar == 1
    texts = [c.text for c in ring.select("file:///p/x.py", 10_000, count)]
    assert texts == ["unrelated = True\nmore = False\n", nearly + "\n"]
    # The same code at places in two documents: both kept (each may be what the other's
    # prompts need), only the newer one offered to a third document.
    copy = "\n".join(f"col_{i} = fetch({i})" for i in range(20))
    ring.note("file:///p/old.py", copy, line=10, source="visits")
    ring.note("file:///p/new.py", copy.replace("fetch(3)", "fetch(33)"), line=10, source="edits")
    assert [u for u, _, _ in ring.chunks()][-2:] == ["file:///p/old.py", "file:///p/new.py"]
    assert [c.path for c in ring.select("file:///p/x.py", 10_000, count)][-1:] == ["p/new.py"]
    assert "p/old.py" not in [c.path for c in ring.select("file:///p/x.py", 10_000, count)]
    assert "p/old.py" in [c.path for c in ring.select("file:///p/new.py", 10_000, count)]
    ring.forget("file:///p/old.py")
    ring.forget("file:///p/new.py")
    # Closing a document drops its places, not what was yanked from it.
    ring.forget("file:///p/a.py")
    ring.forget("file:///p/b.py")
    assert ring.chunks() == [("file:///p/a.py", "yanks", 12)]


def test_chosen_layout_keeps_the_kv_cache_valid_while_typing():
    """The default layout of the shipped-style target (SPM) only appends while the user types:
    almost every prompt token is reusable; PSM recomputes the whole suffix per keystroke."""
    session = typing_session(inspect.getsource(textwrap), max_chars=160)
    for tok in tiny_tokenizers():
        t = load_template(tok)
        assert t.default_layout == "spm"
        chosen = prompt_reuse(t, session, t.default_layout)
        psm = prompt_reuse(t, session, "psm")
        assert chosen["reuse_rate"] > 0.98
        assert chosen["recomputed_per_keystroke"] < 10
        assert psm["recomputed_per_keystroke"] > 10 * chosen["recomputed_per_keystroke"]


def test_lines_break_at_lf_crlf_and_cr_and_the_first_crlf_names_the_line_ending():
    cases = {"a\nb\n": (["a", "b", ""], "\n"), "a\r\nb\r\n": (["a", "b", ""], "\r\n"),
             "a\rb": (["a", "b"], "\n"), "a\rb\r\nc\nd": (["a", "b", "c", "d"], "\r\n"), "": ([""], "\n")}
    for text, (lines, eol) in cases.items():
        cur = parse_document(text, 0, 0)
        assert (cur.lines, cur.eol) == (lines, eol), repr(text)
