"""The `specfill/nextEdit` request: the edit the user is likely to make next (completion/next_edit.py).

The server keeps the recent edits of every open document as didChange brings them (documents.py
calls `record_change` while `nextEdit` is on). A request runs on the engine's worker thread, as
inline completion does: the edit model is loaded there on first use (its own LocalEngine, or a
RemoteEngine for a URL), then the prompt is built, decoded and parsed. A newer request for the
same document stops the older one; `$/cancelRequest` stops it and is answered -32800.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from completion.context import uri_to_path
from completion.edit_history import EditHistory
from engine.remote import is_remote
from lsp import commands
from lsp.notify import show
from lsp.positions import to_client, to_codepoints
from lsp.settings import Settings

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

log = logging.getLogger("specfill.next_edit")


@dataclass
class NextEditStats:
    requests: int = 0
    suggestions: int = 0       # edits sent
    empty: int = 0             # null answers (no history, the model kept the region, no usable answer)
    superseded: int = 0        # stopped by a newer request for the document
    cancelled: int = 0         # $/cancelRequest
    failures: int = 0          # the edit model failed to load or to answer (told once, answered null)
    loads: int = 0


@dataclass
class NextEditState:
    """What the server keeps for next-edit suggestions."""
    history: EditHistory = field(default_factory=EditHistory)
    engine: Any = None                 # the edit model (LocalEngine or RemoteEngine), loaded on first use
    key: tuple | None = None           # the settings it was loaded with
    failed: dict = field(default_factory=dict)   # settings key -> why loading failed (told once)
    templates: dict = field(default_factory=dict)   # prompt templates per tokenizer
    inflight: dict = field(default_factory=dict)    # document key -> threading.Event
    stats: NextEditStats = field(default_factory=NextEditStats)
    last: dict = field(default_factory=dict)        # the latest request's figures
    ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def summary(self) -> dict:
        return {**asdict(self.stats), "loaded": self.engine is not None, "last": dict(self.last)}


def model_key(settings: Settings) -> tuple:
    """What identifies the loaded edit model: a change here loads it again."""
    return (settings.nextEdit, settings.device, settings.dtype, settings.quantize, settings.trustRemoteCode,
            settings.maxCacheTokens, settings.remote)


def model_name(settings: Settings) -> str:
    """The name `nextEditFormat: auto` reads (a remote server's model name once it is probed)."""
    return settings.nextEdit


# ------------------------------------------------------------------------- edits as they come

def record_change(ls: SpecfillServer, key: str, uri: str, before: str, after: str, changes) -> None:
    """didChange took document `key` from `before` to `after` (event loop: no text is copied)."""
    ls.state.next_edit.history.changed(key, uri_to_path(uri), before, after, _changed_lines(changes))


def _changed_lines(changes) -> tuple[int, int, int] | None:
    """(first line, last line) the changes replaced and the last line of their new text; None
    where one replaced the whole text."""
    if not changes or any(not isinstance(c, types.TextDocumentContentChangePartial) for c in changes):
        return None
    first = min(c.range.start.line for c in changes)
    last = max(c.range.end.line for c in changes)
    new_last = max(c.range.start.line + c.text.count("\n") for c in changes)
    return first, last, max(new_last, first)


def forget_document(ls: SpecfillServer, key: str) -> None:
    state = ls.state.next_edit
    state.history.forget(key)
    cancel = state.inflight.pop(key, None)
    if cancel is not None:
        cancel.set()


def settings_changed(ls: SpecfillServer) -> None:
    """Settings applied. nextEdit switched off: the edit history goes, and the edit model's memory
    (on the worker, after what runs there)."""
    state = ls.state.next_edit
    state.failed.clear()        # a model that failed to load is tried again with the next settings
    if ls.state.settings.nextEdit != "off":
        return
    state.history = EditHistory()
    if state.engine is None:
        return
    engine, state.engine, state.key = state.engine, None, None
    try:
        ls.state.worker.submit(engine.close)
    except RuntimeError:   # worker shut down
        pass


# ----------------------------------------------------------------------------- the request

def parse_params(params: Any) -> tuple[str, types.Position]:
    """(uri, position) of a request's params; JsonRpcInvalidParams (one line) for anything else."""
    try:
        uri = params["textDocument"]["uri"]
        pos = params["position"]
        line, character = pos["line"], pos["character"]
        if not isinstance(uri, str):
            raise TypeError(f"textDocument.uri is {type(uri).__name__}, not a string")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (line, character)):
            raise ValueError(f"position {line!r}:{character!r} is not two integers >= 0")
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        what = f"{type(exc).__name__}: {exc}" if isinstance(exc, (KeyError, AttributeError)) else str(exc)
        raise JsonRpcInvalidParams(f"{commands.NEXT_EDIT}: invalid params: {what} (it needs textDocument.uri "
                                   "and position {line, character})") from None
    return uri, types.Position(line=line, character=character)


