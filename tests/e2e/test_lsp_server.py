"""The real specfill server process over stdio, driven by pytest-lsp, with a real tiny model pair
(tests/tiny_models.py). One server process for the module (loading models is the slow part),
and one that holds every request on the server for a while (the debounceMs option), for what
happens to a request that waits; before every test `reset` closes every document and puts the
settings back, so each test stands alone and can run by itself or in any order."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled

from lsp import commands

from tests.e2e.lsp_helpers import (SERVER_COMMAND, SERVER_ENV, change_doc, ended_loads, init_params,
                         inline, inline_params, items, make_client, open_doc, push_settings,
                         reference, reset, stats, stop_client, tiny_options, tiny_server,
                         wait_for_setting, wait_loaded, wait_until, wait_until_idle)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

DOC = ("import json\n\n\n"
       "def load(path):\n"
       "    # read the file 😋 at path\n"
       "    with open(path) as f:\n"
       "        return json.\n\n\n"
       "def save(path, data):\n"
       "    \n")
DOC_URI = "file:///work/doc.py"
PULLED = {"maxNewTokens": 24}   # what the client answers to workspace/configuration


shared = tiny_server(pulled=PULLED)
HOLD_MS = 3000   # how long the second server holds a request before decoding it
holding = tiny_server(pulled=PULLED, debounceMs=HOLD_MS)


@pytest_asyncio.fixture(loop_scope="module")
async def client(shared):
    await reset(shared, {**tiny_options(), **PULLED})
    return shared


@pytest_asyncio.fixture(loop_scope="module")
async def held(holding):
    """The server that holds each request HOLD_MS before decoding it."""
    await reset(holding, {**tiny_options(), **PULLED})
    assert (await stats(holding))["options"]["debounceMs"] == HOLD_MS
    return holding


def ref(uri: str, text: str, line: int, character: int, **settings) -> str:
    return reference(uri, text, line, character, **{**PULLED, **settings})


async def test_capabilities_advertise_inline_completion_and_incremental_sync(client):
    caps = client.init_result.capabilities
    assert caps.inline_completion_provider is not None
    assert caps.completion_provider is not None
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert set(caps.execute_command_provider.commands) == set(commands.ALL.values())
    assert caps.position_encoding == types.PositionEncodingKind.Utf16
    assert client.init_result.server_info.name == "specfill"


async def test_startup_applies_initialization_options_then_the_pulled_configuration():
    """A server of its own (completions off, so no models load): initializationOptions first,
    then the workspace/configuration pull on top."""
    fresh = make_client()
    fresh.set_configuration({"maxNewTokens": 24, "maxLines": 3}, section="specfill")
    await fresh.start_io(*SERVER_COMMAND, env=SERVER_ENV)
    try:
        await fresh.initialize_session(init_params({"enable": False, "maxLines": 5,
                                                    "prefixTokens": 512}))
        await wait_for_setting(fresh, "maxNewTokens", 24)
        s = await stats(fresh)
        assert (s["settings"]["enable"], s["settings"]["prefixTokens"]) == (False, 512)
        assert s["settings"]["maxLines"] == 3       # the pull wins over initializationOptions
        assert not s["models"]["loaded"] and not s["models"]["loading"]
        await fresh.shutdown_session()
    finally:
        await stop_client(fresh)


async def test_request_while_models_load_gets_an_empty_result(client):
    open_doc(client, "file:///early.py", "def f(x):\n    return ")
    loads = len(ended_loads(client))
    before = (await stats(client))["server"]["while_loading"]
    reply = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands.RELOAD))
    assert reply["reloading"] is True
    assert items(await inline(client, "file:///early.py", 1, 11)) == []
    assert (await stats(client))["server"]["while_loading"] == before + 1
    assert (await wait_loaded(client, loads + 1)).startswith("ready")


async def test_model_loading_reports_work_done_progress(client):
    tokens = set(client.progress_reports)
    loads = len(ended_loads(client))
    await client.workspace_execute_command_async(types.ExecuteCommandParams(command=commands.RELOAD))
    message = await wait_loaded(client, loads + 1)
    assert message.startswith("ready")
    [token] = set(client.progress_reports) - tokens
    begin, *_, end = client.progress_reports[token]
    assert isinstance(begin, types.WorkDoneProgressBegin) and "loading" in begin.message
    assert isinstance(end, types.WorkDoneProgressEnd) and end.message == message


async def test_settings_in_force_name_the_loaded_models(client):
    s = await stats(client)
    assert s["settings"]["maxNewTokens"] == PULLED["maxNewTokens"]
    assert s["settings"]["targetModel"] == tiny_options()["targetModel"]
    assert s["models"]["loaded"] and not s["models"]["loading"]
    # each loaded model's matmul kernels, as measured on this machine (engine/forward/matmul.py)
    kernels = s["models"]["matmulKernels"]
    assert set(kernels) == {"target", "draft"}
    assert all(k["verify"] in ("rows", "fp16") and k["note"] for k in kernels.values())


async def test_the_loaded_models_are_kept_out_of_the_garbage_collectors_passes(client):
    """After a load the server freezes what it has loaded (lsp/collector.py): a full pass over
    torch's and transformers' objects took 205-224 ms here and could land inside any request. The
    passes that remain are timed for specfill.stats."""
    before = (await stats(client))["garbageCollector"]
    assert before["frozen_objects"] > 100_000 and before["settle_ms"] > 0   # torch, transformers, the models
    for i in range(4):     # different documents: no answer comes from the completion cache
        open_doc(client, f"file:///gc{i}.py", f"def area_{i}(w, h):\n    return \n")
        await inline(client, f"file:///gc{i}.py", 1, 11)
    after = (await stats(client))["garbageCollector"]
    assert after["frozen_objects"] == before["frozen_objects"]     # requests freeze nothing
    assert after["passes"] >= before["passes"] and after["longest_ms"] >= before["longest_ms"]


async def test_inline_completion_equals_the_pipeline_at_a_non_ascii_position(client):
    uri = DOC_URI
    open_doc(client, uri, DOC)
    line = 4
    col = DOC.splitlines()[line].index("at path")          # after the emoji: codepoints
    utf16_col = col + 1                                     # the emoji is 2 utf-16 units
    expected = ref(uri, DOC, line, col)
    assert expected, "the tiny pair should complete here"
    [item] = items(await inline(client, uri, line, utf16_col))
    assert item.insert_text == expected
    assert item.range.start == types.Position(line=line, character=utf16_col)
    s = await stats(client)
    assert s["server"]["completions"] >= 1 and s["pipeline"]["requests"] >= 1


async def test_a_percent_encoded_uri_and_its_plain_spelling_are_one_document(held):
    """VS Code percent-encodes a path with a space or non-ASCII characters; the server knows
    the document by one key whichever spelling a message uses."""
    client = held
    encoded = Path("/work/my project/naïve façade.py").as_uri()
    plain = "file:///work/my project/naïve façade.py"
    assert encoded == "file:///work/my%20project/na%C3%AFve%20fa%C3%A7ade.py" != plain
    text = "def area(r):\n    return \n"
    open_doc(client, encoded, text)
    expected = ref(encoded, text, 1, 11)
    assert [i.insert_text for i in items(await inline(client, plain, 1, 11))] == \
        ([expected] if expected else [])
    # A request under one spelling supersedes the one in flight under the other.
    superseded = (await stats(client))["server"]["superseded"]
    first = asyncio.ensure_future(inline(client, encoded, 1, 11))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(inline(client, plain, 1, 11))
    first_result, second_result = await asyncio.gather(first, second)
    assert items(first_result) == []
    assert [i.insert_text for i in items(second_result)] == ([expected] if expected else [])
    s = await stats(client)
    assert s["server"]["superseded"] == superseded + 1 and s["openDocuments"] == 1
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=plain)))
    client.open_documents.discard(encoded)
    assert (await stats(client))["openDocuments"] == 0


async def test_completion_request_fallback_offers_the_same_text(client):
    open_doc(client, DOC_URI, DOC)
    line, col = 6, len("        return json.")
    expected = ref(DOC_URI, DOC, line, col)
    result = await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri=DOC_URI),
        position=types.Position(line=line, character=col)))
    got = [i.insert_text for i in result.items]
    assert got == ([expected] if expected else [])


async def test_incremental_changes_are_applied_before_completing(client):
    uri = "file:///work/edit.py"
    open_doc(client, uri, "def f(a, b):\n    \n")
    change_doc(client, uri, 2, (1, 4), (1, 4), "total = a")      # type on the empty line
    change_doc(client, uri, 3, (0, 4), (0, 5), "add")            # rename f -> add
    text = "def add(a, b):\n    total = a\n"
    [item] = items(await inline(client, uri, 1, 13)) or [None]
    assert (item.insert_text if item else "") == ref(uri, text, 1, 13)


async def test_pushed_settings_apply_and_an_invalid_one_keeps_its_value_with_a_message(client):
    open_doc(client, DOC_URI, DOC)
    push_settings(client, {"maxNewTokens": 8})
    await wait_for_setting(client, "maxNewTokens", 8)
    before = len(client.messages)
    push_settings(client, {"draftLength": 99, "maxNewTokens": 5})
    await wait_until(lambda: len(client.messages) > before, 30, "showMessage")
    msg = client.messages[-1]
    assert msg.type == types.MessageType.Error
    assert "draftLength" in msg.message and "99" in msg.message and 'keeping draftLength = "auto"' in msg.message
    # the invalid value keeps the one in force; the valid one beside it applies
    s = await stats(client)
    assert s["settings"]["maxNewTokens"] == 5 and s["settings"]["draftLength"] == "auto"
    # still serving, with those settings
    got = [i.insert_text for i in items(await inline(client, DOC_URI, 6, 20))]
    expected = ref(DOC_URI, DOC, 6, 20, maxNewTokens=5)
    assert got == ([expected] if expected else [])


async def test_a_push_without_values_makes_the_server_pull(client):
    client.set_configuration({"maxNewTokens": 12}, section="specfill")
    push_settings(client, None)
    await wait_for_setting(client, "maxNewTokens", 12)


async def test_a_newer_request_for_the_document_supersedes_the_one_in_flight(held):
    client = held
    uri = "file:///work/super.py"
    text = "def area(r):\n    return \n"
    open_doc(client, uri, text)
    superseded = (await stats(client))["server"]["superseded"]
    first = asyncio.ensure_future(inline(client, uri, 1, 11))
    await asyncio.sleep(0.05)
    second = asyncio.ensure_future(inline(client, uri, 1, 11))
    first_result, second_result = await asyncio.gather(first, second)
    assert items(first_result) == []                        # answered, but empty
    assert [i.insert_text for i in items(second_result)] == [t for t in [ref(uri, text, 1, 11)] if t]
    assert (await stats(client))["server"]["superseded"] == superseded + 1


async def test_cancel_request_during_debounce_answers_request_cancelled(held):
    client = held
    open_doc(client, DOC_URI, DOC)
    cancelled = (await stats(client))["server"]["cancelled"]
    fut = asyncio.ensure_future(client.protocol.send_request_async(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(DOC_URI, 6, 20),
        msg_id="cancel-me-1"))
    await asyncio.sleep(0.2)
    client.cancel_request(types.CancelParams(id="cancel-me-1"))
    with pytest.raises(JsonRpcRequestCancelled):
        await fut
    s = await stats(client)
    assert s["server"]["cancelled"] == cancelled + 1 and s["inflight"] == 0


async def test_cancel_request_stops_a_running_decode(client):
    push_settings(client, {"maxNewTokens": 1024, "multiline": "always", "maxLines": 200})
    await wait_for_setting(client, "maxNewTokens", 1024)
    uri = "file:///work/long.py"
    text = LONG_DOC
    open_doc(client, uri, text)
    before = await stats(client)
    fut = asyncio.ensure_future(client.protocol.send_request_async(
        types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params(uri, *LONG_AT), msg_id="cancel-me-2"))
    # Wait until the worker has started decoding this request, then cancel it.
    jobs = before["server"]["decode_jobs"]
    while (await stats(client))["server"]["decode_jobs"] == jobs:
        await asyncio.sleep(0.01)
    client.cancel_request(types.CancelParams(id="cancel-me-2"))
    with pytest.raises(JsonRpcRequestCancelled):
        await fut
    await wait_until_idle(client)
    after = await stats(client)
    assert after["server"]["stopped_jobs"] == before["server"]["stopped_jobs"] + 1
    assert after["pipeline"]["cancelled"] == before["pipeline"]["cancelled"] + 1


async def test_changing_the_draft_reloads_in_background_and_output_stays_the_targets(client):
    loads = len(ended_loads(client))
    loaded = (await stats(client))["server"]["loads"]
    push_settings(client, {"draftModel": "ngram"})
    await wait_loaded(client, loads + 1)
    s = await stats(client)
    assert s["models"]["draftModel"] == "ngram" and s["server"]["loads"] == loaded + 1
    assert s["models"]["matmulKernels"]["draft"] is None    # prompt lookup has no matmuls
    uri = "file:///work/ngram.py"
    open_doc(client, uri, DOC)
    got = [i.insert_text for i in items(await inline(client, uri, 6, len("        return json.")))]
    expected = ref(uri, DOC, 6, len("        return json."))     # reference drafts with the tiny model
    assert got == ([expected] if expected else [])


async def test_a_model_that_cannot_load_is_reported_and_the_previous_stays(client):
    open_doc(client, DOC_URI, DOC)
    loads = len(ended_loads(client))
    failures = (await stats(client))["server"]["load_failures"]
    before = len(client.messages)
    push_settings(client, {"targetModel": "/nonexistent/specfill-model"})
    message = await wait_loaded(client, loads + 1)
    assert message.startswith("failed")
    error = client.messages[before:][-1]
    assert error.type == types.MessageType.Error and "/nonexistent/specfill-model" in error.message
    s = await stats(client)
    assert s["settings"]["targetModel"] == tiny_options()["targetModel"]
    assert s["models"]["loaded"] and s["server"]["load_failures"] == failures + 1
    col = len("        return json.")
    got = [i.insert_text for i in items(await inline(client, DOC_URI, 6, col))]
    expected = ref(DOC_URI, DOC, 6, col)
    assert got == ([expected] if expected else [])


async def test_stats_and_reload_commands(client):
    open_doc(client, DOC_URI, DOC)
    requests = (await stats(client))["server"]["requests"]
    await inline(client, DOC_URI, 6, len("        return json."))
    s = await stats(client)
    pipeline = s["pipeline"]
    for key in ("latency_ms", "acceptance_rate", "tokens_per_target_call", "kv_reuse",
                "cache_hit_rate", "requests"):
        assert key in pipeline
    assert pipeline["latency_ms"]["p50"] is not None
    assert s["server"]["requests"] == requests + 1 and s["pendingRequests"] <= 2
    # the drafting policy's current estimates (engine/policy.py)
    policy = pipeline["policy"]
    assert policy["rounds"] >= 1 and policy["verify_ms"]["1"] > 0
    assert set(policy) >= {"acceptance", "model"} and policy["acceptance"]
    loads = len(ended_loads(client))
    reply = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands.RELOAD))
    assert reply["reloading"] is True
    assert (await wait_loaded(client, loads + 1)).startswith("ready")


LONG_DOC = "class Parser:\n    def __init__(self, text):\n        \n"
LONG_AT = (2, 8)
