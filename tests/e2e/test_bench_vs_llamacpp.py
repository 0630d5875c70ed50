"""bench/vs_llamacpp.py and bench/llamacpp_replay.py at their smallest: a scaled-down real shape
(tiny-starcoder's family, on its StarCoder-sized tokenizer), llama.cpp's converter, the tests' -O0
llama-server, specfill's engine in its own process. Their figures mean nothing here (and the
models' text is noise): only that the table prints whole, and that bad options give one line."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from bench import vs_llamacpp
from bench.common import ROOT
from tests.e2e.remote import install_llama_server as install
from tests.e2e.test_cli_errors import assert_one_line_error
from tests.e2e.test_remote_llamacpp import llama_server_binary  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(7200)   # a first run builds llama-server

SHAPE = ["--shape", "tiny-starcoder", "--scaled", "--llama-build", "tests"]
NUMBER = r"\d+(\.\d+)?( / \d+(\.\d+)?)?"


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          cwd=str(ROOT), timeout=1800)


def cells(table: str, row: str) -> list[str]:
    line = next(x for x in table.splitlines() if x.startswith(f"| {row} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_side_by_side_table(llama_server_binary):  # noqa: F811
    r = run("bench.vs_llamacpp", *SHAPE, "--reps", "2", "--prompt-tokens", "48", "--new-tokens", "6",
            "--specfill", "dtype=float32", "--specfill", "dtype=bfloat16,lean=false", "--specfill", "dtype=float64")
    out = r.stdout
    assert r.returncode == 1, r.stderr[-3000:]          # the float64 row fails, the others are measured
    assert "random weights: the text is noise" in out and "the tests' -O0 build" in out
    labels = ["specfill dtype=float32", "specfill dtype=bfloat16 lean=False", "specfill dtype=float64",
              "llama.cpp f16", "llama.cpp q8_0"]
    assert out.count("| | " + " | ".join(labels) + " |") == 1
    for row in ("decode ms/token (best / median), 6 tokens", "prefill ms of 48 tokens",
                "load s (process start to first answer)", "resident MB, peak (VmHWM)", "resident MB, at the end (VmRSS)"):
        got = cells(out, row)
        assert got[2] == "failed", (row, got)
        for cell in got[:2] + got[3:]:
            assert re.fullmatch(NUMBER, cell), (row, got)
    for ref in ("f16", "q8_0"):
        got = cells(out, f"decode / llama.cpp {ref}")
        assert all(re.fullmatch(r"\d+\.\d\dx", c) for c in got[:2] + got[3:]), got
        assert got[3 if ref == "f16" else 4] == "1.00x"
    assert cells(out, "verify: w new tokens after the prompt, ms (best / median)") == [f"w={w}" for w in vs_llamacpp.WIDTHS]
    for label in labels[:2] + labels[3:]:
        assert all(re.fullmatch(NUMBER, c) for c in cells(out, label)), label
        assert cells(out, f"{label}, relative to w=1")[0] == "1.00x"
    failed = [x for x in out.splitlines() if x.startswith("- specfill dtype=float64: failed:")]
    assert len(failed) == 1 and "float64" in failed[0] and "not one of" in failed[0], out
    assert "evaluated" not in out        # llama-server computed exactly w tokens for each verify run


def test_a_baseline_runs_each_specfill_row_as_that_commit_does():
    r = run("bench.vs_llamacpp", *SHAPE, "--reps", "1", "--prompt-tokens", "48", "--new-tokens", "6",
            "--llama", "none", "--specfill", "dtype=float32", "--baseline", "HEAD")
    assert r.returncode == 0, r.stderr[-3000:]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    labels = ["specfill dtype=float32", f"{head} specfill dtype=float32"]
    assert r.stdout.count("| | " + " | ".join(labels) + " |") == 1
    for cell in cells(r.stdout, "decode ms/token (best / median), 6 tokens"):
        assert re.fullmatch(NUMBER, cell)


@pytest.mark.parametrize("args, expected", [
    (["--specfill", "quantize_mode=int8"], ["EngineConfig has no field 'quantize_mode'", "fields: dtype"]),
    (["--specfill", "dtype"], ["expected NAME=VALUE"]),
    (["--specfill", "target=other"], ["target is set by the bench"]),
    (["--specfill", "lean=maybe"], ["lean is true or false"]),
    (["--specfill", "max_sessions=many"], ["max_sessions is a whole number"]),
    (["--llama", "q4_k"], ["q4_k is not an outtype"]),
    (["--reps", "0"], ["--reps"]),
    (["--baseline", "no-such-commit"], ["--baseline no-such-commit: not a commit"]),
])
def test_bad_options_are_one_line(capsys, args, expected):
    assert_one_line_error(exit_code(["--shape", "tiny-starcoder", *args]), *capsys.readouterr(), *expected)


def test_a_missing_tests_build_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path))    # an empty cache: nothing built
    code = exit_code(SHAPE)
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, "the tests' llama-server is not built", str(install.cache_dir()))


def test_infill_replay_table(llama_server_binary):  # noqa: F811
    r = run("bench.llamacpp_replay", *SHAPE, "--max-files", "1", "--typed-lines", "2", "--new-tokens", "4")
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "random weights: the text is noise" in out and "APPROXIMATE" in out
    row = next(x for x in out.splitlines() if re.match(r"\| \d+ \|", x))
    requests, p50, p95, *rest = [c.strip() for c in row.strip("|").split("|")]
    assert int(requests) >= 2 and 0 < float(p50) <= float(p95)
    assert float(rest[3]) > 0            # tokens generated (median)


def exit_code(argv: list[str]) -> int:
    """main's exit code, whether it returns it or argparse exits with it."""
    try:
        return vs_llamacpp.main(argv)
    except SystemExit as e:
        return e.code
