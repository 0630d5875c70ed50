"""Document sync: pygls' incremental sync plus a size limit, tolerance of changes to documents
that were never opened, and the pipeline told about documents opened and closed.

The handlers are plain functions on purpose: pygls keeps a never-removed future for every
generator or async notification handler, which would grow with every keystroke. They replace
pygls' own document-sync handlers, so they sit on the protocol class.

Every document is known by `document_key(uri)`: clients percent-encode URIs (VS Code writes a
space as %20 and é as %C3%A9) and may not always spell a URI the same way; pygls' workspace
keys its documents by the unquoted URI, and so does every table of the server.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable
from urllib.parse import unquote

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp.backend import encodable
from lsp.pygls_compat import server_of

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

log = logging.getLogger("specfill.documents")

NOTED_AFTER_LOAD = 16   # open documents offered as extra context once models are loaded


def document_key(uri: str) -> str:
    """The one spelling of a document's URI the server keys its tables by (pygls' too)."""
    return unquote(uri)


def did_open(ls: SpecfillServer, params: types.DidOpenTextDocumentParams) -> None:
    state = ls.state
    item = params.text_document
    key = document_key(item.uri)
    if len(item.text) > state.settings.maxDocumentChars:
        ls.workspace.remove_text_document(item.uri)
        state.oversized.add(key)
        log.warning("%s: %d characters > maxDocumentChars %d; no completions for it",
                    item.uri, len(item.text), state.settings.maxDocumentChars)
        return
    state.oversized.discard(key)
    ls.workspace.put_text_document(item)
    note_document(ls, item.uri, item.text)


def did_change(ls: SpecfillServer, params: types.DidChangeTextDocumentParams) -> None:
    state = ls.state
    uri = params.text_document.uri
    key = document_key(uri)
    doc = ls.workspace.text_documents.get(key)
    if doc is None:
        # A whole-text change can bring an oversized document back under the limit.
        full = [c for c in params.content_changes
                if isinstance(c, types.TextDocumentContentChangeWholeDocument)]
        if key in state.oversized and full and len(full[-1].text) <= state.settings.maxDocumentChars:
            ls.workspace.put_text_document(types.TextDocumentItem(
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
        ls.workspace.remove_text_document(uri)
        return
    doc.version = params.text_document.version
    if len(doc.source) > state.settings.maxDocumentChars:
        ls.workspace.remove_text_document(uri)
        state.oversized.add(key)
        log.warning("%s grew past maxDocumentChars; no completions for it", uri)


def did_close(ls: SpecfillServer, params: types.DidCloseTextDocumentParams) -> None:
    state = ls.state
    uri = params.text_document.uri
    key = document_key(uri)
    doc = ls.workspace.text_documents.get(key)
    ls.workspace.remove_text_document(uri)
    state.oversized.discard(key)
    cancel = state.inflight.pop(key, None)
    if cancel is not None:
        cancel.set()
    # The pipeline knows the document by the URI it was opened with.
    forget_document(ls, doc.uri if doc is not None else uri)


class SpecfillProtocol(LanguageServerProtocol):
    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams):
        did_open(server_of(self), params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        did_change(server_of(self), params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams):
        did_close(server_of(self), params)


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


def note_document(ls: SpecfillServer, uri: str, text: str) -> None:
    """Offer a document to the pipeline as extra context for completions in other files."""
    loaded = ls.state.backend
    if loaded is not None:
        _on_worker(ls, lambda: loaded.pipeline.note_document(uri, encodable(text)))


def forget_document(ls: SpecfillServer, uri: str) -> None:
    loaded = ls.state.backend
    if loaded is not None:
        _on_worker(ls, lambda: loaded.pipeline.forget_document(uri))


def note_open_documents(ls: SpecfillServer) -> None:
    """After a (re)load the new pipeline knows no documents yet."""
    docs = list(ls.workspace.text_documents.values())[-NOTED_AFTER_LOAD:]
    for doc in docs:
        note_document(ls, doc.uri, doc.source)
