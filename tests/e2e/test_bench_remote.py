"""bench/remote.py at its smallest: two editors, each its own `specfill serve` over stdio, typing
one line into one real llama-server with two slots. Figures are for the benchmark; here only that
it works: no errors, every editor answered, and the server's prompt cache was used."""
from __future__ import annotations

import asyncio

import pytest

from bench import remote
from bench.common import DEFAULT_FILES, server_env
from bench.replay import python_files
from tests.e2e.test_cli_errors import assert_one_line_error
from tests.e2e.test_remote_llamacpp import llama_server_binary, target_gguf  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(7200)   # a first run builds llama-server


def test_two_editors_typing_into_one_llama_server(llama_server_binary, target_gguf):  # noqa: F811
    server = remote.llama_server(slots=2, threads=1, ctx=512)
    try:
        rows, reuse = asyncio.run(remote.load_run(server.url, editors=2, files=python_files(DEFAULT_FILES)[:1],
                                                  typed_lines=1, time_scale=0.0, max_new_tokens=16,
                                                  env=server_env(1)))
    finally:
        server.stop()
    assert [r["editor"] for r in rows] == ["editor-1", "editor-2"]
    for r in rows:
        assert r["errors"] == 0 and r["error_messages"] == [], r
        assert r["requests"] >= 2 and r["answered"] >= 1 and r["remote_runs"] >= 1, r
        assert r["p50_ms"] is not None
    # both editors type the same file: consecutive prompts share their prefix window
    assert reuse["prompt_tokens_cached"] > 0 and reuse["prompt_tokens_evaluated"] > 0
    assert reuse["tokens_predicted"] > 0
    table = remote.load_table(rows, reuse, "meta")
    assert "Errors: 0 (goal: none)" in table


def test_a_missing_llama_server_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path))    # an empty cache: nothing built
    code = remote.main(["--editors", "2", "--skip-eol"])
    out, err = capsys.readouterr()
    assert_one_line_error(code, out, err, "llama-server is not built",
                          "run python -m tests.e2e.remote.install_llama_server first")
