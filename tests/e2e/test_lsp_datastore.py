"""The `datastore` server option over the wire: the real server over stdio on the shipped pair,
whose target ships a datastore.npz. A file that cannot be loaded is reported to the client as a
bad model is (window/showMessage naming it, the load's progress ends "failed") and the server keeps
running; with the shipped store (`auto`) it answers what the completion pipeline answers and the
store drafts, and without one (`none`) it answers the same."""
from __future__ import annotations

import functools
import threading
from contextlib import asynccontextmanager

import pytest
from lsprotocol import types

from lsp import commands
from lsp.backend import completion_options, completion_request, load_backend
from lsp.settings import settings_from
from tests.e2e.lsp_helpers import (SERVER_ENV, init_params, inline, items, make_client, open_doc,
                                   server_command, stats, stop_client, wait_loaded)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

# The shipped pair on the CPU; no context from other documents, so the answer is the pipeline's.
OPTIONS = {"targetModel": "default", "draftModel": "default", "device": "cpu", "dtype": "float32",
           "extraTokens": 0, "maxNewTokens": 24}
MISSING = "/nonexistent/specfill-datastore.npz"
URI = "file:///work/datastore_demo.py"
DOC = ("import os\n\n\ndef list_python_files(root):\n    found = []\n"
       "    for name in sorted(os.listdir(root)):\n        if name.endswith(\".py\"):\n            \n")
AT = (7, len("            "))


@asynccontextmanager
async def server(datastore: str):
    """A real server started with `--option datastore=...`, initialized with OPTIONS."""
    client = make_client()
    await client.start_io(*server_command({"datastore": datastore}), env=SERVER_ENV)
    try:
        await client.initialize_session(init_params(OPTIONS))
        yield client
    finally:
        await stop_client(client)


@functools.lru_cache(maxsize=None)
def _pipeline_backend():
    return load_backend(settings_from(OPTIONS))


def pipeline_answer(**settings) -> str:
    """What the completion pipeline itself (in this process, the shipped pair) answers at AT."""
    loaded = _pipeline_backend()
    options = completion_options(settings_from({**OPTIONS, **settings}))
    completion = loaded.pipeline.complete(completion_request(URI, DOC, *AT), options, cancel=threading.Event())
    return completion.text if completion is not None else ""


async def answer(client) -> list[str]:
    return [i.insert_text for i in items(await inline(client, URI, *AT))]


async def last_lookup(client) -> dict:
    last = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands.LAST_COMPLETION))
    return last["lookup"]


def errors_naming(client, text: str) -> list[types.ShowMessageParams]:
    return [m for m in client.messages if m.type == types.MessageType.Error and text in m.message]


async def test_a_missing_datastore_is_reported_and_the_server_keeps_running():
    async with server(MISSING) as client:
        message = await wait_loaded(client)
        assert message.startswith("failed") and MISSING in message
        (error,) = errors_naming(client, MISSING)
        assert "no such file" in error.message and "\n" not in error.message
        open_doc(client, URI, DOC)
        assert await answer(client) == []   # answered, empty: nothing loaded
        s = await stats(client)
        assert not s["models"]["loaded"] and s["server"]["load_failures"] == 1
        assert s["options"]["datastore"] == MISSING


async def test_the_shipped_store_drafts_and_none_answers_the_same():
    expected = pipeline_answer()
    assert expected
    async with server("auto") as client:
        assert (await wait_loaded(client)).startswith("ready")
        open_doc(client, URI, DOC)
        assert await answer(client) == [expected]
        assert (await last_lookup(client))["proposed"]["datastore"] >= 1   # the shipped store drafted here
    async with server("none") as client:
        assert (await wait_loaded(client)).startswith("ready")
        open_doc(client, URI, DOC)
        assert await answer(client) == [expected]       # lossless: the store only changes the speed
        assert "datastore" not in (await last_lookup(client))["proposed"]
