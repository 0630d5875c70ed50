"""Document sync: pygls' incremental sync plus a size limit, tolerance of changes to documents
that were never opened, and the pipeline told about documents opened, edited (throttled, at the
edited line), visited and closed, and about text the user yanked (extra context for completions
in other documents; `extraContextFrom` says which of these count).

The handlers are plain functions on purpose: pygls keeps a never-removed future for every
generator or async notification handler, which would grow with every keystroke. They replace
pygls' own document-sync handlers, so they sit on the protocol class.

Every document is known by `document_key(uri)`: clients percent-encode URIs (VS Code writes a
space as %20 and é as %C3%A9) and may not always spell a URI the same way; pygls' workspace
keys its documents by the unquoted URI, and so does every table of the server.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import unquote

from lsprotocol import types
from pygls.protocol.language_server import lsp_method

from lsp import backend, commands, next_edit
from lsp.backend import encodable
from lsp.pygls_compat import CheckedProtocol, server_of
from lsp.settings import document_too_large
from lsp.telemetry import plain

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

log = logging.getLogger("specfill.documents")

NOTED_AFTER_LOAD = 16   # open documents offered as extra context once models are loaded
# An opened document is tokenized for prompt lookup this long after the open, when no request is
# in flight (else it waits this long again, WARM_TRIES times at most): never ahead of a request
# that came with the open.
WARM_AFTER_S = 0.2
WARM_TRIES = 25
EDIT_NOTE_INTERVAL_S = 1.0   # a document being typed in is noted at most this often


def document_key(uri: str) -> str:
    """The one spelling of a document's URI the server keys its tables by (pygls' too)."""
    return unquote(uri)


def did_open(ls: SpecfillServer, params: types.DidOpenTextDocumentParams) -> None:
    item = params.text_document
    key = document_key(item.uri)
    if refuse_if_too_large(ls, item.uri, len(item.text)):
        ls.workspace.remove_text_document(item.uri)
        return
    ls.workspace.put_text_document(item)
    if context_from(ls, "open"):
        note_document(ls, item.uri, item.text)
    warm_lookup(ls, [key])


def did_change(ls: SpecfillServer, params: types.DidChangeTextDocumentParams) -> None:
    state = ls.state
    uri = params.text_document.uri
    key = document_key(uri)
    doc = ls.workspace.text_documents.get(key)
    if doc is None:
        # A whole-text change can bring an oversized document back under the limit.
        full = [c for c in params.content_changes
                if isinstance(c, types.TextDocumentContentChangeWholeDocument)]
        if key in state.oversized and full and not refuse_if_too_large(ls, uri, len(full[-1].text)):
            ls.workspace.put_text_document(types.TextDocumentItem(
                uri=uri, language_id="", version=params.text_document.version, text=full[-1].text))
        elif key not in state.oversized:
            log.warning("didChange for a document that was never opened: %s", uri)
        return
    before = doc.source
    try:
        for change in params.content_changes:
            doc.apply_change(change)
    except Exception:
        # A change we cannot apply leaves the text unknown: forget it rather than guess.
        log.exception("could not apply a change to %s; dropping the document", uri)
        ls.workspace.remove_text_document(uri)
        return
    doc.version = params.text_document.version
    if refuse_if_too_large(ls, uri, len(doc.source)):
        ls.workspace.remove_text_document(uri)
        return
    if context_from(ls, "edits"):
        note_edit(ls, key, doc, edited_line(params.content_changes))
    if state.settings.nextEdit != "off":
        next_edit.record_change(ls, key, doc.uri, before, doc.source, params.content_changes)


def did_close(ls: SpecfillServer, params: types.DidCloseTextDocumentParams) -> None:
    state = ls.state
    uri = params.text_document.uri
    key = document_key(uri)
    doc = ls.workspace.text_documents.get(key)
    ls.workspace.remove_text_document(uri)
    state.oversized.pop(key, None)
    cancel = state.inflight.pop(key, None)
    if cancel is not None:
        cancel.set()
    edit_notes(ls).forget(key)
    next_edit.forget_document(ls, key)
    # The pipeline knows the document by the URI it was opened with.
    forget_document(ls, doc.uri if doc is not None else uri)


def refuse_if_too_large(ls: SpecfillServer, uri: str, chars: int) -> bool:
    """Whether a document of `chars` characters is over maxDocumentChars (then it is not kept).
    The client is told with specfill/documentStatus when this changes for the document, so its
    status line can say why nothing is shown there; specfill.stats lists it too."""
    state = ls.state
    key = document_key(uri)
    reason = document_too_large(chars, state.settings.options.maxDocumentChars)
    was = state.oversized.get(key)
    if reason is None:
        if was is not None:
            del state.oversized[key]
            send_document_status(ls, uri, "ok", "", "")
        return False
    state.oversized[key] = reason
    if was is None:
        log.warning("%s: %s", uri, reason)
        send_document_status(ls, uri, "refused", "too_large", reason)
    return True


def send_document_status(ls: SpecfillServer, uri: str, state: str, kind: str, reason: str) -> None:
    """specfill/documentStatus (lsp/commands.py): whether the document at `uri` gets answers."""
    try:
        ls.protocol.notify(commands.DOCUMENT_STATUS, {"textDocument": {"uri": uri}, "state": state,
                                                      "kind": kind, "reason": reason})
    except Exception:  # client gone
        log.debug("could not send %s", commands.DOCUMENT_STATUS, exc_info=True)


def reported(what: str, handler, ls: SpecfillServer, params: Any) -> None:
    """A malformed report is one warning line; the server goes on."""
    try:
        handler(ls, params)
    except ValueError as exc:
        log.warning("ignored %s: %s", what, exc)


def edited_line(changes) -> int | None:
    """The line the cursor is on after the last change (None: a whole-text change)."""
    last = changes[-1] if changes else None
    if not isinstance(last, types.TextDocumentContentChangePartial):
        return None
    return last.range.start.line + last.text.count("\n")


class EditNotes:
    """Which edited documents to note when: the first edit of a burst at once, later ones at
    most every EDIT_NOTE_INTERVAL_S; an edit left over is noted when the user edits or visits
    another document, so a chunk holds what was typed last before moving on."""

    def __init__(self) -> None:
        self._noted_at: dict[str, float] = {}
        self._pending: dict[str, int | None] = {}

    def edited(self, key: str, line: int | None, now: float) -> bool:
        """True: note `key` now; False: it waits as pending."""
        if now - self._noted_at.get(key, -math.inf) >= EDIT_NOTE_INTERVAL_S:
            self._noted_at[key] = now
            self._pending.pop(key, None)
            return True
        self._pending[key] = line
        return False

    def take_others(self, key: str, now: float) -> list[tuple[str, int | None]]:
        """Pending edits of documents other than `key`, now due."""
        out = [(k, line) for k, line in self._pending.items() if k != key]
        for k, _ in out:
            del self._pending[k]
            self._noted_at[k] = now
        return out

    def forget(self, key: str) -> None:
        self._noted_at.pop(key, None)
        self._pending.pop(key, None)


def context_from(ls: SpecfillServer, source: str) -> bool:
    """Whether the settings take extra context from `source` (open, edits, yanks, visits)."""
    settings = ls.state.settings
    return settings.extraTokens > 0 and source in settings.options.extraContextFrom.split(",")


def edit_notes(ls: SpecfillServer) -> EditNotes:
    return ls.protocol.edit_notes


def note_edit(ls: SpecfillServer, key: str, doc, line: int | None) -> None:
    notes = edit_notes(ls)
    now = time.monotonic()
    _note_pending(ls, key, now)
    if notes.edited(key, line, now):
        note_document(ls, doc.uri, doc.source, line, "edits")


def _note_pending(ls: SpecfillServer, key: str, now: float) -> None:
    """The user is now in `key`: note the edits still pending in other documents."""
    for other, line in edit_notes(ls).take_others(key, now):
        doc = ls.workspace.text_documents.get(other)
        if doc is not None:
            note_document(ls, doc.uri, doc.source, line, "edits")


def _document_param(ls: SpecfillServer, p: Any):
    """(uri, the open document or None) named by params {textDocument: {uri}}; ValueError if none."""
    ident = p.get("textDocument") if isinstance(p, dict) else None
    uri = ident.get("uri") if isinstance(ident, dict) else None
    if not isinstance(uri, str):
        raise ValueError(f"params need textDocument.uri, got {p!r}")
    return uri, ls.workspace.text_documents.get(document_key(uri))


def on_yanked(ls: SpecfillServer, params: Any) -> None:
    """specfill/yanked {textDocument: {uri}, text}: the user copied `text` from the document."""
    p = plain(params)
    if not isinstance(p, dict) or not isinstance(p.get("text"), str):
        raise ValueError(f"params need text, got {p!r}")
    uri, doc = _document_param(ls, p)
    if not context_from(ls, "yanks"):
        return
    text = p["text"][:ls.state.settings.options.maxDocumentChars]
    loaded = ls.state.backend
    if loaded is not None:
        _on_worker(ls, lambda: loaded.pipeline.note_text(doc.uri if doc else uri, encodable(text), "yanks"))


def on_visited(ls: SpecfillServer, params: Any) -> None:
    """specfill/visited {textDocument: {uri}, position: {line}}: the user was at this line (and
    is leaving it, or has rested there)."""
    p = plain(params)
    uri, doc = _document_param(ls, p)
    position = p.get("position")
    line = position.get("line") if isinstance(position, dict) else None
    if isinstance(line, bool) or not isinstance(line, int) or line < 0:
        raise ValueError(f"params need position.line >= 0, got {p!r}")
    if doc is None or not context_from(ls, "visits"):
        return
    _note_pending(ls, document_key(uri), time.monotonic())
    note_document(ls, doc.uri, doc.source, line, "visits")


class SpecfillProtocol(CheckedProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.edit_notes = EditNotes()   # per server: which edited documents to note when

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        did_open(server_of(self), params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        did_change(server_of(self), params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        did_close(server_of(self), params)

    # Where the user works (extra context), registered here as plain handlers for the same reason.
    @lsp_method(commands.YANKED)
    def specfill_yanked(self, params: Any):
        reported(commands.YANKED, on_yanked, server_of(self), params)

    @lsp_method(commands.VISITED)
    def specfill_visited(self, params: Any):
        reported(commands.VISITED, on_visited, server_of(self), params)


def _on_worker(ls: SpecfillServer, job: Callable[[], None]) -> None:
    """Pipeline bookkeeping runs on the torch worker: the pipeline is not thread-safe."""
    def guarded() -> None:
        try:
            job()
        except Exception:
            log.debug("pipeline document bookkeeping failed", exc_info=True)

    try:
        ls.state.worker.submit(guarded)
    except RuntimeError:  # worker already shut down
        pass


def note_document(ls: SpecfillServer, uri: str, text: str, line: int | None = None,
                  source: str = "open") -> None:
    """Offer a document to the pipeline as extra context for completions in other files: a
    chunk around `line` (None: its first changed line)."""
    loaded = ls.state.backend
    if loaded is not None:
        _on_worker(ls, lambda: loaded.pipeline.note_document(uri, encodable(text), line, source))


def forget_document(ls: SpecfillServer, uri: str) -> None:
    loaded = ls.state.backend
    if loaded is not None:
        _on_worker(ls, lambda: loaded.pipeline.forget_document(uri))


def warm_lookup(ls: SpecfillServer, keys: list[str], tries: int = WARM_TRIES) -> None:
    """Tokenize the blocks of opened documents (`keys`, newest first) for prompt lookup on the
    worker once the server is idle (CompletionPipeline.warm_lookup), so the first request in them
    finds the blocks cached (`python -m bench.lookup_cost`, "first read": 0.3-0.5 ms instead of
    2.7-3.0 ms for held-out files of 8-40 KB). It starts WARM_AFTER_S after the open, with the
    documents' text at that time (closed ones left out), and waits again while a request is in
    flight; a request that arrives while it runs stops it between two tokenizer calls. A request
    sent with the open (an editor asking at once) goes first. Nothing is warmed while requests
    skip the documents because reading them has not paid (engine/drafters/documents.py, DocumentsWorth)."""
    state = ls.state
    if state.backend is None or state.loading or not keys:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:      # not on the server's loop (no request can be waiting): now
        _warm_now(ls, keys)
        return

    def later() -> None:
        if _requests_busy(state):
            if tries > 1:
                warm_lookup(ls, keys, tries - 1)
            return
        _warm_now(ls, keys)
    loop.call_later(WARM_AFTER_S, later)


def _warm_now(ls: SpecfillServer, keys: list[str]) -> None:
    state = ls.state
    loaded = state.backend
    docs = [ls.workspace.text_documents.get(k) for k in keys]
    texts = [d.source for d in docs if d is not None]   # (text a request would refuse is skipped)
    if loaded is None or state.loading or not texts:
        return
    options = backend.completion_options(state.settings)

    def stop() -> bool:
        return _requests_busy(state)

    def job() -> None:
        if not stop():
            state.stats.lookup_warmed_tokens += loaded.pipeline.warm_lookup(texts, options, stop)
    _on_worker(ls, job)


def _requests_busy(state) -> bool:
    """A request in flight or decoding, or models loading: background work waits or stops."""
    return bool(state.inflight) or state.worker_busy or state.loading


def note_open_documents(ls: SpecfillServer) -> None:
    """After a (re)load the new pipeline knows no documents yet (and its lookup has read none:
    the newest first)."""
    docs = list(ls.workspace.text_documents.values())[-NOTED_AFTER_LOAD:]
    warm_lookup(ls, [document_key(doc.uri) for doc in reversed(docs)])
    if not context_from(ls, "open"):
        return
    for doc in docs:
        note_document(ls, doc.uri, doc.source)
