"""Prefetch with a remote target: `specfill serve` over stdio with targetModel = a real llama.cpp
server (the shipped target, test_remote_llamacpp.py's fixtures). A suggestion reported shown is
followed by a prefetch on the remote; the request after the accept is answered from the cache,
with the text the remote gives there when asked afresh."""
from __future__ import annotations

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from lsp import commands
from lsp.prefetch import Answer, accepted_document
from tests.e2e.lsp_helpers import (change_doc, init_params, inline, items, open_doc, server_config, stats,
                                   wait_loaded)
from tests.e2e.remote.server import LlamaServer
from tests.e2e.test_remote_llamacpp import DOC, URI, llama_server_binary, positions, target_gguf  # noqa: F401

pytestmark = pytest.mark.timeout(7200)   # a first run builds llama-server


@pytest_lsp.fixture(config=server_config())
async def remote_lsp(lsp_client: LanguageClient):
    yield lsp_client


async def settled(client, until) -> dict:
    for _ in range(3000):
        s = await stats(client)
        if not s["inflight"] and until(s):
            return s
    raise AssertionError(f"never settled: {s['prefetch']}")


@pytest.mark.asyncio
async def test_a_remote_target_prefetches_and_the_accept_is_answered_from_the_cache(
        remote_lsp, llama_server_binary, target_gguf):  # noqa: F811
    client = remote_lsp
    server = LlamaServer(llama_server_binary, target_gguf).start()
    try:
        await client.initialize_session(init_params({"targetModel": server.url,
                                                     "extraTokens": 0, "maxNewTokens": 24}))
        await wait_loaded(client)
        open_doc(client, URI, DOC)
        for line, character in positions():
            found = items(await inline(client, URI, line, character))
            if found:
                break
        else:
            raise AssertionError(f"no suggestion at {positions()}")
        (item,) = found
        r = item.range
        text, new_line, new_character = accepted_document(Answer(
            URI, DOC, (line, character), (r.end.line, r.end.character), item.insert_text))

        client.protocol.notify(commands.SHOWN, {"id": item.command.arguments[0]["id"]})
        before = await settled(client, lambda s: s["prefetch"]["ready"] == 1)
        change_doc(client, URI, 2, (r.start.line, r.start.character), (r.end.line, r.end.character),
                   item.insert_text)
        answer = items(await inline(client, URI, new_line, new_character))
        s = await stats(client)
        assert s["prefetch"]["used"] == 1
        assert s["pipeline"]["cache_hits"] == before["pipeline"]["cache_hits"] + 1
        assert s["pipeline"]["decoded_tokens"] == before["pipeline"]["decoded_tokens"]   # no remote run

        # The remote, asked afresh at the same place (another document: no cache), says the same.
        fresh = "file:///work/demo/fresh.py"
        open_doc(client, fresh, text)
        again = items(await inline(client, fresh, new_line, new_character))
        assert [i.insert_text for i in answer] == [i.insert_text for i in again]
        assert (await stats(client))["pipeline"]["cache_hits"] == s["pipeline"]["cache_hits"]   # it ran the remote
        await client.shutdown_session()
    finally:
        server.stop()
