"""`specfill generate --target URL` against a real llama.cpp server serving the shipped target
(the fixtures of test_remote_llamacpp.py: llama-server built once and cached, the f32 GGUF),
and its one-line errors (exit code 2) for every kind of remote failure. The failures llama.cpp
cannot be made to produce (a 5xx, malformed JSON, a stream cut off) come from the standard
library's HTTP server of tests/unit/test_engine_remote.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.e2e.remote.server import LlamaServer, free_port
from tests.e2e.test_cli_errors import SPECFILL, assert_one_line_error, in_process
from tests.e2e.lsp_helpers import ROOT, SERVER_ENV
from tests.e2e.test_remote_llamacpp import (BOS, llama_server_binary, local, local_greedy,  # noqa: F401 (fixtures)
                                            server, target_gguf)
from tests.unit.test_engine_remote import http_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(7200)   # a first run builds llama-server

PROMPT = 'import json\n\n\ndef load(path):\n    """Read a JSON file."""\n    with open(path) as f:\n        '


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("generate") / "prompt.py"
    path.write_text(PROMPT, encoding="utf-8")
    return str(path)


def generate(capsys, url: str, prompt_file: str, *args: str) -> tuple[int, str, str]:
    return in_process(["generate", "--target", url, "--prompt-file", prompt_file, *args], capsys)


def test_generate_prints_the_servers_greedy_text(server, local, prompt_file):  # noqa: F811
    """The real command, as a user runs it: the text is the target's greedy continuation of
    the ids the server made of the prompt (same weights, f32)."""
    want = local_greedy(local, [BOS] + server.tokenize(PROMPT), 24)
    assert want.strip()
    proc = subprocess.run([*SPECFILL, "generate", "--target", server.url, "--prompt-file", prompt_file,
                           "--max-new-tokens", "24"], capture_output=True, text=True, env=SERVER_ENV,
                          cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == want + "\n"
    assert "24 tokens" in proc.stderr or "stop: eos" in proc.stderr
    assert f"from {server.url} (llamacpp)" in proc.stderr


def test_json_gives_the_remote_stats_and_both_protocols_agree(server, local, prompt_file, capsys):  # noqa: F811
    want = local_greedy(local, [BOS] + server.tokenize(PROMPT), 16)
    runs = {}
    for backend in ("llamacpp", "auto", "openai"):
        code, out, err = generate(capsys, server.url, prompt_file, "--max-new-tokens", "16",
                                  "--backend", backend, "--json")
        assert code == 0, err
        runs[backend] = json.loads(out)
    for backend, r in runs.items():
        assert r["text"] == want, backend
        s = r["stats"]
        assert s["url"] == server.url and s["model"].endswith(".gguf")
        assert s["backend"] == ("openai" if backend == "openai" else "llamacpp")
        assert s["new_tokens"] == 16 or r["stop_reason"] == "eos"
        assert s["prompt_tokens"] == 1 + len(server.tokenize(PROMPT))
    # the same prompt again: the server's prompt cache holds all of it but the last token (the
    # openai backend's probe is /v1/models; the others' /infill probe takes the one slot's cache)
    assert runs["openai"]["stats"]["cached_prompt_tokens"] >= runs["openai"]["stats"]["prompt_tokens"] - 1


def test_api_key_from_the_environment(llama_server_binary, target_gguf, prompt_file, capsys, monkeypatch):  # noqa: F811
    keyed = LlamaServer(llama_server_binary, target_gguf, api_key="team-key-9431").start()
    try:
        monkeypatch.setenv("SPECFILL_TEST_KEY", "team-key-9431")
        code, out, err = generate(capsys, keyed.url, prompt_file, "--max-new-tokens", "8", "--json",
                                  "--set", "remote.apiKeyEnv=SPECFILL_TEST_KEY")
        assert code == 0, err
        assert "team-key" not in out and json.loads(out)["stats"]["new_tokens"] >= 1

        monkeypatch.setenv("SPECFILL_TEST_KEY", "wrong-key-1177")
        code, out, err = generate(capsys, keyed.url, prompt_file, "--set", "remote.apiKeyEnv=SPECFILL_TEST_KEY")
        assert_one_line_error(code, out, err, "401", "the API key was refused", "apiKeyEnv")
        assert "wrong-key" not in err

        code, out, err = generate(capsys, keyed.url, prompt_file)
        assert_one_line_error(code, out, err, "401", "no API key was sent")
    finally:
        keyed.stop()


def test_unreachable_server(prompt_file, capsys):
    code, out, err = generate(capsys, f"http://127.0.0.1:{free_port()}", prompt_file)
    assert_one_line_error(code, out, err, "specfill generate: cannot reach http://127.0.0.1:")


def test_not_found(server, prompt_file, capsys):  # noqa: F811
    code, out, err = generate(capsys, f"{server.url}/no/such/api", prompt_file, "--backend", "openai")
    assert_one_line_error(code, out, err, "/no/such/api/v1/models: 404 not found", "check targetModel and backend")


def test_prompt_longer_than_the_servers_context(server, tmp_path, capsys):  # noqa: F811
    long = tmp_path / "long.py"
    long.write_text("x = [" + ", ".join(str(i) for i in range(2000)) + "]\n", encoding="utf-8")
    code, out, err = generate(capsys, server.url, str(long), "--max-new-tokens", "8")
    assert_one_line_error(code, out, err, f"{server.url}/v1/completions: 400", "context")


def test_read_timeout_on_a_stopped_server(llama_server_binary, target_gguf, prompt_file, capsys):  # noqa: F811
    """A server that accepts the connection (the kernel does) but never answers."""
    s = LlamaServer(llama_server_binary, target_gguf).start()
    try:
        os.kill(s.proc.pid, signal.SIGSTOP)
        code, out, err = generate(capsys, s.url, prompt_file, "--set", "remote.readTimeoutMs=500")
        assert_one_line_error(code, out, err, "no answer within 0.5 s (read timeout)")
        os.kill(s.proc.pid, signal.SIGCONT)
        code, out, err = generate(capsys, s.url, prompt_file, "--max-new-tokens", "4")
        assert code == 0, err
    finally:
        os.kill(s.proc.pid, signal.SIGCONT)
        s.stop()


@pytest.mark.parametrize("status,words", [(500, "server error 500: boom"), (503, "server error 503")])
def test_server_errors(http_server, prompt_file, capsys, status, words):  # noqa: F811
    url, behaviour = http_server
    behaviour.status = status
    code, out, err = generate(capsys, url, prompt_file)
    assert_one_line_error(code, out, err, words)


@pytest.mark.parametrize("stream,words", [
    ([b'data: {"content": "a", "stop": false}\n\n', b'data: {"content": "b", \n\n'], "malformed JSON in the stream"),
    ([b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n'], "the stream ended before the answer did"),
])
def test_bad_answers(http_server, prompt_file, capsys, stream, words):  # noqa: F811
    url, behaviour = http_server
    behaviour.stream = stream
    code, out, err = generate(capsys, url, prompt_file, "--backend", "llamacpp")
    assert_one_line_error(code, out, err, words)


@pytest.mark.parametrize("args,words", [
    (["--set", "remote.caBundle=/no/such/ca.pem"], "CA bundle '/no/such/ca.pem' is not a file"),
    (["--backend", "tgi"], "invalid choice: 'tgi'"),
    (["--set", "prefixTokens=512"], "--set prefixTokens: not a remote target's setting"),
    (["--set", "remote.readTimeoutMs=5"], "remote.readTimeoutMs"),
    (["--set", "apiKeyEnv=TEAM_KEY"], "specfill.apiKeyEnv is no longer a setting: it is specfill.remote.apiKeyEnv"),
    (["--draft", "ngram"], "--draft chooses local models"),
    (["--device", "cpu"], "--device chooses local models"),
])
def test_settings_that_cannot_work(prompt_file, capsys, args, words):
    code, out, err = generate(capsys, f"http://127.0.0.1:{free_port()}", prompt_file, *args)
    assert_one_line_error(code, out, err, words)


def test_remote_options_need_a_remote_target(prompt_file, capsys):
    code, out, err = in_process(["generate", "--prompt-file", prompt_file, "--backend", "openai"], capsys)
    assert_one_line_error(code, out, err, "--backend is for a remote target")
