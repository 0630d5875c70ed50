"""The specfill language server: inline completions from the speculative-decoding engine.

Threads: the asyncio loop (pygls) owns documents, settings and bookkeeping; every torch call
runs on the one worker thread in `ServerState.worker`. A request hands the worker a
`threading.Event`; superseding or cancelling the request sets it and decoding stops within
one step. Other modules: config (settings sync), loading (models + progress), documents
(sync), positions (encodings), state (what is kept), backend (settings -> engine/pipeline),
commands (the executeCommand ids), pygls_compat (the pygls internals used).

As in pygls' own examples, `server` is the one server object and the handlers below are
registered on it; `specfill serve` starts it.
"""
from __future__ import annotations

import asyncio
import logging
import resource
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Optional

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from completion import selected as selected_item
from completion.alternatives import MAX_CANDIDATES, alternatives
from lsp import backend, client_log, collector, commands, next_edit, telemetry
from lsp.arguments import SPECFILL_VERSION
from lsp.config import apply_settings, on_pushed_settings, pull_settings
from lsp.documents import SpecfillProtocol, document_key
from lsp.loading import ensure_models
from lsp.notify import client_supports
from lsp.positions import LspWorkspace, to_client, to_codepoints
from lsp.pygls_compat import pending_requests, replace_workspace
from lsp.state import MAX_INFLIGHT, ServerState

if TYPE_CHECKING:
    from completion.pipeline import Completion, CompletionOptions, CompletionRequest

log = logging.getLogger("specfill.server")

VERSION = SPECFILL_VERSION   # the installed package's version, as `specfill --version` prints
CONFIG_PULL_WAIT_S = 3.0   # how long startup waits for workspace/configuration before loading


class SpecfillServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("specfill", VERSION, protocol_cls=SpecfillProtocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.state = ServerState()

    def report_server_error(self, error, source):
        # Malformed messages and failing notifications go to the log, not to pop-ups.
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)


# ---------------------------------------------------------------------------------- completion

def _run_job(state: ServerState, loaded: backend.Backend, request: CompletionRequest,
             options: CompletionOptions, cancel: threading.Event, count: int = 1) -> list[Completion]:
    """Worker thread: one pipeline call (with `count` > 1 the alternatives, greedy first),
    unless the request was dropped while queued."""
    stats = state.stats
    if cancel.is_set():
        stats.skipped_jobs += 1
        return []
    stats.decode_jobs += 1
    t0 = time.perf_counter()
    state.worker_busy = True
    ran_before = loaded.pipeline.last_stats
    try:
        if count > 1:
            found = alternatives(loaded.pipeline, request, options, count, cancel=cancel)
        else:
            found = [c] if (c := loaded.pipeline.complete(request, options, cancel=cancel)) else []
        completion = found[0] if found else None
    except ValueError as exc:  # the pipeline refusing bad input (binary text, bad position)
        stats.rejected += 1
        log.warning("no completion for %s: %s", request.uri, exc)
        stats.last_job = {"rejected": str(exc)}
        return []
    except Exception as exc:
        stats.errors += 1
        log.exception("completion failed for %s", request.uri)
        stats.last_job = {"error": f"{type(exc).__name__}: {exc}"}
        return []
    finally:
        state.worker_busy = False
    stopped = cancel.is_set()
    stats.stopped_jobs += stopped
    ran = loaded.pipeline.last_stats is not ran_before   # the models ran (else: the cache answered)
    stats.last_job = {
        "ms": round((time.perf_counter() - t0) * 1000, 2), "cancelled": stopped,
        "empty": completion is None,
        "from_cache": completion.from_cache if completion is not None else not ran,
        # an empty answer keeps its run's figures: what was decoded and what cut it
        "stats": dict(completion.stats) if completion is not None else
                 dict(loaded.pipeline.last_stats) if ran else {},
    }
    if count > 1:
        stats.last_job["alternatives"] = len(found)
    return found


def _supersede(state: ServerState, key: str, cancel: threading.Event) -> None:
    """Make `cancel` the newest request: the previous one for the document stops (Neovim
    never cancels automatic requests itself), and so does the oldest beyond MAX_INFLIGHT."""
    previous = state.inflight.pop(key, None)
    if previous is not None and not previous.is_set():
        previous.set()
        state.stats.superseded += 1
    state.inflight[key] = cancel
    while len(state.inflight) > MAX_INFLIGHT:
        oldest = next(iter(state.inflight))
        state.inflight.pop(oldest).set()
        state.stats.superseded += 1


async def complete_at(ls: SpecfillServer, uri: str, position: types.Position, invoked: bool = False,
                      selected: Optional[types.SelectedCompletionInfo] = None) -> Optional[tuple[str, types.Range]]:
    """Ghost text and the client range it replaces, or None for an empty answer. `invoked`:
    the user asked explicitly, so there is no debounce. `selected`: the completion menu's
    item, which the ghost text continues (completion/selected.py)."""
    found = await completions_at(ls, uri, position, invoked, selected=selected)
    return found[0] if found else None


