"""Smoke test of the accept-latency benchmark: accept chains on one small file through two real
servers (tiny pair, over stdio), with and without prefetch. Checks what the table says about
where answers came from and that they agree, never how fast they were."""
from __future__ import annotations

import re

import pytest

from bench import accept_latency
from tests.e2e.lsp_helpers import tiny_pair
from tests.e2e.test_bench import small_files


@pytest.mark.timeout(600)   # includes building the tiny pair when no other test has
def test_accept_chains_are_answered_from_the_prefetch_and_agree(tmp_path):
    target, draft = tiny_pair()
    files = small_files(tmp_path)
    out = tmp_path / "table.md"
    rc = accept_latency.main(["--files", str(files), "--per-file", "2", "--accepts", "2", "--think-ms", "50",
                              "--target", target, "--draft", draft, "--max-new-tokens", "16",
                              "--out", str(out)])
    assert rc == 0
    rows = {m[0]: m[1:] for m in re.findall(
        r"^\| (prefetch|no prefetch) \| (\d+) \| \d+ \| \d+ \| (\d+)/(\d+) \| (\d+)/(\d+) \| (\d+) / (\d+) / (\d+) / (\d+) \|$",
        out.read_text(), re.M)}
    assert set(rows) == {"prefetch", "no prefetch"}
    (n, hits, n1, same, n2, run, used, joined, cancelled) = map(int, rows["prefetch"])
    assert n > 0 and n == n1 == n2 == same
    # Every answer after an accept came from the cache (ready in time, or waited for), and the
    # same text as without prefetch.
    assert hits == n and used + joined >= n and cancelled == 0
    (n_off, hits_off, _, same_off, _, run_off, *_rest) = map(int, rows["no prefetch"])
    assert n_off == n and same_off == n and hits_off == 0 and run_off == 0
