"""Smoke test of the benchmark suite (bench/suite.py) at its smallest settings on the tiny pair:
every workload x configuration is in the printed table with figures that make sense (counts,
ranges, the reference's own row, lossless answers), never how fast anything is."""
from __future__ import annotations

import json
import re

import pytest

from bench import suite
from bench.common import DRAFT_CONFIGS
from tests.e2e.lsp_helpers import tiny_pair
from tests.e2e.test_bench import small_files

NUMBER = r"\d+(\.\d+)?"
PAIRED = rf"({NUMBER})x \[({NUMBER}), ({NUMBER})\]"     # median per request, 95% CI


def cells_of(table: str) -> dict[tuple[str, str], list[str]]:
    """(workload, configuration label) -> the row's cells, from the printed markdown table."""
    rows = {}
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith(("| workload", "|---")):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 13:
                rows[(cells[0], cells[1])] = cells[2:]
    return rows


def x(cell: str) -> float:
    assert re.fullmatch(NUMBER + "x", cell), cell
    return float(cell[:-1])


def check_row(workload: str, config: str, cells: list[str]) -> int:
    """A row's figures make sense; returns its requests (a row of none shows no figures)."""
    requests, p50, p95, p50_vs, per_request, per_call, acceptance, achieved, predicted, efficiency, same = cells
    n, runs = map(int, re.fullmatch(r"(\d+) \((\d+)\)", requests).groups())
    assert same == f"{n}/{n}", f"{workload} x {config}: answers differ from no draft's (greedy is lossless)"
    if n == 0:
        assert p50 == p50_vs == "-", (workload, config)
        return 0
    assert 0 < runs <= n
    assert 0 <= float(p50) <= float(p95)
    assert x(p50_vs) > 0 and float(per_call) > 0
    if per_request != "-":          # "-": no request ran the model under both
        median, low, high = map(float, re.fullmatch(PAIRED, per_request).group(1, 3, 5))
        assert 0 < low <= median <= high, per_request
    assert x(achieved) > 0 and x(predicted.rstrip("*")) > 0
    assert re.fullmatch(r"\d+%", efficiency) and int(efficiency[:-1]) > 0, efficiency
    if config == "no-draft":
        assert (x(p50_vs), x(achieved), acceptance) == (1.0, 1.0, "-")
        assert per_request == "1.00x [1.00, 1.00]"     # every request paired with itself
        # the reference predicts itself, less the planning time of rounds that draft nothing
        assert 90 <= int(efficiency[:-1]) <= 100, efficiency
    elif acceptance != "-":
        assert 0 <= float(acceptance) <= 1
    if acceptance != "-":
        # every drafting configuration has its acceptance
        # counted per draft position (the engine's by_position), so none is flat
        assert not predicted.endswith("*"), (workload, config)
    return n


@pytest.mark.timeout(900)   # includes building the tiny pair when no other test has
def test_the_suite_prints_every_workload_and_configuration(tmp_path, capsys):
    target, draft = tiny_pair()
    out = tmp_path / "out"
    rc = suite.main(["--quick", "--target", target, "--draft", draft, "--device", "cpu", "--dtype", "float32",
                     "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    md = (out / "suite.md").read_text()
    assert md.strip() in printed
    rows = cells_of(md)

    for workload in suite.WORKLOADS:
        counts = set()
        for config, label in suite.LABELS.items():
            assert (workload, label) in rows, f"no row for {workload} x {config}"
            # the requests whose answer loops are in a row of their own, when there are any
            shown = [w for w in (workload, suite.LOOPING_OF[workload]) if (w, label) in rows]
            counts.add(sum(check_row(w, config, rows[(w, label)]) for w in shown))
        assert len(counts) == 1, f"{workload}: configurations answered different numbers of requests"

    assert "| per request vs no draft (median, 95% CI) |" in md
    assert "Costs measured in this run:" in md and "## Goals (default configuration)" in md
    for workload in suite.REPLAYS:      # (c) "not slower" is judged by the per-request median
        goal = next(line for line in md.splitlines() if line.startswith(f"| (c) {workload}: default not slower"))
        judged = rf"per request {PAIRED} \(\d+ requests\); p50 {NUMBER}x \| (yes|\*\*no\*\*)"
        unpaired = rf"p50 {NUMBER}x; no request ran the model in both \| -"
        assert re.search(rf"\| ({judged}|{unpaired}) \|$", goal), goal
    for workload in suite.WORKLOADS:
        assert any(re.search(rf"- {w}: verify\(1\) {NUMBER} ms", md) for w in (workload, suite.LOOPING_OF[workload])), \
            workload
    # each server's kernels, as its specfill.stats gave them after the last request
    assert "Each server's matmul kernels (measured at its load) and garbage collector:" in md
    for config in DRAFT_CONFIGS:
        assert re.search(rf"^- {config}: target one \w+, few \w+, verify \w+, many \w+.*; the collector's passes: \d+",
                         md, re.M), config

    saved = json.loads((out / "suite.json").read_text())
    assert set(saved["requests"]) == set(suite.WORKLOADS)
    for row in saved["rows"]:
        assert set(row["paired"]) == {"median", "low", "high", "n"}
        s = row["speedup"]
        assert s["efficiency"] == pytest.approx(s["achieved"] / s["predicted"])
    engine_runs = [r["engine"] for by in saved["requests"].values() for rs in by.values() for r in rs if r["engine"]]
    # a run may have no round: the prefill's pass gives the first token, and the answer can end there
    assert engine_runs and all(e["rounds"] >= 0 and e["new_tokens"] >= 0 for e in engine_runs)
    assert any(e["rounds"] >= 1 for e in engine_runs)
    assert all(e["new_tokens"] >= e["first_from_prefill"] for e in engine_runs)


@pytest.mark.timeout(600)
def test_replay_append_reports_its_multi_line_requests(tmp_path, capsys):
    """The replay that writes new code at the end of a file, on the shipped pair: several of its
    answers are multi-line, those requests get rows of their own, and (c)'s multi-line goal is
    measured on them."""
    out = tmp_path / "out"
    rc = suite.main(["--workloads", "replay-append", "--configs", "default", "--files", str(small_files(tmp_path)),
                     "--appended-lines", "4", "--time-scale", "0", "--out", str(out)])
    assert rc == 0
    md = (out / "suite.md").read_text()
    assert md.strip() in capsys.readouterr().out
    rows = cells_of(md)
    counts = {}
    for workload in ("replay-append", suite.MULTILINE_OF["replay-append"]):
        for config in ("no-draft", "default"):
            requests, *_, same = rows[(workload, suite.LABELS[config])]
            n = int(re.fullmatch(r"(\d+) \(\d+\)", requests).group(1))
            assert same == f"{n}/{n}", (workload, config)
            counts[workload] = n
    typed, multiline = counts["replay-append"], counts[suite.MULTILINE_OF["replay-append"]]
    assert 0 < multiline <= typed
    saved = json.loads((out / "suite.json").read_text())
    answers = [suite.Request(**r) for r in saved["requests"]["replay-append"]["no-draft"]]
    # the multi-line answers that loop are in the looping row, not this one
    assert sum("\n" in r.output and not suite.answer_loops("replay-append", r) for r in answers) == multiline
    goal = next(line for line in md.splitlines() if line.startswith("| (c) replay, multi-line answers"))
    assert re.search(rf"\| {NUMBER}x \(replay-append, {multiline} requests\) \| (yes|\*\*no\*\*) \|$", goal), goal
