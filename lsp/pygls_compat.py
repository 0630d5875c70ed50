"""The few pygls internals the server reaches into, in one place, for the pygls versions it was
written against (a newer major version fails loudly at import instead of misbehaving).

- the workspace is swapped for one whose documents split lines as LSP clients count them;
- `pendingRequests` in `specfill.stats` counts the protocol's open request futures;
- the exit code says whether `shutdown` came before the connection ended;
- the document-sync protocol handlers need the server they belong to;
- stdio is read on the event loop (`start_stdio`), not a thread hand-off per line;
- a message whose params do not fit its type (`line: -1`) is answered with one error line
  (`CheckedProtocol`), where pygls would log a cattrs traceback and leave a request unanswered.
"""
from __future__ import annotations

import asyncio
import logging
import os
import stat
import threading
from importlib.metadata import version
from typing import TYPE_CHECKING, BinaryIO

from cattrs.v import format_exception, transform_error
from lsprotocol.types import ResponseError
from pygls.exceptions import JsonRpcInvalidParams
from pygls.io_ import StdinAsyncReader, StdoutWriter, run_async
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage
from pygls.workspace import Workspace

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

log = logging.getLogger("specfill.serve")

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


class Malformed:
    """A client message whose params do not fit its method's type: what `CheckedProtocol` makes
    of it instead of raising. `id` is None for a notification."""

    def __init__(self, method: str, id, problem: str):
        self.method, self.id, self.problem = method, id, problem


def _problem(exc: Exception) -> str:
    """What is wrong with a message, one line: cattrs' paths, with lsprotocol's own range
    messages (`Position.line should be in range [0:2147483647], but was -1`)."""
    def fmt(err: BaseException, type_) -> str:
        return str(err) if type(err) is ValueError and str(err) else format_exception(err, type_)
    try:
        return "; ".join(transform_error(exc, path="$", format_exception=fmt)).replace("@ $.", "at ")
    except Exception:  # noqa: BLE001 - not a cattrs error: its own words
        return f"{type(exc).__name__}: {exc}"


class CheckedProtocol(LanguageServerProtocol):
    """pygls' protocol, except that a request or notification that does not fit its method's
    type is one warning line in the log, and a request gets an Invalid Params error response
    (pygls logs the cattrs traceback and never answers the request)."""

    def structure_message(self, data):
        if isinstance(data, dict) and "jsonrpc" in data and isinstance(data.get("method"), str):
            method = data["method"]
            request = "id" in data
            kind = self.get_message_type(method) or (JsonRPCRequestMessage if request else JsonRPCNotification)
            try:
                return self._converter.structure(data, kind)
            except Exception as exc:  # noqa: BLE001 - any failure to read it is the client's
                return Malformed(method, data["id"] if request else None, _problem(exc))
        return super().structure_message(data)

    def handle_message(self, message):
        if not isinstance(message, Malformed):
            return super().handle_message(message)
        what = f"{message.method}: invalid params: {message.problem}"
        if message.id is None:
            log.warning("ignored %s", what)
            return None
        log.warning("answered an error to %s", what)
        self._send_response(message.id, None, ResponseError(code=JsonRpcInvalidParams.CODE, message=what))
        return None


class PipeReader:
    """The client's messages read on the event loop itself, from asyncio's pipe transport: one
    wake-up takes in what the client wrote (a didChange and the completion request after it).
    pygls reads stdin on a worker thread instead, one hand-off per header line and per body:
    three a message (`python -m bench.server_cost` times both)."""

    def __init__(self, stream: asyncio.StreamReader):
        self.stream = stream

    def readline(self):
        return self.stream.readline()

    async def readexactly(self, n: int) -> bytes | str:
        try:
            body = await self.stream.readexactly(n)
        except asyncio.IncompleteReadError as exc:   # the client went away mid-message
            return exc.partial
        return readable(body)


def readable(body: bytes) -> bytes | str:
    """A message body as JSON can read it. Neovim sends a buffer's bytes as they are, also
    where they are not UTF-8, and json.loads would refuse the whole message (a lost didOpen):
    such a body is read with each bad byte as a lone surrogate, which the pipeline refuses
    with one line, as `specfill complete` does for the same file."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("utf-8", "surrogateescape")
    return body


async def _stdin_reader(ls: LanguageServer, stdin: BinaryIO, stdout: BinaryIO):
    """A PipeReader where stdin is a pipe or a socket (as editors start a server), else pygls's
    own reader: for a file or a terminal (asyncio cannot watch the one, and would leave the other
    non-blocking for the shell after us), and for one socket the client gave as both stdin and
    stdout (non-blocking for reading, it would be non-blocking for our writes too)."""
    try:
        mode = os.fstat(stdin.fileno()).st_mode
        if (os.name == "posix" and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode))
                and not os.path.sameopenfile(stdin.fileno(), stdout.fileno())):
            stream = asyncio.StreamReader()
            await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream), stdin)
            return PipeReader(stream)
    except (OSError, ValueError, NotImplementedError):
        pass
    return StdinAsyncReader(stdin, ls.thread_pool)


def start_stdio(ls: LanguageServer, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """pygls's `start_io` (its asynchronous loop, its message handling, its shutdown), reading
    the client through `_stdin_reader`."""
    ls._stop_event = stop_event = threading.Event()
    ls.protocol.set_writer(StdoutWriter(stdout))

    async def serve() -> None:
        reader = await _stdin_reader(ls, stdin, stdout)
        await run_async(stop_event=stop_event, reader=reader, protocol=ls.protocol, logger=log,
                        error_handler=ls.report_server_error)

    try:
        asyncio.run(serve())
    except BrokenPipeError:
        log.error("the connection to the client is lost: shutting down")
    except (KeyboardInterrupt, SystemExit):   # `exit` ends in SystemExit
        pass
    finally:
        ls.shutdown()
