"""Loading models in the background, with work-done progress, keeping the old ones on failure."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import TYPE_CHECKING, Optional

from lsprotocol import types

from lsp import backend, collector
from lsp.documents import note_open_documents
from lsp.notify import client_supports, send_status, show
from lsp.settings import MODEL_KEYS, Settings

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

log = logging.getLogger("specfill.loading")


def ensure_models(ls: SpecfillServer, force: bool = False) -> None:
    """Start loading the models the settings name, unless they are loaded or loading.
    Requests get empty answers until the load ends (they do not wait for it)."""
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


async def _begin_progress(ls: SpecfillServer, message: str) -> Optional[str]:
    if not client_supports(ls, "window", "work_done_progress"):
        return None
    token = f"specfill-load-{uuid.uuid4().hex[:8]}"
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), 5.0)
    except Exception as exc:  # client refused or did not answer: load without a progress bar
        log.warning("work done progress not created: %s", exc)
        return None
    ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(
        title="specfill", message=message, cancellable=False))
    return token


def _end_progress(ls: SpecfillServer, token: Optional[str], message: str) -> None:
    if token is None:
        return
    try:
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
    except Exception:
        log.debug("progress notification failed", exc_info=True)


def _load_and_warm(settings: Settings, tell=None, status=None) -> backend.Backend:
    """Worker thread: load the models and run one tiny completion so the first real request
    does not pay for lazy initialisation; a remote target is only probed (a completion would
    take a slot's cached prompt). `tell(message, is_error)` reports a remote target's failures
    and recoveries (once per kind) from the worker thread; `status(dict)` gets each change of
    its status (engine/remote.py Health)."""
    loaded = backend.load_backend(settings)
    loaded.pipeline.on_message = tell
    loaded.engine.health.listener = status
    loaded.engine.check(tell)       # a remote target is probed instead of warmed up
    if not loaded.engine.warms_up:
        return loaded
    try:
        options = backend.completion_options(settings.replace(maxNewTokens=2))
        req = backend.completion_request("specfill://warmup", "def f(x):\n    return ", 1, 11)
        loaded.pipeline.complete(req, options, cancel=threading.Event())
        loaded.pipeline.reset_stats()   # the warm-up is not a user request
    except Exception:
        log.warning("warm-up completion failed", exc_info=True)
    return loaded


async def _load(ls: SpecfillServer, settings: Settings, generation: int) -> None:
    state = ls.state
    what = f"{settings.targetModel} + draft {settings.draftModel}"
    token = await _begin_progress(ls, f"loading {what}")
    t0 = time.perf_counter()
    try:
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(state.worker, _load_and_warm, settings,
                                            lambda message, error: _tell_from_worker(ls, loop, message, error),
                                            lambda status: loop.call_soon_threadsafe(send_status, ls, status))
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001  (any failure must leave the server running)
        _load_failed(ls, exc, what, token, generation)
        return
    ms = (time.perf_counter() - t0) * 1000
    if generation != state.load_generation:
        _end_progress(ls, token, "superseded by a newer model setting")
        return
    state.backend = loaded
    collector.settle()   # the old models are gone: collect once, then keep the new ones out of later passes
    state.loading = False
    state.stats.loads += 1
    state.stats.last_load_ms = round(ms, 1)
    note = backend.cuda_graphs_note(loaded)
    if note is not None:   # before the progress ends: a client that waits for the load sees it
        show(ls, note, types.MessageType.Warning)
    _end_progress(ls, token, f"ready ({ms:.0f} ms)")
    send_status(ls, loaded.engine.health.status())
    log.info("loaded %s in %.0f ms", what, ms)
    note_open_documents(ls)


def _tell_from_worker(ls: SpecfillServer, loop: asyncio.AbstractEventLoop, message: str, error: bool) -> None:
    """window/showMessage for a remote target's failure or recovery, sent from the event loop."""
    kind = types.MessageType.Error if error else types.MessageType.Info
    loop.call_soon_threadsafe(show, ls, message, kind)


def _load_failed(ls: SpecfillServer, exc: BaseException, what: str, token: Optional[str], generation: int) -> None:
    state = ls.state
    state.stats.load_failures += 1
    if backend.is_model_load_error(exc):
        reason = str(exc)
    else:
        log.error("loading models failed", exc_info=exc)
        reason = f"{type(exc).__name__}: {exc}"
    if generation != state.load_generation:
        _end_progress(ls, token, f"failed: {reason}")
        return
    state.loading = False
    previous = state.backend.settings if state.backend else None
    if previous is not None:
        # The previous models stay in force, and so do the settings that name them.
        state.settings = state.settings.replace(**{k: getattr(previous, k) for k in MODEL_KEYS})
        state.wanted_key = previous.model_key()
        show(ls, f"could not load {what}: {reason}; still using "
                 f"{previous.targetModel} + draft {previous.draftModel}")
    else:
        state.wanted_key = None
        show(ls, f"could not load {what}: {reason}; no completions until a model loads "
                 "(fix targetModel/draftModel or run specfill.reload)")
    # After the message: a client that waits for the load's end has the message by then.
    _end_progress(ls, token, f"failed: {reason}")
