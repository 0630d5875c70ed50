"""The few pygls internals the server reaches into, in one place, for the pygls versions it was
written against (a newer major version fails loudly at import instead of misbehaving).

- the workspace is swapped for one whose documents split lines as LSP clients count them;
- `pendingRequests` in `specfill.stats` counts the protocol's open request futures;
- the exit code says whether `shutdown` came before the connection ended;
- the document-sync protocol handlers need the server they belong to.
"""
from __future__ import annotations

from importlib.metadata import version
from typing import TYPE_CHECKING

from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.workspace import Workspace

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

SUPPORTED_MAJOR = 2
PYGLS_VERSION = version("pygls")
if int(PYGLS_VERSION.split(".")[0]) != SUPPORTED_MAJOR:
    raise ImportError(f"specfill's language server needs pygls {SUPPORTED_MAJOR}.x, "
                      f"found {PYGLS_VERSION}")


def replace_workspace(ls: LanguageServer, make: "type[Workspace]") -> None:
    """Rebuild the workspace pygls created in `initialize` as an instance of `make`, with the
    same root, folders and negotiated position encoding."""
    old = ls.workspace
    ls.protocol._workspace = make(old.root_uri, ls._text_document_sync_kind,
                                  list(old.folders.values()) or None, old.position_encoding)


def pending_requests(ls: LanguageServer) -> int:
    """Open request futures of the protocol (each waits for an answer)."""
    return len(ls.protocol._request_futures)


def shutdown_requested(ls: LanguageServer) -> bool:
    return bool(ls.protocol._shutdown)


def server_of(protocol: LanguageServerProtocol) -> "SpecfillServer":
    return protocol._server   # type: ignore[return-value]
