"""The `cudaGraphs` server option: the real server over stdio (pytest-lsp, tiny model pair on the
CPU, `device: cpu` even where a GPU exists), started with `--option cudaGraphs=true`. Asked for CUDA
graphs where the models cannot have them, the server says so in one warning, keeps running and
completes with the plain forward; the option stays in force when the editor's settings load the
models again."""
from __future__ import annotations

import dataclasses

import pytest
from lsprotocol import types

from lsp.backend import cuda_graphs_note, load_backend
from lsp.settings import Options, settings_from
from tests.e2e.lsp_helpers import (ended_loads, inline, items, open_doc, push_settings, reference,
                                   stats, tiny_options, tiny_server, wait_loaded)

DOC = "import os\n\n\ndef read(path):\n    with open(path) as f:\n        return f.\n"
AT = (5, len("        return f."))
SHORT = {"maxNewTokens": 16}

client = tiny_server(cudaGraphs=True, **SHORT)


def graph_warnings(client) -> list[types.ShowMessageParams]:
    return [m for m in client.messages if "cudaGraphs" in m.message]


async def completes_like_the_pipeline(client, uri: str) -> None:
    got = [i.insert_text for i in items(await inline(client, uri, *AT))]
    expected = reference(uri, DOC, *AT, **SHORT)   # the pipeline itself, no CUDA graphs asked
    assert got == ([expected] if expected else [])


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.timeout(300)
async def test_cuda_graphs_on_the_cpu_give_one_warning_and_completions_still_work(client):
    (warning,) = graph_warnings(client)
    assert warning.type == types.MessageType.Warning
    assert warning.message == ("specfill: cudaGraphs needs a CUDA device: the models run on cpu, "
                               "with plain forward passes")
    s = await stats(client)
    assert s["options"]["cudaGraphs"] is True and s["models"]["loaded"]
    assert s["server"]["load_failures"] == 0
    uri = "file:///work/graphs_warned.py"
    open_doc(client, uri, DOC)
    await completes_like_the_pipeline(client, uri)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.timeout(300)
async def test_the_option_outlives_a_reload_and_no_editor_can_turn_it_off(client):
    uri = "file:///work/graphs_reloaded.py"
    open_doc(client, uri, DOC)
    loads = len(ended_loads(client))
    warned = len(graph_warnings(client))
    # an editor's section that still names it: told it is an option, and it stays on
    push_settings(client, {**tiny_options(), **SHORT, "cudaGraphs": False, "maxCacheTokens": 4096})
    assert (await wait_loaded(client, loads + 1)).startswith("ready")   # maxCacheTokens: a reload
    assert len(graph_warnings(client)) == warned + 2      # no longer a setting, and said again for the load
    assert any("cudaGraphs is no longer a setting" in m.message for m in graph_warnings(client)[warned:])
    s = await stats(client)
    assert s["options"]["cudaGraphs"] is True and s["settings"]["maxCacheTokens"] == 4096
    await completes_like_the_pipeline(client, uri)


def test_a_remote_target_is_told_that_graphs_are_for_local_models():
    # No connection is made: a remote engine probes its server on the first request.
    loaded = load_backend(settings_from({"targetModel": "http://127.0.0.1:9", "cudaGraphs": True}))
    assert cuda_graphs_note(loaded) == ("cudaGraphs is for local models: a remote target runs its "
                                        "own forward passes")
    off = dataclasses.replace(loaded, settings=loaded.settings.replace(options=Options()))
    assert cuda_graphs_note(off) is None
