"""`specfill datastore` end to end on the tiny target: the command writes the target's answers
at editor positions of a folder of code, stores them, and its report (lookup alone against lookup
with the store, through the engine, on held-out files, outputs checked equal) shows more tokens
per target call with the store. Bounded by answers, not time: the same run on every machine."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from engine.drafters.datastore import Datastore
from tests.e2e.lsp_helpers import tiny_pair
from tests.e2e.test_distill import USER_MODULES, write_code


def test_datastore_command_stores_answers_and_reports_their_gain(tmp_path: Path):
    target, _ = tiny_pair()
    code = write_code(tmp_path / "code", USER_MODULES)
    out = tmp_path / "store.npz"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "datastore", "--target", target, "--code", str(code), "--out", str(out),
         "--held-out", "0.3", "--max-samples", "128", "--minutes", "30", "--new-tokens", "32",
         "--eval-positions", "6", "--eval-tokens", "24", "--threads", "1", "--seed", "0", "--device", "cpu"],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    log = done.stdout
    assert "[store] 128 answers" in log, log
    from transformers import AutoTokenizer
    store = Datastore.load(out, AutoTokenizer.from_pretrained(target).get_vocab())
    assert store.size > 128 * 16
    rows = dict(re.findall(r"\| (without|with) the datastore \| 12 \| [0-9.]+ \| ([0-9.]+) \|", log))
    assert set(rows) == {"without", "with"}, log
    assert float(rows["with"]) > float(rows["without"]), log


def test_datastore_command_errors_are_one_line(tmp_path: Path):
    code = write_code(tmp_path / "code", USER_MODULES[:2])
    for extra, message in ((["--samples", str(tmp_path / "missing.jsonl")], "no such samples file"),
                           (["--target", str(tmp_path / "nowhere")], "nowhere")):
        done = subprocess.run([sys.executable, "-m", "cli", "datastore", "--code", str(code),
                               "--out", str(tmp_path / "s.npz"), "--minutes", "0", *extra],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
