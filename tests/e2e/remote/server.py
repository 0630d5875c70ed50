"""A real llama-server process on 127.0.0.1 for the tests and benchmarks: start, wait until it
serves, kill, start again on the same port."""
from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx

READY_WAIT_S = 120     # loading a small GGUF takes well under a second; a loaded machine is slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, binary: Path, model: Path, api_key: str | None = None, ctx: int = 512,
                 slots: int = 1, threads: int = 1, extra: tuple[str, ...] = ()):
        self.binary, self.model, self.api_key = Path(binary), Path(model), api_key
        self.args = ["-c", str(ctx * slots), "-np", str(slots), "-t", str(threads), "--no-webui", "--slots", *extra]
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(f"/tmp/specfill-llama-server-{self.port}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def start(self) -> "LlamaServer":
        cmd = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port), *self.args]
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); log: {self.tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server did not become ready in {READY_WAIT_S} s; log: {self.tail()}")

    def tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def slots(self) -> list[dict]:
        return httpx.get(f"{self.url}/slots", headers=self.headers(), timeout=10).json()

    def tokenize(self, text: str, parse_special: bool = False) -> list[int]:
        """The server's own ids for `text` (no BOS)."""
        r = httpx.post(f"{self.url}/tokenize", json={"content": text, "add_special": False,
                                                     "parse_special": parse_special},
                       headers=self.headers(), timeout=10)
        r.raise_for_status()
        return r.json()["tokens"]

    def tokenize_special(self, text: str) -> list[int]:
        """As a completion prompt is read: sentinels in the text become their special tokens."""
        return self.tokenize(text, parse_special=True)
