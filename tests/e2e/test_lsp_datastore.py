"""The `datastore` setting over the wire: the real server over stdio (pytest-lsp) on the shipped
pair, whose target ships a datastore.npz. A file that cannot be loaded is reported to the client
as a bad model is (window/showMessage naming it, the load's progress ends "failed"), the server
keeps running, and once the setting is fixed it answers what the completion pipeline answers;
a bad file named while models are loaded leaves those models and their setting in force."""
from __future__ import annotations

import functools
import threading

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import LanguageClient

from lsp import commands
from lsp.backend import completion_options, completion_request, load_backend
from lsp.settings import Settings, parse_settings
from tests.e2e.lsp_helpers import (ended_loads, init_params, inline, items, open_doc, push_settings,
                                   server_config, stats, wait_loaded)

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(300)]

# The shipped pair on the CPU; no context from other documents, so the answer is the pipeline's.
OPTIONS = {"targetModel": "default", "draftModel": "default", "device": "cpu", "dtype": "float32",
           "debounceMs": 0, "extraTokens": 0, "maxNewTokens": 24}
MISSING = "/nonexistent/specfill-datastore.npz"
URI = "file:///work/datastore_demo.py"
DOC = ("import os\n\n\ndef list_python_files(root):\n    found = []\n"
       "    for name in sorted(os.listdir(root)):\n        if name.endswith(\".py\"):\n            \n")
AT = (7, len("            "))


@pytest_lsp.fixture(config=server_config())
async def client(lsp_client: LanguageClient):
    yield lsp_client
    await lsp_client.shutdown_session()


@functools.lru_cache(maxsize=None)
def _pipeline_backend():
    return load_backend(parse_settings(OPTIONS, Settings()))


def pipeline_answer(**settings) -> str:
    """What the completion pipeline itself (in this process, the shipped pair) answers at AT."""
    loaded = _pipeline_backend()
    options = completion_options(parse_settings({**OPTIONS, **settings}, Settings()))
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


async def test_a_missing_datastore_is_reported_and_fixing_the_setting_loads_the_models(client):
    await client.initialize_session(init_params({**OPTIONS, "datastore": MISSING}))
    message = await wait_loaded(client)
    assert message.startswith("failed") and MISSING in message
    (error,) = errors_naming(client, MISSING)
    assert "no such file" in error.message and "\n" not in error.message
    s = await stats(client)      # still answering, with nothing loaded
    assert not s["models"]["loaded"] and s["server"]["load_failures"] == 1

    push_settings(client, {"datastore": "auto"})
    assert (await wait_loaded(client, 2)).startswith("ready")
    s = await stats(client)
    assert s["models"]["loaded"] and s["settings"]["datastore"] == "auto"
    open_doc(client, URI, DOC)
    expected = pipeline_answer()
    assert await answer(client) == ([expected] if expected else [])
    lookup = await last_lookup(client)    # the shipped store drafted here
    assert lookup["proposed"]["datastore"] >= 1


async def test_a_bad_datastore_leaves_the_loaded_models_and_none_answers_the_same(client):
    await client.initialize_session(init_params(OPTIONS))
    assert (await wait_loaded(client)).startswith("ready")
    open_doc(client, URI, DOC)
    with_store = await answer(client)
    assert with_store

    push_settings(client, {"datastore": MISSING})
    assert (await wait_loaded(client, 2)).startswith("failed")
    assert len(errors_naming(client, MISSING)) == 1
    s = await stats(client)
    assert s["settings"]["datastore"] == "auto" and s["models"]["loaded"]
    assert await answer(client) == with_store

    push_settings(client, {"datastore": "none"})
    assert (await wait_loaded(client, 3)).startswith("ready")
    assert (await stats(client))["settings"]["datastore"] == "none"
    assert await answer(client) == with_store       # lossless: the store only changes the speed
    assert "datastore" not in (await last_lookup(client))["proposed"]
    assert len(ended_loads(client)) == 3
