"""specfill/nextEdit with a remote edit model: the real language server over stdio, `nextEdit` the
URL of a real llama-server (tests/e2e/remote/) serving a GGUF of a random-weight model of
Qwen2.5-Coder's shape and tokenizer (bench/real_shapes.py, scaled down; converted by llama.cpp's
own converter). Between the two sits a recording proxy (a plain HTTP relay), so the test sees the
body the server got and the answer it sent back. Random weights write nothing useful: this
checks the format and the plumbing (the prompt that reaches `/v1/completions`, its sentinels read
as the model's special tokens, the answer parsed as the format says), not the quality."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from lsprotocol import types

from completion.context import parse_document, uri_to_path
from completion.edit_formats import FORMATS
from completion.edit_history import EditHistory
from completion.next_edit import parse_answer, prompt_parts, prompt_text
from lsp import commands
from tests.e2e.lsp_helpers import change_doc, open_doc, push_settings, stats, tiny_server, wait_for_setting
from tests.e2e.remote import install_llama_server as install
from tests.e2e.remote.server import LlamaServer

# The first run builds llama-server (tens of minutes on two shared cores); later runs reuse it.
pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(7200)]

DOC = ("import math\n\n\ndef area(width, height):\n    result = width * height\n    return result\n\n\n"
       "def perimeter(width, height):\n    total = 2 * (width + height)\n    return total\n")
# three edits: (range start, range end, new text), each applied to the text before it
EDITS = [((3, 9), (3, 14), "w"), ((4, 13), (4, 18), "w"), ((5, 17), (5, 17), "  # area")]
CURSOR = (4, 8)


class Recorder:
    """An HTTP relay to `upstream` that keeps every request's path and JSON body and the body
    of each answer."""

    def __init__(self, upstream: str):
        self.upstream, self.exchanges = upstream, []
        recorder = self

        class Relay(BaseHTTPRequestHandler):
            def _relay(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                r = httpx.request(method, recorder.upstream + self.path, content=body or None, timeout=120,
                                  headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
                recorder.exchanges.append((self.path, json.loads(body) if body else None, r.text))
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            def do_GET(self):    # noqa: N802 - http.server's names
                self._relay("GET")

            def do_POST(self):   # noqa: N802
                self._relay("POST")

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def completions(self) -> list[tuple[dict, str]]:
        return [(body, answer) for path, body, answer in self.exchanges if path == "/v1/completions"]

    def stop(self) -> None:
        self.http.shutdown()


@pytest.fixture(scope="module")
def served():
    from bench import real_shapes
    from bench.vs_llamacpp import convert

    try:
        binary = install.install(log=print)
    except install.BuildToolMissing as e:
        pytest.skip(f"llama.cpp server cannot be built here: {e}")
    try:
        shape = real_shapes.scaled("qwen2.5-coder-0.5b")
        model = real_shapes.model_dir(shape, log=print)
    except real_shapes.ShapeError as e:
        pytest.skip(f"the Qwen2.5-Coder shape cannot be built here: {e}")
    gguf = convert(model, shape, "f32", install.sources_path(), install.cache_dir().parent / "gguf", log=print)
    server = LlamaServer(binary, gguf, ctx=2048).start()
    relay = Recorder(server.url)
    yield server, relay
    relay.stop()
    server.stop()


client = tiny_server()


def edited_text(uri: str) -> tuple[str, EditHistory]:
    """DOC after EDITS, and the history the server keeps of them (the same grouping rules)."""
    history, text = EditHistory(), DOC
    for (sl, sc), (el, ec), new in EDITS:
        lines = text.split("\n")
        start = sum(len(x) + 1 for x in lines[:sl]) + sc
        end = sum(len(x) + 1 for x in lines[:el]) + ec
        after = text[:start] + new + text[end:]
        history.changed("k", uri_to_path(uri), text, after, (sl, el, sl + new.count("\n")))
        text = after
    return text, history


@pytest.mark.parametrize("fmt", ["zeta", "sweep"])
async def test_the_formats_prompt_reaches_v1_completions_and_the_answer_is_parsed(client, served, fmt):
    server, relay = served
    push_settings(client, {"nextEdit": relay.url, "nextEditFormat": fmt})
    await wait_for_setting(client, "nextEditFormat", fmt)
    uri = f"file:///work/{fmt}/next_edit_remote.py"
    open_doc(client, uri, DOC)
    for version, (start, end, new) in enumerate(EDITS, start=2):
        change_doc(client, uri, version, start, end, new)
    seen = len(relay.completions())
    answer = await client.protocol.send_request_async(commands.NEXT_EDIT, {
        "textDocument": {"uri": uri}, "position": {"line": CURSOR[0], "character": CURSOR[1]}})
    last = (await stats(client))["nextEdit"]["last"]
    assert last.get("format") == fmt, last
    # The prompt the server got is the format's, built from the document and its edits.
    [(body, raw)] = relay.completions()[seen:]
    text, history = edited_text(uri)
    parts = prompt_parts(uri, parse_document(text, *CURSOR), FORMATS[fmt], history, "k")
    assert body["prompt"] == prompt_text(FORMATS[fmt], parts) == last["prompt"]
    assert body["temperature"] == 0 and body["max_tokens"] > 0 and body["stream"] is True
    assert body["stop"] == [s for s in FORMATS[fmt].stops]
    # Its sentinels are the model's special tokens there (sweep's <|file_sep|> is one token).
    if last["prompt_tokens"]:
        assert last["prompt_tokens"] == len(server.tokenize_special(body["prompt"]))
    # The answer is the text the server streamed (up to where the format's end stopped it), and
    # it is parsed as the format says.
    streamed = "".join(json.loads(line[5:]).get("choices", [{}])[0].get("text") or ""
                       for line in raw.splitlines() if line.startswith("data:") and line[5:].strip() != "[DONE]")
    assert streamed.startswith(last["answer"]) and last["answer"]
    parsed = parse_answer(FORMATS[fmt], last["answer"], last["stop_reason"], parts.region)
    assert (parsed.rewrite, parsed.verdict if parsed.rewrite is None else "rewrite") == \
        (last["rewrite"], last["verdict"] if last["verdict"] != "same" else "rewrite")
    assert (answer is None) == (parsed.rewrite is None or parsed.rewrite == parts.region.text)
    # closed, its edits leave the history the next test's prompt shows
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
