"""Shared pieces of the language-server tests: hand-built client capabilities, a server command,
and waits on what the real server process reports."""
from __future__ import annotations

import asyncio
import functools
import os
import sys
import threading
from pathlib import Path

from lsprotocol import types

ROOT = Path(__file__).resolve().parent.parent
SERVER_COMMAND = [sys.executable, "-m", "lsp", "--log-level", "info"]
SERVER_ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false"}


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
    from tiny_models import tiny_pair_dirs

    return tiny_pair_dirs()


def tiny_options(**extra) -> dict:
    target, draft = tiny_pair()
    # extraTokens 0: no context from other open documents, so a prompt depends only on its own
    # document and the server's answer can be compared with `reference`.
    return {"targetModel": target, "draftModel": draft, "debounceMs": 0, "device": "cpu",
            "dtype": "float32", "extraTokens": 0, **extra}


@functools.lru_cache(maxsize=None)
def _reference_backend():
    from lsp.backend import load_backend
    from lsp.settings import Settings, parse_settings

    return load_backend(parse_settings(tiny_options(), Settings()))


def reference(uri: str, text: str, line: int, character: int, **settings) -> str:
    """What the completion pipeline itself (in this process, same tiny pair) answers at a
    codepoint position: the server must answer the same."""
    from lsp.backend import completion_options, completion_request
    from lsp.settings import Settings, parse_settings

    loaded = _reference_backend()
    options = completion_options(parse_settings({**tiny_options(), **settings}, Settings()))
    completion = loaded.pipeline.complete(completion_request(uri, text, line, character), options,
                                          cancel=threading.Event())
    return completion.text if completion is not None else ""


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
        types.ExecuteCommandParams(command="specfill.stats"))


def push_settings(client, section: dict | None) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"specfill": section} if section is not None else None))


async def stop_client(client) -> None:
    """Stop a hand-started client even after a failed assertion (pygls' stop() waits for the
    server to exit, which it only does once its stdin closes)."""
    process = getattr(client, "_server", None)
    if process is not None and process.returncode is None:
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 15)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()
    await client.stop()
