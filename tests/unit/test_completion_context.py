"""Context windows (token budgets, line cuts, coarse steps), extra context from other files,
and the KV reuse of the chosen prompt layout over a replayed typing session."""
from __future__ import annotations

import inspect
import textwrap

from completion.context import ExtraContext, TokenCounter, cut_window, parse_document
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
