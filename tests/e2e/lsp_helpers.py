"""Shared pieces of the language-server tests: hand-built client capabilities, a server command,
a test client that remembers its open documents and the server's exit code, the pytest-lsp
fixture of a server on the tiny pair, a reset that puts a shared server back to a known state,
and waits on what the real server process reports."""
from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import threading
from pathlib import Path

from lsprotocol import types
from pygls.protocol import default_converter
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import register_lsp_features

from lsp import commands

ROOT = Path(__file__).resolve().parents[2]
SERVER_COMMAND = [sys.executable, "-m", "lsp", "--log-level", "info"]
SERVER_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false"}


class TestClient(LanguageClient):
    """pytest-lsp's client, plus what the tests ask of it: the documents it has open (so a
    reset can close them) and the server's exit code (from pygls' public exit hook)."""

    __test__ = False   # not a test class, whatever pytest makes of the name

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.open_documents: set[str] = set()
        self.exit_code: int | None = None

    def text_document_did_open(self, params: types.DidOpenTextDocumentParams) -> None:
        self.open_documents.add(params.text_document.uri)
        super().text_document_did_open(params)

    def text_document_did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        self.open_documents.discard(params.text_document.uri)
        super().text_document_did_close(params)

    async def server_exit(self, server) -> None:
        self.exit_code = server.returncode
        await super().server_exit(server)


def make_client() -> TestClient:
    """A TestClient answering the server's requests as pytest-lsp's own client does."""
    client = TestClient(converter_factory=default_converter)
    register_lsp_features(client)
    return client


def server_command(options: dict | None = None) -> list[str]:
    """SERVER_COMMAND with server options (`--option NAME=VALUE`: lsp/settings.py Options)."""
    args = [f"{name}={json.dumps(value) if isinstance(value, bool) else value}"
            for name, value in (options or {}).items()]
    return SERVER_COMMAND + [a for arg in args for a in ("--option", arg)]


def server_config(client_factory=make_client, options: dict | None = None) -> ClientServerConfig:
    """pytest-lsp's way to start the real server over stdio (SERVER_COMMAND, with `options`) and
    its client."""
    return ClientServerConfig(server_command=server_command(options), server_env=SERVER_ENV,
                              client_factory=client_factory)


def capabilities(encoding: str = "utf-16", configuration: bool = True,
                 progress: bool = True) -> types.ClientCapabilities:
    """What an editor with inline completion declares (pytest-lsp's profiles lack it)."""
    return types.ClientCapabilities(
        general=types.GeneralClientCapabilities(
            position_encodings=[types.PositionEncodingKind(encoding)]),
        workspace=types.WorkspaceClientCapabilities(
            configuration=configuration,
            did_change_configuration=types.DidChangeConfigurationClientCapabilities(),
            execute_command=types.ExecuteCommandClientCapabilities()),
        window=types.WindowClientCapabilities(work_done_progress=progress),
        text_document=types.TextDocumentClientCapabilities(
            synchronization=types.TextDocumentSyncClientCapabilities(),
            inline_completion=types.InlineCompletionClientCapabilities(),
            completion=types.CompletionClientCapabilities()),
    )


def init_params(options: dict | None, **caps) -> types.InitializeParams:
    return types.InitializeParams(capabilities=capabilities(**caps), initialization_options=options,
                                  root_uri=ROOT.as_uri())


def tiny_pair() -> tuple[str, str]:
    # SPECFILL_TINY_PAIR=DIR (with target/ and draft/ saved by tiny_pair_dirs) skips rebuilding
    # the pair on every run while iterating; by default it is built once per session.
    saved = os.environ.get("SPECFILL_TINY_PAIR")
    if saved:
        return str(Path(saved) / "target"), str(Path(saved) / "draft")
    from tests.tiny_models import tiny_pair_dirs

    return tiny_pair_dirs()


def tiny_options(**extra) -> dict:
    target, draft = tiny_pair()
    # extraTokens 0: no context from other open documents, so a prompt depends only on its own
    # document and the server's answer can be compared with `reference`.
    return {"targetModel": target, "draftModel": draft, "device": "cpu", "dtype": "float32",
            "extraTokens": 0, **extra}


@functools.lru_cache(maxsize=None)
def _reference_backend():
    from lsp.backend import load_backend
    from lsp.settings import settings_from

    return load_backend(settings_from(tiny_options()))


def reference(uri: str, text: str, line: int, character: int, **settings) -> str:
    """What the completion pipeline itself (in this process, same tiny pair) answers at a
    codepoint position with `settings` (server options among them): the server must answer the
    same."""
    from lsp.backend import completion_options, completion_request
    from lsp.settings import settings_from

    loaded = _reference_backend()
    options = completion_options(settings_from({**tiny_options(), **settings}))
    completion = loaded.pipeline.complete(completion_request(uri, text, line, character), options,
                                          cancel=threading.Event())
    return completion.text if completion is not None else ""


