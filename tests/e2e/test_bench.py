"""Smoke test of the keystroke-replay benchmark: a few lines of one small file typed into the
real server (tiny pair, over stdio) and re-run with transformers generate() on the prompts the
completion pipeline builds. Checks that the report carries figures, never how fast they are."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from bench import replay
from bench.keystrokes import END, apply, cursor_after, typing_script
from tests.e2e.lsp_helpers import tiny_pair

SMALL = '''"""Temperatures."""


def to_celsius(fahrenheit: float) -> float:
    return (fahrenheit - 32) * 5 / 9


def to_fahrenheit(celsius: float) -> float:
    return celsius * 9 / 5 + 32


def describe(celsius: float) -> str:
    if celsius < 0:
        return "freezing"
    return "mild" if celsius < 25 else "hot"
'''


def small_files(tmp_path) -> Path:
    """A folder of .py files for a benchmark's --files: SMALL alone."""
    files = tmp_path / "files"
    files.mkdir()
    (files / "small.py").write_text(SMALL)
    return files


def test_typing_script_rebuilds_the_file_and_asks_for_completions():
    script = typing_script("small.py", SMALL, typed_lines=4, seed=0)
    lines = script.initial_text.split("\n")
    for key in script.keystrokes:
        lines = apply(lines, key)
    assert "\n".join(lines) == SMALL
    assert script.initial_text != SMALL
    assert any(k.request == "newline" for k in script.keystrokes)


def test_typing_at_the_end_writes_whole_functions_with_nothing_after_the_cursor():
    script = typing_script("small.py", SMALL, typed_lines=3, seed=0, where=END)
    # the last 3 lines widen to the whole last function (4 lines), typed after the rest of the file
    assert script.typed_lines == 4
    assert script.initial_text == SMALL[:SMALL.index("def describe")]
    lines = script.initial_text.split("\n")
    asked = 0
    for key in script.keystrokes:
        lines = apply(lines, key)
        line, col = cursor_after(key)
        # new code: nothing right of the cursor, nothing below it
        assert lines[line][col:] == "" and all(not rest for rest in lines[line + 1:])
        asked += bool(key.request)
    assert "\n".join(lines) == SMALL
    assert asked > 0
    # the middle replay is what it was: a block with code after it
    middle = typing_script("small.py", SMALL, typed_lines=3, seed=0)
    assert middle.initial_text.endswith(SMALL[SMALL.index("def describe"):])


@pytest.mark.timeout(600)
def test_replay_at_the_end_of_files_gets_multi_line_answers(tmp_path):
    """--append through a real server with the shipped pair: new code at the end of a file, where
    `multiline: auto` answers several lines."""
    out = tmp_path / "out"
    rc = replay.main(["--files", str(small_files(tmp_path)), "--append", "--typed-lines", "4",
                      "--configs", "no-draft", "--time-scale", "0", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["typed_at"] == "end"
    texts = [r["text"] for r in data["requests"]]
    assert len(texts) == data["meta"]["requests_per_config"] > 0
    assert any("\n" in t.strip() for t in texts), texts
    assert "lines typed at the end of each" in (out / "results.md").read_text()


@pytest.mark.timeout(600)   # includes building the tiny pair when no other test has
def test_replay_reports_figures_for_server_and_transformers(tmp_path):
    target, draft = tiny_pair()
    files = small_files(tmp_path)
    out = tmp_path / "out"
    rc = replay.main(["--files", str(files), "--typed-lines", "3", "--target", target, "--draft", draft,
                      "--device", "cpu", "--dtype", "float32", "--configs", "full,hf-plain",
                      "--time-scale", "0", "--out", str(out)])
    assert rc == 0

    data = json.loads((out / "results.json").read_text())
    n = data["meta"]["requests_per_config"]
    full = [r for r in data["requests"] if r["config"] == "full"]
    plain = [r for r in data["requests"] if r["config"] == "hf-plain"]
    assert n > 0 and len(full) == len(plain) == n
    assert all(r["latency_ms"] > 0 for r in data["requests"])
    runs = [r for r in full if r["ran_model"]]
    assert runs, "no request reached the model"
    assert all(r["target_calls"] >= 1 and r["prompt_tokens"] > 0 for r in runs)
    # Later keystrokes reuse the KV cache of earlier ones.
    assert sum(r["reused_tokens"] for r in runs) > 0
    # transformers ran on the very prompts the server built at the same keystrokes.
    plain_at = {(r["file"], r["keystroke"]): r for r in plain}
    for r in runs:
        assert r["prompt_tokens"] == plain_at[(r["file"], r["keystroke"])]["prompt_tokens"]
    assert all(r["target_calls"] >= 1 for r in plain)

    md = (out / "results.md").read_text()
    for label in ("1. specfill", "5. transformers generate()"):
        row = next(line for line in md.splitlines() if line.startswith(f"| {label}"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert int(cells[1]) == n
        assert re.fullmatch(r"\d+(\.\d)?", cells[4]), row   # p50 ms
    assert "## Goals" in md and "## Where the time goes" in md
    if importlib.util.find_spec("matplotlib"):
        assert (out / "latency.png").stat().st_size > 1000
