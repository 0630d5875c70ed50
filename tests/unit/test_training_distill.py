"""The editor positions distillation trains and is evaluated on (training/editor_positions.py),
the held-out split, and the draft's examples (training/distill_data.py) on the tiny pair's
tokenizers: the prompt is the draft template's own, the answer is the target's text."""
from __future__ import annotations

import random

from training.editor_positions import (SourceText, code_lines, position_at, random_positions,
                                       read_sources, split_files, spread_positions)

CODE = '''import os


def walk(root):
    """Files under root."""
    # comment line
    for dirpath, _, names in os.walk(root):
        for name in names:
            yield os.path.join(dirpath, name)


def count(root):
    return sum(1 for _ in walk(root))
'''


def test_code_lines_skip_blank_comment_and_docstring_lines():
    lines = [CODE[s:e] for s, e in code_lines(CODE)]
    assert lines[0] == "def walk(root):" and "    # comment line" not in lines
    assert '    """Files under root."""' not in lines and "" not in lines
    assert "import os" not in lines      # line 0 has no context before it


def test_each_kind_puts_the_cursor_where_an_editor_would():
    f = SourceText("walk.py", CODE)
    line = next((s, e) for s, e in code_lines(CODE) if CODE[s:e] == "        for name in names:")
    s, e = line
    rng = random.Random(0)
    eol = position_at(f, "eol", line, rng)
    assert eol.prefix.endswith("        for name in names:") and eol.suffix.startswith("\n            yield")
    fresh = position_at(f, "fresh", line, rng)
    assert fresh.prefix.endswith("os.walk(root):\n        ")       # the line removed, its indent kept
    assert fresh.suffix.startswith("\n            yield") and "for name in names" not in fresh.prefix + fresh.suffix
    l2r = position_at(f, "l2r", line, rng)
    assert l2r.suffix == "" and l2r.prefix == fresh.prefix
    mid = position_at(f, "mid", line, rng)
    assert mid.prefix + mid.suffix == CODE and s + 8 < len(mid.prefix) < e
    assert CODE[len(mid.prefix) - 1].isalnum()                       # right after a word


def test_split_is_seeded_and_holds_out_at_least_one_file():
    files = [SourceText(f"m{i}.py", CODE + f"\nX = {i}\n") for i in range(10)]
    train, held = split_files(files, 0.2, seed=0)
    assert len(held) == 2 and len(train) == 8 and not {f.path for f in train} & {f.path for f in held}
    assert split_files(list(reversed(files)), 0.2, seed=0) == (train, held)
    assert split_files(files, 0.2, seed=1) != (train, held)
    assert len(split_files(files[:2], 0.01, seed=0)[1]) == 1


def test_positions_are_deterministic_and_spread(tmp_path):
    (tmp_path / "walk.py").write_text(CODE * 2)                # over the 300-byte floor
    (tmp_path / "tiny.py").write_text("x = 1\n")          # under the size floor: skipped
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "dep.py").write_text(CODE)
    files = read_sources([str(tmp_path)])
    assert [f.path for f in files] == ["walk.py"]
    a = spread_positions(files[0], "eol", 3)
    assert a == spread_positions(files[0], "eol", 3) and len(a) == 3 and len({p.prefix for p in a}) == 3
    stream = random_positions(files, {"eol": 1, "fresh": 1}, seed=5)
    first = [next(stream) for _ in range(20)]
    again = random_positions(files, {"eol": 1, "fresh": 1}, seed=5)
    assert first == [next(again) for _ in range(20)] and {p.kind for p in first} == {"eol", "fresh"}


def test_draft_example_is_the_draft_prompt_then_the_target_text():
    from completion.templates import load_template
    from tests.tiny_models import tiny_tokenizers
    from training.distill_data import Sample, draft_example, prompt_ids

    _, draft_tok = tiny_tokenizers()
    t = load_template(draft_tok)
    s = Sample("eol", "spm", "def f(x):\n    ", "\n\nprint(f(2))\n", "return x + 1", ended=True)
    ids, is_answer = draft_example(t, s)
    prompt = t.build(s.prefix, s.suffix, "spm")
    assert ids[:len(prompt)] == prompt and not any(is_answer[:len(prompt)])
    answer = ids[len(prompt):]
    assert all(is_answer[len(prompt):]) and answer[-1] == t.stop_ids[0]
    assert draft_tok.decode(answer[:-1]) == "return x + 1"
    l2r = Sample("l2r", "prefix", "def f(x):\n    ", "", "return x", ended=False)
    ids, is_answer = draft_example(t, l2r)
    assert ids[:len(prompt_ids(t, l2r.prefix, "", "prefix"))] == t.encode(l2r.prefix)
    assert draft_tok.decode([i for i, a in zip(ids, is_answer) if a]) == "return x"
