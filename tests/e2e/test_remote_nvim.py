"""The Neovim statusline for a remote target, in a real Neovim with the plugin, `specfill serve`
and a real llama.cpp server serving the shipped target (the fixtures of
test_remote_llamacpp.py): killing the server puts the error on the statusline (the server's
`specfill/status`), and it clears once the restarted server answers again."""
from __future__ import annotations

import sys

import pytest

from tests.e2e.remote.server import LlamaServer
from tests.e2e.test_nvim import nvim_in_new_folder
from tests.e2e.test_remote_llamacpp import llama_server_binary, target_gguf  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(7200)   # a first run builds llama-server

STATUSLINE = "require('specfill').statusline()"


def test_statusline_shows_a_failing_remote_until_it_answers_again(llama_server_binary, target_gguf):  # noqa: F811
    server = LlamaServer(llama_server_binary, target_gguf).start()
    settings = {"targetModel": server.url, "maxNewTokens": 16, "extraTokens": 0,
                "remote": {"connectTimeoutMs": 2000}}
    setup = {"cmd": [sys.executable, "-m", "lsp"], "settings": settings, "debounce_ms": 0}
    try:
        with nvim_in_new_folder("sfrn", setup, "remote.py") as nv:
            nv.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'specfill' }) > 0", 60, "LSP attach")
            nv.send("idef add(a, b):<CR>")
            nv.wait(f"{STATUSLINE}:match('^specfill: ready %d+ms$')", 120, "an answer from the remote")

            server.kill()
            nv.send("return a + b<CR>")     # new positions: no answer from the cache
            nv.wait(f"{STATUSLINE} == 'specfill: remote error: unreachable'", 60, "the error on the statusline")
            nv.send("<CR>x = 1<CR>")
            assert nv.lua(f"return {STATUSLINE}") == "specfill: remote error: unreachable"
            message = nv.lua("return require('specfill.status').target.message")
            assert message.startswith(f"cannot reach {server.url}/") and "\n" not in message

            server.start()                  # the same port
            nv.send("y = 2<CR>")
            nv.wait(f"{STATUSLINE}:match('^specfill: ready %d+ms$')", 60, "the statusline to clear")
            assert nv.lua("return require('specfill.status').target") is None
    finally:
        server.stop()