async def completions_at(ls: SpecfillServer, uri: str, position: types.Position,
                         invoked: bool = False, count: int = 1,
                         selected: Optional[types.SelectedCompletionInfo] = None) -> list[tuple[str, types.Range]]:
    """complete_at for `count` alternatives (completion/alternatives.py): greedy first."""
    state = ls.state
    stats = state.stats
    stats.requests += 1
    settings = state.settings
    # pending until the request is answered or refused
    last = state.last_request = {"uri": uri, "answered": False, "pending": True, "reason": ""}
    if not settings.enable:
        stats.disabled += 1
        return _no_answer(last, "completions are off (the enable setting is false)")
    key = document_key(uri)
    if key in state.oversized:
        stats.oversized_document += 1
        return _no_answer(last, state.oversized[key])
    doc = ls.workspace.text_documents.get(key)
    if doc is None:
        stats.unknown_document += 1
        log.warning("completion requested for a document that is not open: %s", uri)
        return _no_answer(last, "the document is not open on the server")
    if state.loading or state.backend is None:
        stats.while_loading += 1
        return _no_answer(last, "the models are loading" if state.loading else
                          "no models are loaded (the log says why; specfill.reload tries again)")
    # The text and position of this request, before later edits arrive.
    text = doc.source
    lines = doc.lines
    codec = ls.workspace.position_codec
    cursor = to_codepoints(lines, codec, position)
    if cursor is None:
        stats.out_of_range += 1
        log.warning("position %d:%d is past the end of %s (%d lines)",
                    position.line, position.character, uri, len(lines))
        return _no_answer(last, f"position {position.line}:{position.character} is past the end of "
                                 f"the document ({len(lines)} lines)")
    chosen = _selected(lines, codec, selected, uri) if selected is not None else None
    if selected is not None and chosen is None:
        stats.out_of_range += 1
        return _no_answer(last, "the selected completion item's range is not in the document")

    state.prefetch.before_request(key, text, cursor)   # a prefetch elsewhere stops now
    cancel = threading.Event()
    _supersede(state, key, cancel)
    try:
        if settings.options.debounceMs and not invoked:
            await asyncio.sleep(settings.options.debounceMs / 1000)
        if cancel.is_set() or state.loading or state.backend is None:
            return _no_answer(last, "a newer request replaced it" if cancel.is_set() else "the models are loading")
        # The pipeline knows the document by the URI it was opened with.
        asked = selected_item.apply(lines, chosen) if chosen is not None else None
        request = (backend.completion_request(doc.uri, asked.text, *asked.cursor) if asked is not None
                   else backend.completion_request(doc.uri, text, cursor[0], cursor[1]))
        found = await asyncio.get_running_loop().run_in_executor(
            state.worker, _run_job, state, state.backend, request,
            backend.completion_options(settings), cancel, count)
    except asyncio.CancelledError:   # $/cancelRequest: pygls answers -32800
        cancel.set()
        stats.cancelled += 1
        _no_answer(last, "the editor cancelled it")
        raise
    finally:
        if state.inflight.get(key) is cancel:
            del state.inflight[key]
    if cancel.is_set():
        return _no_answer(last, "a newer request replaced it")
    state.prefetch.answered(request.uri, request.text, found)
    last["answered"] = any(c.text for c in found)
    last["pending"] = False
    if not last["answered"]:
        _no_answer(last, _empty_job_reason(stats.last_job))
    if chosen is not None:   # the selected item's text, then the model's, over the item's range
        start = to_client(lines, codec, *chosen.start)
        answers = [selected_item.answer(chosen, c.text, c.replace_end[1] - c.cursor[1]) for c in found if c.text]
        return [(text, types.Range(start=start, end=to_client(lines, codec, *end))) for text, end in answers]
    start = to_client(lines, codec, *cursor)
    return [(c.text, types.Range(start=start, end=to_client(lines, codec, *c.replace_end)))
            for c in found if c.text]


def _no_answer(last: dict, reason: str) -> list:
    """Note in the request's `lastRequest` entry (specfill.stats) why it gets no answer; the
    (empty) answer."""
    last["reason"] = reason
    last["pending"] = False
    return []


def _empty_job_reason(job: dict) -> str:
    """Why a request the worker ran shows nothing, from its `last_job`."""
    if "rejected" in job:
        return job["rejected"]
    if "error" in job:
        return f"the completion failed: {job['error']}"
    if job.get("from_cache"):
        return "nothing to show here (answered from the cache: the same text gave nothing before)"
    why = job.get("stats", {}).get("empty_reason")
    return f"nothing to show: {why}" if why else "nothing to show"


