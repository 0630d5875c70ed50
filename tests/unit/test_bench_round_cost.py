"""bench/round_cost.py's command line: bench.common's parser, so `--help` shows the options and
the module's text, and a bad option or git ref is one line on stderr with exit code 2, before
any engine or model loads."""
from __future__ import annotations

import re

import pytest

from bench import round_cost
from tests.e2e.test_cli_errors import assert_one_line_error, in_process

PROG = "python -m bench.round_cost"


def test_help_lists_the_options_and_the_module_text(capsys):
    code, out, err = in_process(["--help"], capsys, round_cost.main)
    assert code == 0 and err == ""
    assert out.startswith(f"usage: {PROG} ")
    for option in ("--baseline", "--ref", "--prompts", "--prompt-chars", "--max-new-tokens", "--draft-lengths",
                   "--reps", "--workload", "--cold-probe"):
        assert option in out
    assert "python -m bench.round_cost --baseline none" in out    # the docstring's examples, as written


@pytest.mark.parametrize("args, expected", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--reps", "0"], "argument --reps: expected at least 1, got 0"),
    (["--prompts", "x"], "argument --prompts: expected an integer, got 'x'"),
    (["--draft-lengths", "4,x"], "argument --draft-lengths: expected 'auto' or 1-16, got 'x'"),
    (["--draft-lengths", "0"], "argument --draft-lengths: expected 'auto' or 1-16, got 0"),
    (["--baseline", "no-such-ref"], "--baseline: 'no-such-ref' names no git commit here"),
    (["--ref", "no-such-ref", "--baseline", "none"], "--ref: 'no-such-ref' names no git commit here"),
])
def test_a_bad_option_is_one_line_with_exit_code_2(args, expected, capsys):
    code, out, err = in_process(args, capsys, round_cost.main)
    assert_one_line_error(code, out, err)
    assert err == f"{PROG}: {expected} (see {PROG} --help)\n"


def test_the_cold_probe_times_the_same_plan_after_a_forward_and_again(capsys):
    """A small run with --cold-probe: the table, then the probe's line (two positive medians over
    the rounds of its extra pass)."""
    code, out, err = in_process(["--baseline", "none", "--prompts", "2", "--prompt-chars", "300", "--max-new-tokens",
                                 "16", "--draft-lengths", "auto", "--reps", "1", "--cold-probe"], capsys, round_cost.main)
    assert code == 0, err
    assert "outputs equal across engines 2/2" in out
    probe = re.search(r"fixed offer took ([\d.]+) us right after a round's target forward and ([\d.]+) us asked again "
                      r"at once \(([\d.]+)x; medians over (\d+) rounds", out)
    assert probe and float(probe.group(1)) > 0 and float(probe.group(2)) > 0 and int(probe.group(4)) > 0
