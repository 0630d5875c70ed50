"""Extra context the way users work, over the wire: the real server over stdio (pytest-lsp, tiny
model pair) takes chunks of other documents around their latest edits (didChange, throttled, the
last edit before moving on included), around lines the user visited (specfill/visited) and of
text the user yanked (specfill/yanked), and puts them in the prompt of a request in another
document; `specfill.lastCompletion` lists the chunks the prompt held."""
from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsprotocol import types

from lsp import commands
from tests.e2e.lsp_helpers import change_doc, inline, open_doc, reset, stats, tiny_options, tiny_server, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

MAIN_URI = "file:///work/app/main.py"
MAIN = "import util\n\n\ndef run(items):\n    total = 0\n    \n"
UTIL_URI = "file:///work/app/util.py"
UTIL = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n" for i in range(60))   # 180 lines
SETTINGS = {**tiny_options(), "extraTokens": 512, "maxNewTokens": 8}


# The sources are a server option (extraContextFrom): one server takes all of them, one only yanks.
shared = tiny_server(**SETTINGS, extraContextFrom="open,edits,yanks,visits")
yanks_only = tiny_server(**SETTINGS, extraContextFrom="yanks")


@pytest_asyncio.fixture(loop_scope="module")
async def client(shared):
    await reset(shared, SETTINGS)
    return shared


async def prompt_context(client, uri: str, line: int, character: int) -> list[dict]:
    """The extra-context chunks of the prompt a request at (line, character) ran the model on."""
    await inline(client, uri, line, character)
    run = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands.LAST_COMPLETION))
    assert "extra_context" in run, f"no model run for the request: {run}"
    return run["extra_context"]


def notify(client, method: str, params) -> None:
    client.protocol.notify(method, params)


async def test_an_edit_in_another_document_puts_its_edited_region_into_the_prompt(client):
    open_doc(client, MAIN_URI, MAIN)
    open_doc(client, UTIL_URI, UTIL)
    # Two edits at line 120 of util.py, back to back: the first is noted at once, the second
    # (within the throttle interval) when the user moves on and types in main.py.
    change_doc(client, UTIL_URI, 2, (120, 0), (120, 0), "EDITED_FIRST = 1\n")
    change_doc(client, UTIL_URI, 3, (121, 0), (121, 0), "EDITED_SECOND = 2\n")
    change_doc(client, MAIN_URI, 2, (5, 4), (5, 4), "t")
    chunks = await prompt_context(client, MAIN_URI, 5, 5)
    edits = [c for c in chunks if c["source"] == "edits"]
    assert len(edits) == 1 and edits[0]["path"] == "app/util.py"
    assert "EDITED_FIRST = 1\nEDITED_SECOND = 2\n" in edits[0]["text"]
    assert "def helper_40(x)" in edits[0]["text"]       # lines around the edit, not the top
    # Opening util.py offered its top; the region around the edit is the newer chunk, last.
    assert chunks[-1] == edits[0]
    assert any(c["source"] == "open" and "def helper_0(x)" in c["text"] for c in chunks)
    # The document asked about never gives its own edits.
    assert all(c["path"] != "app/main.py" for c in chunks)


async def test_yanked_text_and_visited_lines_reach_the_prompt(client):
    open_doc(client, MAIN_URI, MAIN)
    open_doc(client, UTIL_URI, UTIL)
    notify(client, commands.VISITED, {"textDocument": {"uri": UTIL_URI}, "position": {"line": 90, "character": 0}})
    yanked = "def helper_33(x):\n    return x * 33\n"
    notify(client, commands.YANKED, {"textDocument": {"uri": UTIL_URI}, "text": yanked})
    chunks = await prompt_context(client, MAIN_URI, 5, 4)
    assert [c["source"] for c in chunks][-2:] == ["visits", "yanks"]
    assert "def helper_30(x)" in chunks[-2]["text"] and chunks[-2]["path"] == "app/util.py"
    assert chunks[-1]["text"] == yanked


async def test_the_extra_context_from_option_chooses_the_sources(yanks_only):
    client = yanks_only
    await reset(client, SETTINGS)
    open_doc(client, MAIN_URI, MAIN)
    open_doc(client, UTIL_URI, UTIL)
    change_doc(client, UTIL_URI, 2, (120, 0), (120, 0), "NOT_NOTED = 1\n")
    notify(client, commands.VISITED, {"textDocument": {"uri": UTIL_URI}, "position": {"line": 30, "character": 0}})
    notify(client, commands.YANKED, {"textDocument": {"uri": UTIL_URI}, "text": "value = helper_12(4) + 1\n"})
    chunks = await prompt_context(client, MAIN_URI, 5, 4)
    assert {c["source"] for c in chunks} == {"yanks"}
    assert chunks[-1]["text"] == "value = helper_12(4) + 1\n"


async def test_malformed_context_reports_are_one_log_line(client):
    open_doc(client, MAIN_URI, MAIN)
    for method, params in ((commands.YANKED, {"textDocument": {"uri": MAIN_URI}}),
                           (commands.YANKED, {"text": "no document"}),
                           (commands.VISITED, {"textDocument": {"uri": MAIN_URI}, "position": {"line": -1}}),
                           (commands.VISITED, [MAIN_URI, 3])):
        notify(client, method, params)
    def warnings():
        return [m for m in client.log_messages
                if "ignored specfill/yanked: " in m.message or "ignored specfill/visited: " in m.message]
    await wait_until(lambda: len(warnings()) >= 4, 30, "a warning per malformed report")
    assert all(m.type == types.MessageType.Warning and "\n" not in m.message for m in warnings())
    assert any("ignored specfill/visited: params need position.line >= 0" in m.message for m in warnings())
    await prompt_context(client, MAIN_URI, 5, 4)    # the server goes on answering


async def test_an_opened_document_is_read_for_prompt_lookup_before_its_first_request(client):
    """Opening a document tokenizes its blocks for prompt lookup on the idle worker
    (lsp/documents.py warm_lookup): the first request in it reads the whole document beyond its
    prompt but tokenizes only the blocks at its cursor. (Models loaded afresh: the earlier tests'
    requests may have found that reading the documents does not pay, and then nothing is warmed.)"""
    reload = await client.workspace_execute_command_async(types.ExecuteCommandParams(command=commands.RELOAD))
    assert reload["reloading"]
    await reset(client, SETTINGS)
    uri = "file:///work/app/opened.py"
    text = "".join(f"def opened_{i}(x, y):\n" + "".join(f"    x = x * {j} + y  # step {i}.{j}\n"
                                                         for j in range(i % 5 + 1)) + "\n" for i in range(300))
    warmed = (await stats(client))["server"]["lookup_warmed_tokens"]
    open_doc(client, uri, text)
    for _ in range(500):     # the worker's job is done when the count moves (10 s at most)
        now = (await stats(client))["server"]["lookup_warmed_tokens"]
        if now > warmed:
            break
        await asyncio.sleep(0.02)
    assert now - warmed > 5000
    lines = text.split("\n")
    line = 700 if lines[700] else 701
    await inline(client, uri, line, len(lines[line]))
    run = await client.workspace_execute_command_async(types.ExecuteCommandParams(command=commands.LAST_COMPLETION))
    lookup = run["lookup"]
    assert lookup["block_tokens"] > 5000 and lookup["read_tokenized"] < 0.05 * lookup["block_tokens"], lookup