def _selected(lines, codec, info: types.SelectedCompletionInfo, uri: str) -> Optional[selected_item.Selected]:
    """The completion menu's item in codepoints, or None (logged) when its range is not in
    the document."""
    start, end = to_codepoints(lines, codec, info.range.start), to_codepoints(lines, codec, info.range.end)
    chosen = selected_item.Selected(start, end, info.text) if start and end else None
    if chosen is None or selected_item.apply(lines, chosen) is None:
        r = info.range
        log.warning("selectedCompletionInfo range %d:%d-%d:%d is not in %s (%d lines); no completion",
                    r.start.line, r.start.character, r.end.line, r.end.character, uri, len(lines))
        return None
    return chosen


# ---------------------------------------------------------------------------------- server

server = SpecfillServer()


@server.feature(types.INITIALIZE)
def on_initialize(ls: SpecfillServer, params: types.InitializeParams) -> None:
    client_log.connect(ls)   # from now on the log goes to the client, with its levels
    # Swap in a workspace whose documents split lines as LSP clients do.
    replace_workspace(ls, LspWorkspace)
    apply_settings(ls, params.initialization_options, "initializationOptions")


@server.feature(types.INITIALIZED)
def on_initialized(ls: SpecfillServer, params: types.InitializedParams) -> None:
    asyncio.ensure_future(_startup(ls))


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def on_did_change_configuration(ls: SpecfillServer,
                                params: types.DidChangeConfigurationParams) -> None:
    on_pushed_settings(ls, params.settings, client_supports(ls, "workspace", "configuration"))


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def on_inline_completion(ls: SpecfillServer,
                               params: types.InlineCompletionParams) -> types.InlineCompletionList:
    invoked = params.context.trigger_kind == types.InlineCompletionTriggerKind.Invoked
    result = await complete_at(ls, params.text_document.uri, params.position, invoked,
                               params.context.selected_completion_info)
    if result is None:
        ls.state.stats.empty += 1
        return types.InlineCompletionList(items=[])
    ls.state.stats.completions += 1
    text, rng = result
    return types.InlineCompletionList(items=[inline_item(ls, text, rng)])


def inline_item(ls: SpecfillServer, text: str, rng: types.Range) -> types.InlineCompletionItem:
    """An item whose command the client runs when the user accepts it whole (LSP 3.18); its
    id is also what the client's specfill/shown, /accepted and /dismissed reports name."""
    sid = ls.state.user.offer(len(text))
    ls.state.prefetch.offered(sid, text)
    accepted = types.Command(title="specfill: accepted", command=commands.ACCEPTED,
                             arguments=[{"id": sid, "length": len(text)}])
    return types.InlineCompletionItem(insert_text=text, range=rng, command=accepted)


@server.feature(commands.ALTERNATIVES)
async def on_alternatives(ls: SpecfillServer, params: Any) -> types.InlineCompletionList:
    """specfill/alternatives {textDocument: {uri}, position, context?: {selectedCompletionInfo?}}:
    up to `candidates` different suggestions at the position, the greedy one (what the ghost
    text shows) first; the others are sampled now, when the user asks to cycle."""
    p = telemetry.plain(params)
    try:
        uri = p["textDocument"]["uri"]
        position = types.Position(line=int(p["position"]["line"]), character=int(p["position"]["character"]))
        info = (p.get("context") or {}).get("selectedCompletionInfo")
        selected = None if info is None else types.SelectedCompletionInfo(
            range=types.Range(start=types.Position(**info["range"]["start"]),
                              end=types.Position(**info["range"]["end"])), text=str(info["text"]))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        # the Invalid Params answer a malformed textDocument/inlineCompletion gets (lsp/pygls_compat.py)
        what = f"{type(exc).__name__}: {exc}" if isinstance(exc, (KeyError, AttributeError)) else str(exc)
        raise JsonRpcInvalidParams(f"{commands.ALTERNATIVES}: invalid params: {what} (it needs "
                                   f"textDocument.uri and position, and a selectedCompletionInfo with "
                                   f"range and text, if any)") from None
    count = min(ls.state.settings.candidates, MAX_CANDIDATES)
    found = await completions_at(ls, uri, position, invoked=True, count=count, selected=selected)
    return types.InlineCompletionList(items=[inline_item(ls, text, rng) for text, rng in found])


@server.feature(commands.NEXT_EDIT)
async def on_next_edit(ls: SpecfillServer, params: Any) -> Optional[dict]:
    """specfill/nextEdit {textDocument: {uri}, position}: the edit the user is likely to make
    next, or null (lsp/next_edit.py)."""
    uri, position = next_edit.parse_params(telemetry.plain(params))
    return await next_edit.next_edit(ls, uri, position)


