"""`specfill distill` end to end on the tiny pair (a Llama target with a SentencePiece-style
tokenizer, a GPTBigCode draft with a byte-level one): the command writes the target's completions
of a folder of code, trains the draft on them, saves it, and its report shows held-out acceptance
(measured through the engine on files it never trained on) rising. Seeded, bounded by samples and
steps, not by time, so the run is the same on every machine speed."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

from tests.e2e.lsp_helpers import tiny_pair

# The user's code: stdlib modules the tiny pair was not trained on (tests/tiny_models.py).
import calendar, fnmatch, glob, gzip, sched, shlex, string  # noqa: E401,E402

USER_MODULES = (calendar, fnmatch, glob, gzip, shlex, string, sched)


def write_code(folder: Path, modules) -> Path:
    """The user's code: the modules' sources as files of one folder."""
    folder.mkdir()
    for module in modules:
        (folder / f"{module.__name__}.py").write_text(inspect.getsource(module), encoding="utf-8")
    return folder


def test_distill_raises_held_out_acceptance(tmp_path: Path):
    target, draft = tiny_pair()
    code = write_code(tmp_path / "code", USER_MODULES)
    out = tmp_path / "draft"
    done = subprocess.run(
        [sys.executable, "-m", "cli", "distill", "--target", target, "--draft", draft, "--code", str(code),
         "--out", str(out), "--held-out", "0.3", "--max-samples", "128", "--gen-minutes", "30",
         "--max-steps", "80", "--train-minutes", "30", "--batch-size", "16", "--lr", "3e-3",
         "--eval-positions", "8", "--eval-tokens", "24", "--threads", "1", "--seed", "0", "--device", "cpu"],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    log = done.stdout
    assert "[data]" in log and "[train] done: 80 steps" in log and "held-out acceptance" in log
    assert (out / "config.json").exists() and (out / "tokenizer.json").exists()
    info = json.loads((out / "distill_info.json").read_text())
    assert info["same_vocabulary"] is False and info["samples"] == 128
    assert info["held_out_files"] == 2 and info["training_files"] == 5
    report = info["report"]
    assert report["same_output"] is True      # both drafts leave the target's greedy text unchanged
    before, after = report["before"]["all"], report["after"]["all"]
    assert before["positions"] == after["positions"] == 16
    # Measured here: 0.02 -> 0.63 (the tiny draft was never trained on its target's habits).
    assert after["acceptance"] >= before["acceptance"] + 0.25, report
    assert after["tokens_per_target_call"] > before["tokens_per_target_call"], report
    # The report again, from the evaluation command alone: the same positions, the same figures.
    again = subprocess.run(
        [sys.executable, "-m", "training.distill_eval", "--target", target, "--draft", f"before={draft}",
         "--draft", f"after={out}", "--code", str(code), "--held-out", "0.3", "--seed", "0",
         "--eval-positions", "8", "--eval-tokens", "24", "--threads", "1", "--device", "cpu"],
        capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    for label, tally in (("before", before), ("after", after)):
        assert f"| {label}, all | 16 | {tally['acceptance']:.3f} |" in again.stdout, again.stdout


def test_a_data_worker_that_fails_ends_the_command_with_one_line_and_keeps_the_others_samples(tmp_path: Path):
    """`--gen-workers 2` where worker 1 cannot write its samples file (a folder is in its way):
    the command says so in one line naming the worker and exits 1; worker 0's samples stay in
    the work folder for a rerun."""
    target, draft = tiny_pair()
    code = write_code(tmp_path / "code", USER_MODULES)
    work = tmp_path / "work"
    (work / "samples.1.jsonl").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "cli", "distill", "--target", target, "--draft", draft, "--code", str(code),
         "--out", str(tmp_path / "draft"), "--work", str(work), "--held-out", "0.3", "--max-samples", "16",
         "--gen-minutes", "30", "--gen-workers", "2", "--gen-batch", "4", "--new-tokens", "8",
         "--threads", "1", "--seed", "0", "--device", "cpu"],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("specfill distill: data generation failed: worker 1 (") and "samples.1.jsonl" in last, last
    assert "IsADirectoryError" in done.stderr          # the worker's own error, above that line
    assert (work / "samples.jsonl").stat().st_size > 0 and not (tmp_path / "draft").exists()
