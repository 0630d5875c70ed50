"""bench/server_cost.py: one line for a bad option or git ref; a small run types into this tree's
server and a commit's side by side, splits each request's time, times document edits, and builds
every request's prompt both ways, the same."""
from __future__ import annotations

import re

import pytest

from bench import server_cost
from tests.e2e.test_cli_errors import assert_one_line_error, in_process

PROG = "python -m bench.server_cost"


@pytest.mark.parametrize("args, expected", [
    (["--typed-lines", "0"], "argument --typed-lines: expected at least 1, got 0"),
    (["--baseline", "no-such-ref"], "--baseline: 'no-such-ref' names no git commit here"),
])
def test_a_bad_option_is_one_line_with_exit_code_2(args, expected, capsys):
    code, out, err = in_process(args, capsys, server_cost.main)
    assert_one_line_error(code, out, err)
    assert err == f"{PROG}: {expected} (see {PROG} --help)\n"


def test_a_small_run_prints_both_servers_and_the_edit_costs(capsys):
    code, out, err = in_process(["--baseline", "HEAD", "--typed-lines", "1", "--max-files", "1", "--time-scale", "0"],
                                capsys, server_cost.main)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith(("this tree", "baseline"))]
    assert len(rows) == 2
    for row in rows:     # requests, client p50 and p95, worker p50, the server's own p50 and p95
        assert int(row[-6]) > 0 and all(float(v) > 0 for v in row[-5:-2])
    same = re.search(r"same answer (\d+)/(\d+)", out)
    assert same and same.group(1) == same.group(2)
    edits = [line.split() for line in out.splitlines() if re.match(r"\d+ lines", line)]
    assert [int(e[0]) for e in edits] == list(server_cost.EDIT_LINES)
    assert all(float(v) > 0 for e in edits for v in e[2:])
    prompts = re.search(r"prefix line by line: True\): encoded whole ([\d.]+) ms, this tree ([\d.]+) ms per request; "
                        r"same prompt (\d+)/(\d+)", out)
    assert prompts and float(prompts.group(1)) > 0 and prompts.group(3) == prompts.group(4)