@server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
async def on_completion(ls: SpecfillServer, params: types.CompletionParams) -> types.CompletionList:
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
        documentation=text, insert_text=text, sort_text="0", preselect=True,
        text_edit=types.TextEdit(range=rng, new_text=text) if rng.start.line == rng.end.line
        else None)
    return types.CompletionList(is_incomplete=True, items=[item])


@server.command(commands.STATS)
def cmd_stats(ls: SpecfillServer, *args) -> dict:
    return stats_report(ls)


@server.command(commands.LAST_COMPLETION)
def cmd_last_completion(ls: SpecfillServer, *args) -> dict:
    return last_completion_stats(ls)


@server.command(commands.ACCEPTED)
def cmd_accepted(ls: SpecfillServer, *args) -> dict:
    return telemetry.accept_command(ls.state.user, list(args))


# User acceptance reports: plain (synchronous) handlers, see lsp/documents.py on why.
@server.feature(commands.SHOWN)
def on_shown(ls: SpecfillServer, params: Any) -> None:
    telemetry.safely(commands.SHOWN, telemetry.report, ls.state.user, "shown", params)
    ls.state.prefetch.on_shown(ls, params)   # the next suggestion, as if this one is accepted


@server.feature(commands.ACCEPTED_PART)
def on_accepted(ls: SpecfillServer, params: Any) -> None:
    telemetry.safely(commands.ACCEPTED_PART, telemetry.report, ls.state.user, "accepted", params)


@server.feature(commands.DISMISSED)
def on_dismissed(ls: SpecfillServer, params: Any) -> None:
    telemetry.safely(commands.DISMISSED, telemetry.report, ls.state.user, "dismissed", params)


@server.command(commands.RELOAD)
def cmd_reload(ls: SpecfillServer, *args) -> dict:
    ensure_models(ls, force=True)
    return {"reloading": ls.state.loading, "targetModel": ls.state.settings.targetModel,
            "draftModel": ls.state.settings.draftModel}


@server.feature(types.SHUTDOWN)
def on_shutdown(ls: SpecfillServer, *args) -> None:
    stop_work(ls)


async def _startup(ls: SpecfillServer) -> None:
    """After `initialized`: pull settings (briefly waiting for them), then load the models."""
    if client_supports(ls, "workspace", "configuration"):
        fut = pull_settings(ls)
        await asyncio.wait([asyncio.wrap_future(fut)], timeout=CONFIG_PULL_WAIT_S)
    ls.state.initialized = True
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
        # What users did with the suggestions shown (editor reports), not draft-token
        # acceptance (pipeline.acceptance_rate).
        "userAcceptance": state.user.summary(),
        "server": asdict(state.stats),
        "models": {"targetModel": state.settings.targetModel, "draftModel": state.settings.draftModel,
                   "loaded": state.backend is not None, "loading": state.loading,
                   "matmulKernels": _matmul_kernels(state.backend)},
        "settings": state.settings.to_dict(),
        "options": state.settings.options.to_dict(),
        "settingsVersion": state.settings_version,
        "positionEncoding": str(ls.workspace.position_encoding),
        "openDocuments": len(ls.workspace.text_documents),
        "oversizedDocuments": len(state.oversized),
        # why open documents get no answers (over maxDocumentChars), and why the latest request
        # got none: what the editors' status lines and stats views say
        "refusedDocuments": dict(state.oversized),
        "lastRequest": dict(state.last_request),
        "prefetch": asdict(state.prefetch.stats),
        "nextEdit": state.next_edit.summary(),
        "inflight": len(state.inflight) + state.prefetch.in_flight(),
        "workerBusy": state.worker_busy,
        "pendingRequests": pending_requests(ls),
        "maxRssMb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # the cyclic garbage collector's passes, and the objects kept out of them (lsp/collector.py)
        "garbageCollector": collector.summary(),
    }


def _matmul_kernels(loaded) -> dict | None:
    """The local engine's matmul kernels per model (LocalEngine.matmul_kernels); None without one."""
    kernels = getattr(getattr(loaded, "engine", None), "matmul_kernels", None)
    return kernels() if kernels is not None else None


def last_completion_stats(ls: SpecfillServer) -> dict:
    """Engine and prompt figures of the latest model run, also when it showed nothing (the
    keystroke-replay benchmark reads them after every request; `specfill.stats` sums them)."""
    loaded = ls.state.backend
    return dict(loaded.pipeline.last_stats) if loaded is not None else {}


def stop_work(ls: SpecfillServer) -> None:
    """Cancel everything in flight and stop taking worker jobs (shutdown, client gone)."""
    state = ls.state
    state.prefetch.cancel()
    for cancel in [*state.inflight.values(), *state.next_edit.inflight.values()]:
        cancel.set()
    state.worker.shutdown(wait=False, cancel_futures=True)
