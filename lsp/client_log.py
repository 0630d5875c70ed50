"""Where the server's log lines go: to the client as `window/logMessage` with their real level
once the connection exists, to stderr before that, after it ends, and for tracebacks (crashes).

Clients file everything a server writes to stderr as errors (VS Code's output channel prints
`[error] ... INFO ...`, Neovim's lsp.log `[ERROR] ... "stderr"`), so INFO lines must not go
there while a client can take them properly.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer

LEVELS = (   # the lowest logging level that maps to each LSP message type
    (logging.ERROR, types.MessageType.Error),
    (logging.WARNING, types.MessageType.Warning),
    (logging.INFO, types.MessageType.Info),
)


def message_type(levelno: int) -> types.MessageType:
    for lowest, kind in LEVELS:
        if levelno >= lowest:
            return kind
    return types.MessageType.Debug


class ClientLogHandler(logging.Handler):
    """Sends each record to the connected client; falls back to `stderr` (a handler) when there
    is no connection. A traceback goes to both: stderr keeps the crash if the client is gone."""

    def __init__(self, stderr: logging.Handler) -> None:
        super().__init__()
        self.stderr = stderr
        self.server: Optional[LanguageServer] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.loop_thread: Optional[int] = None
        self._sending = threading.local()   # records logged while sending (pygls') stay local

    def connected(self, server: LanguageServer) -> None:
        """From here on records go to `server`'s client. Call on the server's event loop."""
        self.server, self.loop = server, asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()

    def disconnected(self) -> None:
        self.server = None

    def _open(self) -> bool:
        server = self.server
        return server is not None and server.protocol.writer is not None and not self.loop.is_closed()

    def emit(self, record: logging.LogRecord) -> None:
        local_only = not self._open() or getattr(self._sending, "active", False)
        if record.exc_info or local_only:
            self.stderr.handle(record)
        if local_only:
            return
        try:
            params = types.LogMessageParams(type=message_type(record.levelno), message=self.format(record))
        except Exception:  # noqa: BLE001 - a bad format string must not take the server down
            self.handleError(record)
            return
        if threading.get_ident() == self.loop_thread:
            self._send(params, record)
        else:   # a worker thread: the protocol's writer belongs to the loop
            try:
                self.loop.call_soon_threadsafe(self._send, params, record)
            except RuntimeError:   # loop closed meanwhile
                self.stderr.handle(record)

    def _send(self, params: types.LogMessageParams, record: logging.LogRecord) -> None:
        if not self._open():
            self.stderr.handle(record)
            return
        self._sending.active = True
        try:
            self.server.window_log_message(params)
        except Exception:  # noqa: BLE001 - client gone mid-write
            self.stderr.handle(record)
        finally:
            self._sending.active = False


def handlers() -> list[ClientLogHandler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, ClientLogHandler)]


def connect(server: LanguageServer) -> None:
    """The client is there (`initialize`): send it the log from now on."""
    for handler in handlers():
        handler.connected(server)


def disconnect() -> None:
    """The connection is over: back to stderr."""
    for handler in handlers():
        handler.disconnected()
