"""bench/calibration.py: chains are counted by position as the controller counts them, and a
quick run on the shipped pair prints both tables, with 'none' rounds planned and giving one
token each."""
from __future__ import annotations

from bench import calibration
from bench.calibration import Round, chain_acceptance
from tests.e2e.test_cli_errors import in_process


def test_chain_positions_count_as_the_controller_counts_them():
    rounds = [Round("lookup", 3, "match 6+", False, False, 3.0, 2.0, chain_accepted=1),   # right, then wrong
              Round("pair", 2, "match 6+", False, False, 2.0, 2.0, chain_accepted=2),     # both right
              Round("lookup", 1, "datastore 4-7", True, False, 1.5, 1.5, chain_accepted=0),
              Round("lookup", 2, "match 6+", False, True, 1.5, 1.5, chain_accepted=0),    # an answer's start
              Round("none", 0, "-", False, True, 1.0, 1.0)]                               # no chain
    by = chain_acceptance(rounds)
    assert by[("match 6+", False, False)] == [(2, 2), (2, 1), (0, 0)]
    assert by[("datastore 4-7", True, False)] == [(1, 0), (0, 0), (0, 0)]
    assert by[("match 6+", False, True)] == [(1, 0), (0, 0), (0, 0)]
    assert set(by) == {("match 6+", False, False), ("datastore 4-7", True, False), ("match 6+", False, True)}


def test_a_quick_run_prints_both_tables(capsys):
    code, out, err = in_process(["--quick"], capsys, calibration.main)
    assert code == 0, err
    total = int(out.split()[0])
    plans = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "class |" not in line
             and not line.startswith("|---") and len(line.split("|")) == 13]
    assert total > 50 and sum(int(r[4]) for r in plans) == total
    none = [r for r in plans if r[0].strip() == "none"]
    assert none and float(none[0][6]) == 1.0 and float(none[0][7]) == 1.0   # one token, as planned
    assert any(r[0].strip() == "lookup" for r in plans)
    accept = [line.split("|")[4:-1] for line in out.splitlines() if line.startswith("| ") and line.count("|") == 7
              and "position" not in line]
    assert accept
    for cells in accept:
        reached = [int(c.split("(")[1].rstrip(") ")) for c in cells if "(" in c]
        assert reached == sorted(reached, reverse=True)     # a later position is reached less often
        assert all(0.0 <= float(c.split()[0]) <= 1.0 for c in cells if "(" in c)
