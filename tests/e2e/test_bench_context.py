"""Smoke test of the extra-context benchmark (bench/context_sources.py): a few lines typed into
real servers (tiny pair, over stdio) after edits, a visit and a yank in an older copy of the
file; every configuration answers every request, and each prompt holds exactly the sources its
configuration allows. Checks that the report carries figures, never what they are."""
from __future__ import annotations

import json

import pytest

from bench import context_sources
from tests.e2e.lsp_helpers import tiny_pair
from tests.e2e.test_bench import small_files


@pytest.mark.timeout(600)   # includes building the tiny pair when no other test has
def test_context_benchmark_runs_every_configuration_on_the_same_requests(tmp_path, capsys):
    target, draft = tiny_pair()
    files = small_files(tmp_path)
    out = tmp_path / "out"
    rc = context_sources.main(["--files", str(files), "--typed-lines", "3", "--target", target, "--draft", draft,
                               "--set", "device=cpu", "--set", "extraTokens=512", "--configs", "none,all",
                               "--scenarios", "related", "--time-scale", "0", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "results.json").read_text())
    records = data["records"]
    by_config = {c: [r for r in records if r["config"] == c] for c in ("none", "all")}
    assert len(by_config["none"]) == len(by_config["all"]) > 0
    assert all(not r["extra_sources"] for r in by_config["none"] if r["ran_model"])
    ran = [r for r in by_config["all"] if r["ran_model"]]
    assert ran and {s for r in ran for s in r["extra_sources"]} <= {"open", "edits", "yanks", "visits"}
    assert any(r["extra_sources"] for r in ran)
    assert [(row["scenario"], row["config"]) for row in data["rows"]] == [("related", "none"), ("related", "all")]
    assert "| related | all |" in capsys.readouterr().out
    assert context_sources.main(["--configs", "nonsense", "--files", str(files), "--out", str(out)]) == 2
