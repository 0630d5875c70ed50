"""A minimal LSP client over stdio: just enough of an editor to drive the real server and
time its answers (JSON-RPC framing, request ids, replies to the server's own requests).
Kept free of a client library so nothing but the pipe sits between the clock and the server.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any


class LspError(RuntimeError):
    pass


class LspClient:
    def __init__(self, proc: asyncio.subprocess.Process, log_file):
        self.proc = proc
        self.log_file = log_file
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self.messages: list[dict] = []   # window/showMessage and logMessage from the server
        self._reader = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def start(cls, command: list[str], env: dict, log_path: Path, cwd: str | None = None) -> "LspClient":
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "wb")
        # stderr goes to a file: an undrained pipe would stall a chatty server.
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=log_file, env=env, cwd=cwd)
        return cls(proc, log_file)

    # -- wire ---------------------------------------------------------------------------------
    def _send(self, message: dict) -> None:
        body = json.dumps(message).encode("utf-8")
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def _read_loop(self) -> None:
        reader = self.proc.stdout
        try:
            while True:
                length = None
                while True:
                    header = await reader.readline()
                    if not header:
                        raise EOFError
                    header = header.strip()
                    if not header:
                        break
                    name, _, value = header.decode("ascii").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                message = json.loads(await reader.readexactly(length))
                self._dispatch(message)
        except (EOFError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(LspError("server exited"))

    def _dispatch(self, message: dict) -> None:
        if "method" in message and "id" in message:
            # A request from the server (progress, configuration): answer like a plain editor.
            result: Any = None
            if message["method"] == "workspace/configuration":
                result = [None for _ in message.get("params", {}).get("items", [])]
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        elif "method" in message:
            if message["method"] in ("window/showMessage", "window/logMessage"):
                self.messages.append(message["params"])
        else:
            fut = self._pending.pop(message.get("id"), None)
            if fut is not None and not fut.done():
                if "error" in message:
                    fut.set_exception(LspError(f"{message['error'].get('code')}: {message['error'].get('message')}"))
                else:
                    fut.set_result(message.get("result"))

    # -- API ----------------------------------------------------------------------------------
    async def request(self, method: str, params: Any, timeout: float = 300.0) -> Any:
        rid = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        await self.proc.stdin.drain()
        return await asyncio.wait_for(fut, timeout)

    async def timed_request(self, method: str, params: Any, timeout: float = 300.0) -> tuple[Any, float]:
        """(result, milliseconds from sending the request to having the parsed answer)."""
        t0 = time.perf_counter()
        result = await self.request(method, params, timeout)
        return result, (time.perf_counter() - t0) * 1000

    async def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})
        await self.proc.stdin.drain()

    async def execute(self, command: str, *arguments: Any) -> Any:
        return await self.request("workspace/executeCommand", {"command": command, "arguments": list(arguments)})

    async def close(self, timeout: float = 10.0) -> None:
        try:
            if self.proc.returncode is None:
                await self.request("shutdown", None, timeout)
                await self.notify("exit", None)
                await asyncio.wait_for(self.proc.wait(), timeout)
        except (LspError, asyncio.TimeoutError, ConnectionError, OSError):
            pass
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            self._reader.cancel()
            self.log_file.close()


def initialize_params(options: dict, root: Path) -> dict:
    """What an editor with inline completion sends; settings come as initializationOptions
    (no configuration pull, no progress), utf-16 positions like VS Code."""
    return {
        "processId": os.getpid(),
        "rootUri": root.resolve().as_uri(),
        "capabilities": {
            "general": {"positionEncodings": ["utf-16"]},
            "workspace": {"executeCommand": {}},
            "textDocument": {"synchronization": {}, "inlineCompletion": {}},
        },
        "initializationOptions": options,
    }
