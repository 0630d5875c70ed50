"""engine/remote.py against servers that fail: a closed port, and a real HTTP server (the
standard library's) that answers the way a broken or misconfigured server does: 401, 404,
500, malformed JSON, a stream cut off, no answer at all. llama.cpp itself cannot be made to
send these; tests/e2e/test_remote_llamacpp.py runs the real one. Also the settings' secrecy."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest
from engine.remote import (PROBE_EXTRA, Health, InfillPrompt, RemoteEngine, RemoteError, RemoteSettings, RemoteTarget,
                           ServerInfo, TextPrompt, infill_indent)
from engine.settings import GenerationSettings
from lsp.settings import Settings, SettingsError, parse_settings

PROPS = {"default_generation_settings": {"n_ctx": 512}, "model_path": "m.gguf", "total_slots": 1}


class Behaviour:
    """What the test server does on the next requests (set by each test)."""
    status = 200
    stream: list[bytes] = []
    hang_s = 0.0
    infill_status = 200
    infill_answer: dict = {"content": "", "stop": True}

    def __init__(self):
        self.bodies: list[tuple[str, dict]] = []    # (path, JSON body) of every POST


class Handler(BaseHTTPRequestHandler):
    behaviour = Behaviour()

    def log_message(self, *args):   # keep pytest's output clean
        pass

    def _json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        b = self.behaviour
        if b.hang_s:
            time.sleep(b.hang_s)
        if b.status != 200:
            return self._json(b.status, {"error": {"code": b.status, "message": "Invalid API Key"
                                                   if b.status == 401 else "boom", "type": "x"}})
        if self.path == "/props":
            return self._json(200, PROPS)
        return self._json(404, {"error": {"message": "File Not Found"}})

    def do_POST(self):
        b = self.behaviour
        b.bodies.append((self.path, json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))))
        if self.path == "/infill" and b.stream == []:
            return self._json(b.infill_status, b.infill_answer)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for chunk in b.stream:
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def http_server():
    Handler.behaviour = Behaviour()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", Handler.behaviour
    srv.shutdown()
    srv.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settings(url, **kw):
    return RemoteSettings(url=url, backend="llamacpp", connect_timeout_s=2.0, read_timeout_s=kw.pop("read", 5.0), **kw)


def test_closed_port_is_unreachable():
    with pytest.raises(RemoteError) as e:
        RemoteTarget(settings(f"http://127.0.0.1:{free_port()}")).probe()
    assert e.value.kind == "unreachable" and "cannot reach" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("status,kind,words", [(401, "auth", "API key was refused"), (403, "auth", "403"),
                                               (500, "server_error", "server error 500"),
                                               (503, "server_error", "503")])
def test_http_errors_have_their_kind(http_server, status, kind, words):
    url, b = http_server
    b.status = status
    with pytest.raises(RemoteError) as e:
        RemoteTarget(settings(url, api_key="sekrit-key-123")).probe()
    assert e.value.kind == kind and words in str(e.value)
    assert "sekrit" not in str(e.value) and "\n" not in str(e.value)


def test_not_found(http_server):
    url, _ = http_server
    with pytest.raises(RemoteError) as e:
        RemoteTarget(RemoteSettings(url=url, backend="openai")).probe()   # no /v1/models here
    assert e.value.kind == "not_found" and "404" in str(e.value)


def test_read_timeout(http_server):
    url, b = http_server
    b.hang_s = 2.0
    with pytest.raises(RemoteError) as e:
        RemoteTarget(settings(url, read=0.3)).probe()
    assert e.value.kind == "timeout" and "0.3 s" in str(e.value)


def stream_text(url, chunks):
    target = RemoteTarget(settings(url))
    target.probe()
    return "".join(target.stream(TextPrompt("x"), GenerationSettings(max_new_tokens=8)))


def test_malformed_json_in_the_stream(http_server):
    url, b = http_server
    b.stream = [b'data: {"content": "a", "stop": false}\n\n', b'data: {"content": "b", \n\n']
    with pytest.raises(RemoteError) as e:
        stream_text(url, b.stream)
    assert e.value.kind == "bad_response" and "malformed JSON" in str(e.value)


def test_truncated_stream(http_server):
    url, b = http_server
    b.stream = [b'data: {"choices": [{"text": "a", "finish_reason": null}]}\n\n']   # then the connection ends
    with pytest.raises(RemoteError) as e:
        stream_text(url, b.stream)
    assert e.value.kind == "bad_response" and "truncated" in str(e.value)


def test_complete_stream(http_server):
    url, b = http_server
    b.stream = [b'data: {"choices": [{"text": "ab", "finish_reason": null}]}\n\n',
                b'data: {"choices": [{"text": "c", "finish_reason": "stop"}]}\n\n', b"data: [DONE]\n\n"]
    assert stream_text(url, b.stream) == "abc"


def test_pipeline_tells_once_per_kind_answers_empty_and_recovers(http_server):
    url, b = http_server
    told = []
    pipe = CompletionPipeline(RemoteEngine(settings(url)))
    pipe.on_message = lambda m, err: told.append((m, err))
    opts = CompletionOptions(max_new_tokens=8, fim_template="codellama")
    req = CompletionRequest("file:///a.py", "def f():\n    return ", 1, 11)
    b.status = 500
    assert pipe.complete(req, opts) is None and pipe.complete(req, opts) is None
    assert len(told) == 1 and told[0][1] and "server error 500" in told[0][0]
    b.status = 401
    assert pipe.complete(req, opts) is None
    assert len(told) == 2 and "401 no API key was sent" in told[1][0]
    b.status = 200
    b.stream = [b'data: {"content": "1", "stop": false}\n\n', b'data: {"content": "\\n", "stop": true}\n\n']
    c = pipe.complete(req, opts)
    assert c is not None and c.text == "1"
    assert told[-1] == (f"remote target {url} answers again", False)


def test_bad_settings_are_one_line():
    with pytest.raises(RemoteError, match="expected an http"):
        RemoteSettings(url="ftp://x")
    with pytest.raises(RemoteError, match="backend"):
        RemoteSettings(url="http://x", backend="tgi")
    with pytest.raises(RemoteError, match="CA bundle"):
        RemoteSettings(url="https://x", ca_bundle="/nonexistent/ca.pem")


def test_api_key_is_never_shown(monkeypatch):
    s = parse_settings({"targetModel": "http://h:1", "remote": {"apiKey": "sekrit-key-123"}}, Settings())
    assert "sekrit" not in repr(s) and "sekrit" not in json.dumps(s.to_dict())
    assert s.remote.apiKey == "sekrit-key-123" and s.to_dict()["remote"]["apiKey"] == "(set)"
    r = RemoteSettings(url="http://h:1", api_key="sekrit-key-123")
    assert "sekrit" not in repr(r)
    monkeypatch.setenv("TEAM_KEY", "from-env")
    assert RemoteSettings(url="http://h:1", api_key_env="TEAM_KEY").key() == "from-env"
    assert parse_settings({"remote": {"apiKey": ""}}, s).remote.apiKey == ""
    with pytest.raises(SettingsError) as err:   # a bad value never shows a key either
        parse_settings({"remote": {"apiKey": 12345}}, Settings())
    assert "12345" not in str(err.value) and "(set)" in str(err.value)


# llama.cpp's answers to the probe (tools/server: the model's FIM tokens are checked before the body)
NOT_A_LIST = {"error": {"code": 400, "message": '"input_extra" must be an array of {"filename": string, "text": string}',
                        "type": "invalid_request_error"}}
NO_FIM = {"error": {"code": 501, "message": "Infill is not supported by this model: prefix token is missing. ",
                    "type": "not_supported_error"}}


@pytest.mark.parametrize("status,answer,fim", [(400, NOT_A_LIST, True), (501, NO_FIM, False),
                                               (200, {"content": "", "stop": True}, True),
                                               (400, {"error": {"message": "Infill is not supported"}}, False)])
def test_probe_asks_infill_with_a_body_refused_before_any_task(http_server, status, answer, fim):
    url, b = http_server
    b.infill_status, b.infill_answer = status, answer
    assert RemoteTarget(settings(url)).probe().fim is fim
    (path, body), = b.bodies
    assert path == "/infill" and body["input_extra"] == PROBE_EXTRA and body["n_predict"] == 0


def test_infill_indent_is_the_cursor_lines_indentation_in_characters():
    assert infill_indent("def f():\n    return ", "") == 4
    assert infill_indent("def f():\n        ", "\n") == 8          # the cursor in blank indentation
    assert infill_indent("class A:\n\tdef f(self):\n\t\tx = ", "") == 2   # a tab is one character
    assert infill_indent("x = ", "") == 0 and infill_indent("", "") == 0
    # a space-indented cursor line among tab-indented lines: a tab would stop lines the
    # dedent rule keeps (it counts a tab as several columns), so no limit
    assert infill_indent("if x:\n\ty = 1\n    z = ", "") == 0
    assert infill_indent("if x:\n    y = 1\n    z = ", "\n\tw = 2") == 0
    assert infill_indent("if x:\n\ty = 1\n\tz = ", "") == 1                  # tabs only: safe


def test_infill_request_carries_n_indent(http_server):
    url, b = http_server
    b.stream = [b'data: {"content": "1", "stop": true}\n\n']
    target = RemoteTarget(settings(url))
    target.info = ServerInfo("llamacpp", fim=True)     # probing is tested above
    gen = GenerationSettings(max_new_tokens=8)
    assert "".join(target.stream(InfillPrompt("def f():\n    return ", ""), gen)) == "1"
    assert "".join(target.stream(InfillPrompt("def f():\n    return ", "", indent=0), gen)) == "1"
    assert [body["n_indent"] for path, body in b.bodies if path == "/infill"] == [4, 0]


def test_health_sends_each_change_of_status_once():
    sent = []
    health = Health(backend="remote", url="http://gpu:8080", listener=sent.append)
    assert health.status() == {"backend": "remote", "url": "http://gpu:8080", "state": "ok", "kind": "", "message": ""}
    down = RemoteError("unreachable", "cannot reach http://gpu:8080/infill: refused")
    health.failed(down)
    health.failed(down)                      # the same failure again: no news
    health.failed(RemoteError("auth", "http://gpu:8080/infill: 401 the API key was refused"))
    health.worked()
    health.worked()
    assert [(st["state"], st["kind"]) for st in sent] == [("error", "unreachable"), ("error", "auth"), ("ok", "")]
    assert sent[0]["message"] == "cannot reach http://gpu:8080/infill: refused" and sent[2]["message"] == ""


def test_a_failing_listener_does_not_break_a_completion():
    def broken(status):
        raise RuntimeError("client gone")
    health = Health(backend="remote", url="http://gpu:8080", listener=broken)
    assert health.failed(RemoteError("timeout", "no answer")) is True and health.worked() is True


def test_check_at_start_up_probes_and_tells_as_a_request_would(http_server):
    url, b = http_server
    told, sent = [], []
    engine = RemoteEngine(settings(url))
    engine.health.listener = sent.append
    b.status = 401
    engine.check(lambda m, err: told.append((m, err)))
    assert len(told) == 1 and told[0][1] and "401" in told[0][0] and sent[-1]["kind"] == "auth"
    b.status = 200
    engine.check(lambda m, err: told.append((m, err)))
    assert told[-1] == (f"remote target {url} answers again", False) and sent[-1]["state"] == "ok"
    assert [path for path, _ in b.bodies] == ["/infill"]     # the probe's refused body, no completion