def tiny_server(pulled: dict | None = None, **settings):
    """A module-scoped pytest-lsp fixture: the real server over stdio, initialized with
    `tiny_options(**settings)` (its result kept as `init_result`), the models loaded; shut down
    after the module. Server options among `settings` go on its command line. With `pulled`, the
    client answers workspace/configuration with it. The fixture takes the name it is assigned
    to: `client = tiny_server(maxNewTokens=16)`."""
    from lsp.settings import split_options

    section, options = split_options(tiny_options(**settings))

    @pytest_lsp.fixture(scope="module", config=server_config(options=options))
    async def started(lsp_client: LanguageClient):
        if pulled is not None:
            lsp_client.set_configuration(dict(pulled), section="specfill")
        lsp_client.init_result = await lsp_client.initialize_session(init_params(section))
        await wait_loaded(lsp_client)
        yield
        await lsp_client.shutdown_session()
    return started


async def wait_until(predicate, timeout: float = 90.0, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def ended_loads(client) -> list[types.WorkDoneProgressEnd]:
    return [v for reports in client.progress_reports.values() for v in reports
            if isinstance(v, types.WorkDoneProgressEnd)]


async def wait_loaded(client, count: int = 1, timeout: float = 90.0) -> str:
    """Wait for the `count`-th model-load progress to end; returns its message."""
    await wait_until(lambda: len(ended_loads(client)) >= count, timeout, "model load progress end")
    return ended_loads(client)[count - 1].message or ""


def open_doc(client, uri: str, text: str, version: int = 1, language: str = "python") -> None:
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))


def change_doc(client, uri: str, version: int, start: tuple[int, int], end: tuple[int, int],
               text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(*start), end=types.Position(*end)), text=text)]))


def inline_params(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


async def inline(client, uri: str, line: int, character: int):
    return await client.text_document_inline_completion_async(inline_params(uri, line, character))


def items(result) -> list:
    if result is None:
        return []
    return list(result.items if hasattr(result, "items") else result)


async def stats(client) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands.STATS))


async def reset(client: TestClient, settings: dict, timeout: float = 90.0) -> None:
    """Put a shared server back where a test expects it: no open documents, exactly `settings`
    in force (every other setting at its default, also for a later configuration pull), the
    models those settings name loaded, nothing in flight. (Server options are the server's own,
    from its command line: `tiny_server`.)"""
    from lsp.settings import Settings, parse_settings

    for uri in list(client.open_documents):
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
    wanted = parse_settings(settings, Settings()).to_dict()
    client.set_configuration(dict(settings), section="specfill")
    push_settings(client, wanted)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        s = await stats(client)
        if (s["settings"] == wanted and s["models"]["loaded"] and not s["models"]["loading"]
                and not s["inflight"] and not s["workerBusy"] and not s["openDocuments"]
                and not s["oversizedDocuments"]):
            return
        if loop.time() > deadline:
            raise AssertionError(f"the server did not come back to the test settings: {s}")
        await asyncio.sleep(0.05)


async def wait_for_setting(client, name: str, value, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (await stats(client))["settings"][name] != value:
        if loop.time() > deadline:
            raise AssertionError(f"setting {name} never became {value!r}")
        await asyncio.sleep(0.02)


async def wait_until_idle(client, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (s := await stats(client))["inflight"] or s["workerBusy"]:
        if loop.time() > deadline:
            raise AssertionError("server never became idle")
        await asyncio.sleep(0.02)


def push_settings(client, section: dict | None) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"specfill": section} if section is not None else None))


def server_stdin(client):
    """The pipe the client writes the server's stdin through (for bytes no client would send)."""
    return client.protocol.writer


async def stop_client(client) -> None:
    """Stop a hand-started client even after a failed assertion (pygls' stop() waits for the
    server to exit, which it only does once its stdin closes)."""
    stdin = server_stdin(client)
    if stdin is not None and not stdin.is_closing():
        stdin.close()
    await asyncio.wait_for(client.stop(), 30)


def frame(message: dict) -> bytes:
    """One LSP message as it goes over stdio."""
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def parse_frames(data: bytes) -> list[dict]:
    """Every byte of `data` must belong to a well-formed LSP message."""
    messages = []
    while data:
        header, sep, rest = data.partition(b"\r\n\r\n")
        assert sep and header.startswith(b"Content-Length: "), f"not LSP framing: {data[:80]!r}"
        length = int(header.split(b"\r\n")[0][len(b"Content-Length: "):])
        messages.append(json.loads(rest[:length]))
        data = rest[length:]
    return messages
