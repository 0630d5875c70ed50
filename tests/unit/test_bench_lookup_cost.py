"""bench/lookup_cost.py: one line for a bad option or git ref; a small run times prompt lookup
for this tree and a commit's engine on the same walk, and their proposals agree."""
from __future__ import annotations

import re

import pytest

from bench import lookup_cost
from tests.e2e.test_cli_errors import assert_one_line_error, in_process

PROG = "python -m bench.lookup_cost"


@pytest.mark.parametrize("args, expected", [
    (["--files", "0"], "argument --files: expected at least 1, got 0"),
    (["--baseline", "no-such-ref"], "--baseline: 'no-such-ref' names no git commit here"),
])
def test_a_bad_option_is_one_line_with_exit_code_2(args, expected, capsys):
    code, out, err = in_process(args, capsys, lookup_cost.main)
    assert_one_line_error(code, out, err)
    assert err == f"{PROG}: {expected} (see {PROG} --help)\n"


def test_a_small_run_prints_both_engines_with_equal_proposals(capsys):
    code, out, err = in_process(["--baseline", "HEAD", "--files", "1", "--reps", "1"], capsys, lookup_cost.main)
    assert code == 0, err
    equal = re.search(r"proposals equal across engines (\d+)/(\d+)", out)
    assert equal and equal.group(1) == equal.group(2) and int(equal.group(2)) > 0
    rows = [line.split() for line in out.splitlines() if line.startswith(("this tree", "baseline"))]
    assert len(rows) == 2
    for row in rows:
        # propose, the two searches, the documents' read, a file's first read cold and once opened
        assert all(float(v) > 0 for v in row[-6:])