async def next_edit(ls: SpecfillServer, uri: str, position: types.Position) -> dict | None:
    """The suggested edit at `position` of document `uri`, or None (module docstring)."""
    from lsp.documents import document_key

    state, ne = ls.state, ls.state.next_edit
    settings = state.settings
    ne.stats.requests += 1
    key = document_key(uri)
    doc = ls.workspace.text_documents.get(key)
    if settings.nextEdit == "off" or not settings.enable:
        ne.last = {}
        return _empty(ne, "next-edit suggestions are off (the nextEdit setting)")
    if doc is None:
        ne.last = {}
        return _empty(ne, "the document is not open on the server")
    text, lines = doc.source, doc.lines
    codec = ls.workspace.position_codec
    cursor = to_codepoints(lines, codec, position)
    if cursor is None:
        raise JsonRpcInvalidParams(f"{commands.NEXT_EDIT}: invalid params: position {position.line}:"
                                   f"{position.character} is past the end of the document ({len(lines)} lines)")
    if not len(ne.history):
        ne.last = {}
        return _empty(ne, "no edit history yet")
    cancel = threading.Event()
    previous = ne.inflight.pop(key, None)
    if previous is not None and not previous.is_set():
        previous.set()
        ne.stats.superseded += 1
    ne.inflight[key] = cancel
    loop = asyncio.get_running_loop()
    try:
        outcome = await loop.run_in_executor(state.worker, _job, ls, loop, settings, doc.uri, key, text,
                                             cursor, cancel)
    except asyncio.CancelledError:   # $/cancelRequest: pygls answers -32800
        cancel.set()
        ne.stats.cancelled += 1
        raise
    finally:
        if ne.inflight.get(key) is cancel:
            del ne.inflight[key]
    if cancel.is_set():
        return _empty(ne, "a newer request replaced it")
    if outcome is None or outcome.suggestion is None:
        return _empty(ne)
    s = outcome.suggestion
    ne.stats.suggestions += 1
    rng = {"start": _client(lines, codec, s.start), "end": _client(lines, codec, s.end)}
    return {"uri": uri, "range": rng, "newText": s.text, "id": f"nextEdit-{next(ne.ids)}"}


def _client(lines, codec, at: tuple[int, int]) -> dict:
    p = to_client(lines, codec, *at)
    return {"line": p.line, "character": p.character}


def _empty(ne: NextEditState, reason: str | None = None) -> None:
    """A null answer; `reason` (None: the one the worker noted) goes into `last`."""
    ne.stats.empty += 1
    if reason is not None:
        ne.last = {**ne.last, "reason": reason}
    return None


