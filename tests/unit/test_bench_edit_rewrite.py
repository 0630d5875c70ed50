"""bench/edit_rewrite.py on the demo target, small: the rewrites are what they say (one line
changed, an identifier renamed in 3 places or more), the scripted target writes its script, the
copy drafts most rounds of a rewrite, and bad input is one line."""
from __future__ import annotations

from bench import edit_rewrite
from tests.e2e.test_cli_errors import assert_one_line_error, in_process


def test_the_rewrites_change_one_line_or_rename_an_identifier():
    (lines, at), = edit_rewrite.regions(1, seed=3)
    region = lines[at:at + edit_rewrite.LINES]
    assert edit_rewrite.rewritten(region, "copy") == "".join(region)
    changed = edit_rewrite.rewritten(region, "changed line").splitlines(keepends=True)
    assert len(changed) == len(region) and sum(a != b for a, b in zip(changed, region)) == 1
    name = edit_rewrite.renamed_name(region)
    renamed = edit_rewrite.rewritten(region, "renamed")
    assert "".join(region).count(name) >= 3 and name not in renamed.replace("value", "")


def test_a_small_run_reports_every_workload(capsys):
    code, out, err = in_process(["--targets", "demo", "--regions", "1", "--reps", "1"], capsys, edit_rewrite.main)
    assert code == 0, err          # 0: every scripted answer was written as scripted
    tables = [t for t in out.split("\ndemo, ")[1:]]
    assert [t.split(":")[0] for t in tables] == ["replay", "own"]
    for table in tables:
        rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in table.splitlines()
                if line.startswith("| ") and not line.startswith("| workload")}
        assert list(rows) == [*edit_rewrite.REWRITES, edit_rewrite.COMPLETION]
        per_call = {name: float(cells[0]) for name, cells in rows.items()}
        copy_share = {name: int(cells[2].rstrip("%")) for name, cells in rows.items()}
        assert per_call["copy"] > per_call[edit_rewrite.COMPLETION] and per_call["changed line"] >= 4, table
        assert copy_share["copy"] >= 50 and copy_share[edit_rewrite.COMPLETION] == 0, table
        assert rows[edit_rewrite.COMPLETION][5] == "1.00x", table


def test_bad_input_is_one_line(capsys):
    assert_one_line_error(*in_process(["--targets", "gpt"], capsys, edit_rewrite.main), "--targets")
    assert_one_line_error(*in_process(["--regions", "0"], capsys, edit_rewrite.main), "--regions")
