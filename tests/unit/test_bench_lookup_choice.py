"""bench/lookup_choice.py: each rule takes the candidate it says, and a small run on the shipped
pair prints every workload with the best of both candidates never below either one alone."""
from __future__ import annotations

from bench import lookup_choice
from engine.drafters import Draft
from tests.e2e.test_cli_errors import assert_one_line_error, in_process


def test_each_rule_takes_its_candidate():
    truth = [1, 2, 3, 4, 5]
    text = Draft([1, 2, 9], match=4, source="prompt")        # 2 of its tokens written
    stored = Draft([1, 2, 3, 4], match=5, source="datastore")  # 4 written
    assert lookup_choice.scores(text, stored, truth) == {
        "text": 2, "store": 4, "store < 6": 4, "longer match": 4, "best if differ": 4, "best of both": 4}
    long_text = Draft([1, 2, 9], match=7, source="prompt")
    # they start alike ("1 2"): a tree of the two branches after them, so only the best of both
    # (a pair that parts later) gets the store's longer run
    assert lookup_choice.scores(long_text, stored, truth) == {
        "text": 2, "store": 4, "store < 6": 2, "longer match": 2, "best if differ": 2, "best of both": 4}
    other_start = Draft([9, 9], match=7, source="prompt")
    assert lookup_choice.scores(other_start, stored, truth)["best if differ"] == 4
    tie = Draft([1, 2, 9], match=5, source="prompt")
    assert lookup_choice.scores(tie, stored, truth)["longer match"] == 2     # a tie goes to the text
    # one candidate only: every rule takes it
    assert set(lookup_choice.scores(None, stored, truth).values()) == {4}
    assert set(lookup_choice.scores(text, None, truth).values()) == {2}


def test_a_quick_run_prints_every_workload(capsys):
    code, out, err = in_process(["--quick"], capsys, lookup_choice.main)
    assert code == 0, err
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:]}
    assert list(rows) == ["generate", "end-of-line", "replay", "replay-append"]
    for workload, (proposals, *means, both, differ) in rows.items():
        assert int(proposals) > 0, workload
        assert 0 <= int(differ) <= int(both) <= int(proposals), workload
        by_rule = dict(zip(lookup_choice.RULES, map(float, means)))
        assert by_rule["best of both"] >= max(v for r, v in by_rule.items() if r != "best of both"), workload
        assert by_rule["best of both"] > 0, workload


def test_a_missing_datastore_is_one_line_with_exit_code_2(capsys, tmp_path):
    code, out, err = in_process(["--datastore", str(tmp_path / "none.npz"), "--quick"], capsys, lookup_choice.main)
    assert_one_line_error(code, out, err)
    assert "--datastore: datastore" in err and "no such file" in err