def _job(ls: SpecfillServer, loop, settings: Settings, uri: str, key: str, text: str,
         cursor: tuple[int, int], cancel: threading.Event):
    """Worker thread: load the edit model if need be, then ask it. None (with the reason in
    `last`) where there is no answer."""
    from completion.next_edit import suggest
    from engine.remote import RemoteError

    state = ls.state
    ne = state.next_edit
    if cancel.is_set():
        return None
    engine = _engine(ls, loop, settings)
    if engine is None or cancel.is_set():
        return None
    name = getattr(getattr(engine, "info", None), "model", "") or model_name(settings)
    state.worker_busy = True
    try:
        outcome = suggest(engine, uri, key, text, cursor[0], cursor[1], ne.history, settings.nextEditFormat,
                          name, ne.templates, cancel)
    except ValueError as exc:        # a text or position the pipeline refuses
        ne.last = {"reason": str(exc)}
        return None
    except RemoteError as err:
        ne.stats.failures += 1
        ne.last = {"reason": f"the edit model failed: {err}"}
        log.warning("edit model: %s", err)
        if engine.health.failed(err):
            loop.call_soon_threadsafe(show, ls, f"next-edit model: {err}", types.MessageType.Error)
        return None
    except Exception as exc:         # noqa: BLE001 - a request must never take the server down
        ne.stats.failures += 1
        log.exception("next edit failed for %s", uri)
        ne.last = {"reason": f"the edit model failed: {type(exc).__name__}: {exc}"}
        return None
    finally:
        state.worker_busy = False
    if engine.health.worked():
        loop.call_soon_threadsafe(show, ls, f"next-edit model {engine.health.url} answers again",
                                  types.MessageType.Info)
    ne.last = {**outcome.figures, "reason": None if outcome.suggestion else
               "the model kept the region" if outcome.figures.get("verdict") == "same" else
               f"no usable answer ({outcome.figures.get('verdict')})"}
    return outcome


def _engine(ls: SpecfillServer, loop, settings: Settings):
    """Worker thread: the edit model the settings name, loaded now if it is not yet; None (told
    once per setting) where it cannot load."""
    ne = ls.state.next_edit
    key = model_key(settings)
    if ne.key == key and ne.engine is not None:
        return ne.engine
    if key in ne.failed:
        ne.last = {"reason": ne.failed[key]}
        return None
    if ne.engine is not None:
        ne.engine.close()
        ne.engine = ne.key = None
    t0 = time.perf_counter()
    try:
        ne.engine = load_edit_model(settings)
    except Exception as exc:         # noqa: BLE001 - a bad model is one message, and the server goes on
        from lsp.backend import is_model_load_error
        why = str(exc) if is_model_load_error(exc) else f"{type(exc).__name__}: {exc}"
        ne.failed[key] = reason = f"could not load the next-edit model {settings.nextEdit!r}: {why}"
        ne.stats.failures += 1
        ne.last = {"reason": reason}
        loop.call_soon_threadsafe(show, ls, reason, types.MessageType.Error)
        return None
    ne.key = key
    ne.templates.clear()
    ne.stats.loads += 1
    log.info("next-edit model %s loaded in %.0f ms", settings.nextEdit, (time.perf_counter() - t0) * 1000)
    return ne.engine


def load_edit_model(settings: Settings):
    """The edit model `nextEdit` names: a RemoteEngine for a URL (the prompt goes as text to
    `/v1/completions`), else a LocalEngine with no draft model (prompt lookup and the copy drafter
    draft) on the settings' device, precision and cache budget."""
    if is_remote(settings.nextEdit):
        from engine.load.models import ModelLoadError
        from engine.remote import RemoteEngine, RemoteError, RemoteSettings

        r = settings.remote
        try:
            remote = RemoteSettings(url=settings.nextEdit, backend="openai", api_key=r.apiKey,
                                    api_key_env=r.apiKeyEnv, verify_tls=r.verifyTls, ca_bundle=r.caBundle,
                                    connect_timeout_s=r.connectTimeoutMs / 1000, read_timeout_s=r.readTimeoutMs / 1000)
        except RemoteError as exc:
            raise ModelLoadError(str(exc)) from None
        return RemoteEngine(remote, max_cache_tokens=settings.maxCacheTokens)
    from engine import EngineConfig, LocalEngine

    target = "default" if settings.nextEdit == "demo" else settings.nextEdit
    return LocalEngine(EngineConfig(target=target, draft="ngram", datastore="none", device=settings.device,
                                    dtype=settings.dtype, quantize=settings.quantize,
                                    trust_remote_code=settings.trustRemoteCode,
                                    max_cache_tokens=settings.maxCacheTokens, max_sessions=2))
