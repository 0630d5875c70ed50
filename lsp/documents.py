"""Document sync: pygls' incremental sync plus a size limit, tolerance of changes to documents
that were never opened, and the pipeline told about documents opened and closed.

The handlers are plain functions on purpose: pygls keeps a never-removed future for every
generator or async notification handler, which would grow with every keystroke.
"""
from __future__ import annotations

import logging
from urllib.parse import unquote

from lsprotocol import types
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from lsp.backend import encodable

log = logging.getLogger("specfill.documents")

NOTED_AFTER_LOAD = 16   # open documents offered as extra context once models are loaded


class SpecfillProtocol(LanguageServerProtocol):
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
            return
        state.oversized.discard(key)
        self.workspace.put_text_document(item)
        note_document(self._server, item.uri, item.text)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        state = self._server.state
        uri = params.text_document.uri
        key = unquote(uri)
        doc = self.workspace.text_documents.get(key)
        if doc is None:
            # A whole-text change can bring an oversized document back under the limit.
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
        uri = params.text_document.uri
        self.workspace.remove_text_document(uri)
        state.oversized.discard(unquote(uri))
        cancel = state.inflight.pop(uri, None)
        if cancel is not None:
            cancel.set()
        forget_document(self._server, uri)


def _on_worker(ls, job) -> None:
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


def note_document(ls, uri: str, text: str) -> None:
    """Offer a document to the pipeline as extra context for completions in other files."""
    loaded = ls.state.backend
    if loaded is not None and hasattr(loaded.pipeline, "note_document"):
        _on_worker(ls, lambda: loaded.pipeline.note_document(uri, encodable(text)))


def forget_document(ls, uri: str) -> None:
    loaded = ls.state.backend
    if loaded is not None and hasattr(loaded.pipeline, "forget_document"):
        _on_worker(ls, lambda: loaded.pipeline.forget_document(uri))


def note_open_documents(ls) -> None:
    """After a (re)load the new pipeline knows no documents yet."""
    docs = list(ls.workspace.text_documents.values())[-NOTED_AFTER_LOAD:]
    for doc in docs:
        note_document(ls, doc.uri, doc.source)
