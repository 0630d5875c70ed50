"""The specfill language server: inline completions from the speculative-decoding engine.

Threads: the asyncio loop (pygls) owns documents, settings and bookkeeping; every torch call
(model loading, completion, warm-up) runs on ONE dedicated worker thread, because the engine
is not thread-safe and keeps KV caches between requests. A request hands the worker a
`threading.Event`; superseding or cancelling the request sets it and decoding stops within
one step.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Optional
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp import backend as backend_mod
from lsp.positions import LspWorkspace, to_client, to_codepoints
from lsp.settings import MODEL_KEYS, Settings, SettingsError, parse_settings, unknown_keys

log = logging.getLogger("specfill.server")

VERSION = "0.1.0"
SECTION = "specfill"
CONFIG_PULL_WAIT_S = 3.0   # how long startup waits for workspace/configuration before loading


@dataclass
class ServerStats:
    """Server-side figures for `specfill.stats` (the pipeline reports its own)."""

    requests: int = 0
    completions: int = 0          # non-empty results sent
    empty: int = 0                # empty results sent (nothing worth showing)
    superseded: int = 0           # dropped because a newer request for the document came
    cancelled: int = 0            # $/cancelRequest from the client
    while_loading: int = 0        # answered empty because models were loading
    disabled: int = 0             # answered empty because enable = false
    unknown_document: int = 0
    out_of_range: int = 0         # position on a line that does not exist
    oversized_document: int = 0
    rejected: int = 0             # pipeline refused the input (binary text...); answered empty
    errors: int = 0               # pipeline failed unexpectedly; logged, answered empty
    decode_jobs: int = 0          # pipeline calls that ran on the worker
    skipped_jobs: int = 0         # queued jobs dropped before starting (already cancelled)
    stopped_jobs: int = 0         # jobs that were running when their request was cancelled
    loads: int = 0
    load_failures: int = 0
    last_load_ms: float = 0.0
    last_job: dict = field(default_factory=dict)


@dataclass
class ServerState:
    settings: Settings = field(default_factory=Settings)
    settings_version: int = 0            # bumped on every applied change (push, pull, init)
    backend: Optional[backend_mod.Backend] = None
    wanted_key: Optional[tuple] = None   # model key being loaded or loaded
    load_generation: int = 0
    loading: bool = False
    initialized: bool = False
    inflight: dict = field(default_factory=dict)      # uri -> threading.Event of newest request
    oversized: set = field(default_factory=set)       # uris of documents too large to keep
    stats: ServerStats = field(default_factory=ServerStats)
    worker: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="specfill-torch"))
    worker_busy: bool = False            # a completion is running on the worker


class SpecfillProtocol(LanguageServerProtocol):
    """Document sync with a size limit, and tolerant of changes to unknown documents."""

    _server: "SpecfillServer"

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        state = self._server.state
        item = params.text_document
        key = unquote(item.uri)
        if len(item.text) > state.settings.maxDocumentChars:
            self.workspace.remove_text_document(item.uri)
            state.oversized.add(key)
            log.warning("%s: %d characters > maxDocumentChars %d; no completions for it",
                        item.uri, len(item.text), state.settings.maxDocumentChars)
        else:
            state.oversized.discard(key)
            self.workspace.put_text_document(item)
            _note_document(self._server, item.uri, item.text)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        state = self._server.state
        uri = params.text_document.uri
        key = unquote(uri)
        doc = self.workspace.text_documents.get(key)
        if doc is None:
            # A full-text change can bring an oversized document back under the limit.
            full = [c for c in params.content_changes
                    if isinstance(c, types.TextDocumentContentChangeWholeDocument)]
            if key in state.oversized and full and len(full[-1].text) <= state.settings.maxDocumentChars:
                self.workspace.put_text_document(types.TextDocumentItem(
                    uri=uri, language_id="", version=params.text_document.version, text=full[-1].text))
                state.oversized.discard(key)
            elif key not in state.oversized:
                log.warning("didChange for a document that was never opened: %s", uri)
            return
        try:
            for change in params.content_changes:
                doc.apply_change(change)
        except Exception:
            # A change we cannot apply leaves the text unknown: forget it rather than guess.
            log.exception("could not apply a change to %s; dropping the document", uri)
            self.workspace.remove_text_document(uri)
            return
        doc.version = params.text_document.version
        if len(doc.source) > state.settings.maxDocumentChars:
            self.workspace.remove_text_document(uri)
            state.oversized.add(key)
            log.warning("%s grew past maxDocumentChars; no completions for it", uri)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        state = self._server.state
        key = unquote(params.text_document.uri)
        self.workspace.remove_text_document(params.text_document.uri)
        state.oversized.discard(key)
        cancel = state.inflight.pop(params.text_document.uri, None)
        if cancel is not None:
            cancel.set()
        _forget_document(self._server, params.text_document.uri)


class SpecfillServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("specfill", VERSION, protocol_cls=SpecfillProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.state = ServerState()

    def report_server_error(self, error, source):
        # Errors in notifications and malformed messages go to the log, not to pop-ups.
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)


# ---------------------------------------------------------------------------------- messages

def _show(ls: SpecfillServer, message: str, kind=types.MessageType.Error) -> None:
    log.log(logging.ERROR if kind == types.MessageType.Error else logging.INFO, "%s", message)
    try:
        ls.window_show_message(types.ShowMessageParams(type=kind, message=f"specfill: {message}"))
    except Exception:  # client gone
        log.debug("could not send showMessage", exc_info=True)


def _log_to_client(ls: SpecfillServer, message: str, kind=types.MessageType.Info) -> None:
    log.info("%s", message)
    try:
        ls.window_log_message(types.LogMessageParams(type=kind, message=f"specfill: {message}"))
    except Exception:
        log.debug("could not send logMessage", exc_info=True)


# ---------------------------------------------------------------------------------- settings

def apply_settings(ls: SpecfillServer, raw: Any, source: str) -> bool:
    """Validate and apply a `specfill` section; on error keep the previous settings and tell
    the user. Returns whether the settings were applied."""
    state = ls.state
    if raw is None:
        return False
    try:
        new = parse_settings(raw, state.settings)
    except SettingsError as exc:
        _show(ls, f"{exc} (from {source}); keeping the previous settings")
        return False
    extra = unknown_keys(raw)
    if extra:
        _log_to_client(ls, f"ignoring unknown settings from {source}: {', '.join(extra)}",
                       types.MessageType.Warning)
    state.settings = new
    state.settings_version += 1
    log.info("settings v%d from %s: %s", state.settings_version, source, new)
    if state.initialized:
        ensure_models(ls)
    return True


def pull_settings(ls: SpecfillServer) -> Future:
    """Ask the client for the `specfill` section. A reply that arrives after a newer change
    (a push) is stale and dropped."""
    state = ls.state
    asked_at = state.settings_version
    fut = ls.protocol.send_request(
        types.WORKSPACE_CONFIGURATION,
        types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)]))

    def on_reply(f: Future) -> None:
        try:
            if f.cancelled():
                return
            reply = f.result()
        except Exception as exc:
            log.warning("workspace/configuration failed: %s", exc)
            return
        if state.settings_version != asked_at:
            log.info("dropping a stale workspace/configuration reply (settings changed meanwhile)")
            return
        if isinstance(reply, (list, tuple)) and reply:   # lsprotocol gives a tuple
            apply_settings(ls, reply[0], "workspace/configuration")

    fut.add_done_callback(on_reply)
    return fut


def _client_supports(ls: SpecfillServer, *path: str) -> bool:
    node: Any = ls.client_capabilities
    for name in path:
        node = getattr(node, name, None)
        if node is None:
            return False
    return bool(node)


# ---------------------------------------------------------------------------------- models

def ensure_models(ls: SpecfillServer, force: bool = False) -> None:
    """Start loading the models named in the settings unless they are loaded or loading."""
    state = ls.state
    if not state.settings.enable:
        return   # no memory or CPU spent while the user has completions switched off
    key = state.settings.model_key()
    if key == state.wanted_key and not force:
        return
    state.wanted_key = key
    state.load_generation += 1
    state.loading = True
    for cancel in state.inflight.values():
        cancel.set()
    asyncio.ensure_future(_load(ls, state.settings, state.load_generation))


async def _begin_progress(ls: SpecfillServer, title: str, message: str) -> Optional[str]:
    if not _client_supports(ls, "window", "work_done_progress"):
        return None
    token = f"specfill-load-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), 5.0)
    except Exception as exc:  # client refused or did not answer: load without a progress bar
        log.warning("work done progress not created: %s", exc)
        return None
    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
        title=title, message=message, cancellable=False))
    return token


def _progress(ls: SpecfillServer, token: Optional[str], message: str, end: bool = False) -> None:
    if token is None:
        return
    try:
        if end:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
        else:
            ls.work_done_progress.report(token, types.WorkDoneProgressReport(message=message))
    except Exception:
        log.debug("progress notification failed", exc_info=True)


def _load_and_warm(settings: Settings) -> backend_mod.Backend:
    """Worker thread: load the models and run one tiny completion so the first real request
    does not pay for lazy initialisation."""
    loaded = backend_mod.load_backend(settings)
    try:
        options = backend_mod.completion_options(settings.replace(maxNewTokens=2, debounceMs=0))
        req = backend_mod.completion_request("specfill://warmup", "def f(x):\n    return ", 1, 11)
        loaded.pipeline.complete(req, options, cancel=threading.Event())
        if hasattr(loaded.pipeline, "reset_stats"):
            loaded.pipeline.reset_stats()   # the warm-up is not a user request
    except Exception:
        log.warning("warm-up completion failed", exc_info=True)
    return loaded


async def _load(ls: SpecfillServer, settings: Settings, generation: int) -> None:
    state = ls.state
    what = f"{settings.targetModel} + draft {settings.draftModel}"
    token = await _begin_progress(ls, "specfill", f"loading {what}")
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    try:
        loaded = await loop.run_in_executor(state.worker, _load_and_warm, settings)
    except BaseException as exc:  # noqa: BLE001  (any failure must leave the server running)
        if isinstance(exc, asyncio.CancelledError):
            raise
        state.stats.load_failures += 1
        if backend_mod.is_model_load_error(exc):
            reason = str(exc)
        else:
            log.exception("loading models failed")
            reason = f"{type(exc).__name__}: {exc}"
        _progress(ls, token, f"failed: {reason}", end=True)
        if generation != state.load_generation:
            return
        state.loading = False
        previous = state.backend.settings if state.backend else None
        if previous is not None:
            # The previous models stay in force, and so do the settings that name them.
            state.settings = state.settings.replace(**{k: getattr(previous, k) for k in MODEL_KEYS})
            state.wanted_key = previous.model_key()
            _show(ls, f"could not load {what}: {reason}; still using "
                      f"{previous.targetModel} + draft {previous.draftModel}")
        else:
            state.wanted_key = None
            _show(ls, f"could not load {what}: {reason}; no completions until a model loads "
                      "(fix targetModel/draftModel or run specfill.reload)")
        return
    ms = (time.perf_counter() - t0) * 1000
    if generation != state.load_generation:
        _progress(ls, token, "superseded by a newer model setting", end=True)
        return
    state.backend = loaded
    state.loading = False
    state.stats.loads += 1
    state.stats.last_load_ms = round(ms, 1)
    _progress(ls, token, f"ready ({ms:.0f} ms)", end=True)
    _log_to_client(ls, f"loaded {what} in {ms:.0f} ms")


def _note_document(ls: SpecfillServer, uri: str, text: str) -> None:
    """Give the pipeline an opened document as extra context (on the worker: not thread-safe)."""
    loaded = ls.state.backend
    if loaded is None or not hasattr(loaded.pipeline, "note_document"):
        return

    def job() -> None:
        try:
            loaded.pipeline.note_document(uri, backend_mod.encodable(text))
        except Exception:
            log.debug("note_document failed", exc_info=True)

    try:
        ls.state.worker.submit(job)
    except RuntimeError:  # worker already shut down
        pass


def _forget_document(ls: SpecfillServer, uri: str) -> None:
    loaded = ls.state.backend
    if loaded is None or not hasattr(loaded.pipeline, "forget_document"):
        return

    def job() -> None:
        try:
            loaded.pipeline.forget_document(uri)
        except Exception:
            log.debug("forget_document failed", exc_info=True)

    try:
        ls.state.worker.submit(job)
    except RuntimeError:  # worker already shut down
        pass


# ---------------------------------------------------------------------------------- completion

def _run_job(state: ServerState, loaded: backend_mod.Backend, request: Any, options: Any,
             cancel: threading.Event) -> Any:
    """Worker thread: one pipeline call, unless the request was dropped while queued."""
    stats = state.stats
    if cancel.is_set():
        stats.skipped_jobs += 1
        return None
    stats.decode_jobs += 1
    t0 = time.perf_counter()
    state.worker_busy = True
    try:
        completion = loaded.pipeline.complete(request, options, cancel=cancel)
    except ValueError as exc:  # the pipeline refusing bad input (binary text, bad position)
        stats.rejected += 1
        log.warning("no completion for %s: %s", request.uri, exc)
        stats.last_job = {"rejected": str(exc)}
        return None
    except Exception as exc:
        stats.errors += 1
        log.exception("completion failed for %s", request.uri)
        stats.last_job = {"error": f"{type(exc).__name__}: {exc}"}
        return None
    finally:
        state.worker_busy = False
    stopped = cancel.is_set()
    stats.stopped_jobs += stopped
    stats.last_job = {
        "ms": round((time.perf_counter() - t0) * 1000, 2), "cancelled": stopped,
        "empty": completion is None, "from_cache": bool(getattr(completion, "from_cache", False)),
        "stats": dict(getattr(completion, "stats", None) or {}),
    }
    return completion


async def complete_at(ls: SpecfillServer, uri: str,
                      position: types.Position) -> Optional[tuple[str, types.Range]]:
    """Ghost text and the client range it replaces, or None for an empty answer."""
    state = ls.state
    stats = state.stats
    stats.requests += 1
    settings = state.settings
    if not settings.enable:
        stats.disabled += 1
        return None
    key = unquote(uri)
    if key in state.oversized:
        stats.oversized_document += 1
        return None
    doc = ls.workspace.text_documents.get(key)
    if doc is None:
        stats.unknown_document += 1
        log.warning("completion requested for a document that is not open: %s", uri)
        return None
    if state.loading or state.backend is None:
        stats.while_loading += 1
        return None
    text = doc.source
    lines = doc.lines
    codec = ls.workspace.position_codec
    cursor = to_codepoints(lines, codec, position)
    if cursor is None:
        stats.out_of_range += 1
        log.warning("position %d:%d is past the end of %s (%d lines)",
                    position.line, position.character, uri, len(lines))
        return None

    # Neovim never cancels an automatic request when the next keystroke comes: the newest
    # request for a document replaces the one in flight.
    cancel = threading.Event()
    previous = state.inflight.get(uri)
    if previous is not None and not previous.is_set():
        previous.set()
        stats.superseded += 1
    state.inflight[uri] = cancel
    try:
        if settings.debounceMs:
            await asyncio.sleep(settings.debounceMs / 1000)
        if cancel.is_set() or state.loading or state.backend is None:
            return None
        loaded = state.backend
        request = backend_mod.completion_request(uri, text, cursor[0], cursor[1])
        options = backend_mod.completion_options(settings)
        loop = asyncio.get_running_loop()
        completion = await loop.run_in_executor(
            state.worker, _run_job, state, loaded, request, options, cancel)
    except asyncio.CancelledError:
        cancel.set()
        stats.cancelled += 1
        raise
    finally:
        if state.inflight.get(uri) is cancel:
            del state.inflight[uri]
    if completion is None or not completion.text or cancel.is_set():
        return None
    end_line, end_char = getattr(completion, "replace_end", None) or cursor
    start = to_client(lines, codec, *cursor)
    end = to_client(lines, codec, end_line, end_char)
    return completion.text, types.Range(start=start, end=end)


# ---------------------------------------------------------------------------------- server

def make_server() -> SpecfillServer:
    server = SpecfillServer()

    @server.feature(types.INITIALIZE)
    def on_initialize(ls: SpecfillServer, params: types.InitializeParams):
        ws = ls.protocol._workspace
        # Swap in a workspace whose documents split lines as LSP clients do.
        ls.protocol._workspace = LspWorkspace(
            ws.root_uri, ls._text_document_sync_kind,
            list(ws.folders.values()) or None, ws.position_encoding)
        apply_settings(ls, params.initialization_options, "initializationOptions")

    @server.feature(types.INITIALIZED)
    def on_initialized(ls: SpecfillServer, params: types.InitializedParams):
        asyncio.ensure_future(_startup(ls))

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def on_did_change_configuration(ls: SpecfillServer, params: types.DidChangeConfigurationParams):
        settings = params.settings
        if isinstance(settings, dict) and SECTION in settings:
            apply_settings(ls, settings[SECTION], "workspace/didChangeConfiguration")
        elif isinstance(settings, dict) and settings and not unknown_keys(settings):
            # Some clients push the section's contents without the `specfill` wrapper.
            apply_settings(ls, settings, "workspace/didChangeConfiguration")
        elif _client_supports(ls, "workspace", "configuration"):
            # VS Code style: the push only says "something changed"; pull the section.
            pull_settings(ls)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def on_inline_completion(ls: SpecfillServer, params: types.InlineCompletionParams):
        result = await complete_at(ls, params.text_document.uri, params.position)
        if result is None:
            ls.state.stats.empty += 1
            return types.InlineCompletionList(items=[])
        ls.state.stats.completions += 1
        text, rng = result
        return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=text, range=rng)])

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
    async def on_completion(ls: SpecfillServer, params: types.CompletionParams):
        # For clients without inline completion: the ghost text as one completion item.
        result = await complete_at(ls, params.text_document.uri, params.position)
        if result is None:
            ls.state.stats.empty += 1
            return types.CompletionList(is_incomplete=True, items=[])
        ls.state.stats.completions += 1
        text, rng = result
        first = text.strip().splitlines()[0] if text.strip() else text
        item = types.CompletionItem(
            label=first[:80], kind=types.CompletionItemKind.Text, detail="specfill",
            documentation=text,
            text_edit=types.TextEdit(range=rng, new_text=text) if rng.start.line == rng.end.line
            else None,
            insert_text=text, sort_text="0", preselect=True)
        return types.CompletionList(is_incomplete=True, items=[item])

    @server.command("specfill.stats")
    def cmd_stats(ls: SpecfillServer, *args):
        return stats_report(ls)

    @server.command("specfill.reload")
    def cmd_reload(ls: SpecfillServer, *args):
        ensure_models(ls, force=True)
        return {"reloading": True, "targetModel": ls.state.settings.targetModel,
                "draftModel": ls.state.settings.draftModel}

    @server.feature(types.SHUTDOWN)
    def on_shutdown(ls: SpecfillServer, *args):
        stop_work(ls)

    return server


async def _startup(ls: SpecfillServer) -> None:
    """After `initialized`: pull settings (briefly waiting for them), then load the models."""
    state = ls.state
    if _client_supports(ls, "workspace", "configuration"):
        fut = pull_settings(ls)
        await asyncio.wait([asyncio.wrap_future(fut)], timeout=CONFIG_PULL_WAIT_S)
    state.initialized = True
    ensure_models(ls)


def stats_report(ls: SpecfillServer) -> dict:
    state = ls.state
    pipeline_stats: Any = {}
    if state.backend is not None:
        try:
            pipeline_stats = state.backend.pipeline.stats_summary()
        except Exception as exc:
            pipeline_stats = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "pipeline": pipeline_stats,
        "server": asdict(state.stats),
        "models": {"targetModel": state.settings.targetModel, "draftModel": state.settings.draftModel,
                   "loaded": state.backend is not None, "loading": state.loading},
        "settings": state.settings.to_dict(),
        "settingsVersion": state.settings_version,
        "positionEncoding": str(getattr(ls.workspace, "position_encoding", "")),
        "openDocuments": len(ls.workspace.text_documents),
        "oversizedDocuments": len(state.oversized),
        "inflight": len(state.inflight),
        "workerBusy": state.worker_busy,
        "pendingRequests": len(ls.protocol._request_futures),
        "maxRssMb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def stop_work(ls: SpecfillServer) -> None:
    """Cancel everything in flight and stop taking worker jobs (shutdown, client gone)."""
    state = ls.state
    for cancel in list(state.inflight.values()):
        cancel.set()
    state.worker.shutdown(wait=False, cancel_futures=True)
