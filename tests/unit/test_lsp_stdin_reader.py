"""The server reads its client on the event loop where stdin is a pipe or a socket of its own
(lsp/pygls_compat.py, `_stdin_reader`), and with pygls' thread reader otherwise: a file, or one
socket given as both stdin and stdout (made non-blocking for reading, it would be for writing too)."""
from __future__ import annotations

import asyncio
import os
import socket
import tempfile

from pygls.io_ import StdinAsyncReader

from lsp.pygls_compat import PipeReader, _stdin_reader
from lsp.server import server


def _reader_for(stdin, stdout, client_fd: int | None = None) -> type:
    """The kind of reader the server takes; a PipeReader must read a message the client (writing
    to `client_fd`) sends, and an empty body once the client has gone."""
    async def go():
        reader = await _stdin_reader(server, stdin, stdout)
        if isinstance(reader, PipeReader) and client_fd is not None:
            os.write(client_fd, b"Content-Length: 2\r\n\r\n{}")
            assert await reader.readline() == b"Content-Length: 2\r\n"
            assert await reader.readline() == b"\r\n"
            assert await reader.readexactly(2) == b"{}"
            os.close(client_fd)
            assert await reader.readexactly(5) == b""
        return type(reader)
    return asyncio.run(go())


def test_a_pipe_is_read_on_the_loop():
    read_end, write_end = os.pipe()
    with open(read_end, "rb", buffering=0) as stdin, tempfile.TemporaryFile() as out:
        assert _reader_for(stdin, out, write_end) is PipeReader


def test_a_file_or_a_socket_shared_with_stdout_is_read_by_pygls():
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out:
        assert _reader_for(stdin, out) is StdinAsyncReader
    a, b = socket.socketpair()
    with a, b, a.makefile("rb", buffering=0) as stdin, a.makefile("wb", buffering=0) as out:
        assert _reader_for(stdin, out) is StdinAsyncReader
        assert os.get_blocking(a.fileno())       # left as it was: our writes still block
