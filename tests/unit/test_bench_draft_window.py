"""bench/draft_window.py on the shipped pair, small: every draft prompt leaves the target's text
unchanged, the shipped draft's auto prompt is the shorter one, and bad input is one line."""
from __future__ import annotations

from bench import draft_window
from tests.e2e.test_cli_errors import assert_one_line_error, in_process


def test_a_small_run_compares_the_draft_prompts(capsys):
    code, out, err = in_process(["--per-file", "1", "--max-files", "1", "--max-new-tokens", "16",
                                 "--prompt-tokens", "own,window,auto,64"], capsys, draft_window.main)
    assert code == 0, err          # 0: every prompt gave the target's own text
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| draft prompt")}
    assert list(rows) == ["draft's own budgets", "target's window", "auto (256)", "64 tokens"]
    prompt_tokens = {name: float(cells[2]) for name, cells in rows.items()}
    assert (prompt_tokens["64 tokens"] < prompt_tokens["auto (256)"] < prompt_tokens["target's window"]
            < prompt_tokens["draft's own budgets"])
    assert all(0 <= float(cells[0]) <= 1 and float(cells[1]) >= 1 for cells in rows.values())
    assert "same output with every prompt: 2/2" in out


def test_bad_input_is_one_line(capsys):
    assert_one_line_error(*in_process(["--prompt-tokens", "8"], capsys, draft_window.main), "--prompt-tokens")
    assert_one_line_error(*in_process(["--draft", "none"], capsys, draft_window.main), "--draft")
