"""User acceptance over the wire: the real server over stdio (pytest-lsp, tiny model pair) gets
the editor's specfill/shown, specfill/accepted and specfill/dismissed reports and the items'
`specfill.accepted` command, and `specfill.stats` counts them apart from draft-token acceptance."""
from __future__ import annotations

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from lsp import commands
from tests.e2e.lsp_helpers import (inline, items, open_doc, push_settings, stats, tiny_options, tiny_server,
                                   wait_for_setting, wait_until)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

DOC = "import os\n\n\ndef add(a, b):\n    \n\n\ndef read(path):\n    with open(path) as f:\n        \n"
DOC_URI = "file:///work/telemetry.py"
POSITIONS = [(4, 4), (9, 8), (3, 0), (8, 4), (0, 9), (7, 0)]


server = tiny_server(maxNewTokens=16)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(server):
    open_doc(server, DOC_URI, DOC)
    return server


async def suggestions(client, count: int) -> list[types.InlineCompletionItem]:
    """`count` non-empty items from different places of the document."""
    found = []
    for line, character in POSITIONS:
        found += items(await inline(client, DOC_URI, line, character))
        if len(found) >= count:
            return found[:count]
    raise AssertionError(f"only {len(found)} non-empty suggestions at {POSITIONS}")


def suggestion_id(item: types.InlineCompletionItem) -> int:
    assert item.command is not None and item.command.command == commands.ACCEPTED
    (args,) = item.command.arguments
    assert args["length"] == len(item.insert_text)
    return args["id"]


def notify(client, method: str, params) -> None:
    client.protocol.notify(method, params)


async def user_acceptance(client, until=lambda u: True) -> dict:
    """The userAcceptance figures once `until` holds (notifications have no answer to await)."""
    latest = {}

    async def poll():
        latest.update((await stats(client))["userAcceptance"])
        return until(latest)

    for _ in range(500):
        if await poll():
            return latest
    raise AssertionError(f"userAcceptance never got there: {latest}")


async def test_reports_and_the_accept_command_count_once_per_suggestion(client):
    whole, part, dropped, ignored = await suggestions(client, 4)
    ids = [suggestion_id(i) for i in (whole, part, dropped, ignored)]
    assert len(set(ids)) == 4
    before = await user_acceptance(client)
    assert before["displayed"] == 0 and before["userAcceptanceRate"] == 0.0

    for sid in ids[:3]:
        notify(client, commands.SHOWN, {"id": sid})
        notify(client, commands.SHOWN, {"id": sid})   # drawn again: still one suggestion
    u = await user_acceptance(client, lambda u: u["displayed"] == 3)
    assert (u["pending"], u["displayedChars"]) == (3, sum(len(i.insert_text) for i in (whole, part, dropped)))

    # A full accept is the item's own command, as the client runs it (LSP 3.18).
    reply = await client.workspace_execute_command_async(types.ExecuteCommandParams(
        command=whole.command.command, arguments=whole.command.arguments))
    assert reply == {"id": ids[0]}
    # A partial accept, then the rest dismissed: it stays accepted in part.
    taken = max(1, len(part.insert_text) // 2)
    notify(client, commands.ACCEPTED_PART, {"id": ids[1], "acceptedLength": taken, "full": False})
    notify(client, commands.DISMISSED, {"id": ids[1]})
    notify(client, commands.DISMISSED, {"id": ids[2]})
    u = await user_acceptance(client, lambda u: u["dismissed"] == 1 and u["acceptedPartly"] == 1)
    assert u == {
        "displayed": 3, "acceptedFully": 1, "acceptedPartly": 1, "dismissed": 1, "pending": 0,
        "userAcceptanceRate": round(2 / 3, 4), "fullAcceptanceRate": round(1 / 3, 4),
        "displayedChars": u["displayedChars"], "acceptedChars": len(whole.insert_text) + taken,
        "charAcceptanceRate": round((len(whole.insert_text) + taken) / u["displayedChars"], 4),
        "unknownReports": 0}

    # An accept that was never reported shown counts as shown too; accepting the rest of the
    # part-accepted one makes it a full accept.
    notify(client, commands.ACCEPTED_PART, {"id": ids[3], "acceptedLength": 1})
    notify(client, commands.ACCEPTED_PART, {"id": ids[1], "acceptedLength": len(part.insert_text)})
    u = await user_acceptance(client, lambda u: u["displayed"] == 4 and u["acceptedFully"] == 2)
    assert (u["acceptedPartly"], u["dismissed"], u["userAcceptanceRate"]) == (1, 1, 0.75)
    # Draft-token acceptance is the pipeline's own figure, under another name.
    s = await stats(client)
    assert "acceptance_rate" in s["pipeline"] and not set(s["userAcceptance"]) & set(s["pipeline"])


async def test_malformed_reports_are_one_log_line_and_change_nothing(client):
    (item,) = await suggestions(client, 1)
    sid = suggestion_id(item)
    before = await user_acceptance(client)
    for method, params in ((commands.SHOWN, {}), (commands.SHOWN, {"id": "seven"}),
                           (commands.ACCEPTED_PART, {"id": sid, "acceptedLength": -2}),
                           (commands.ACCEPTED_PART, {"id": sid, "acceptedLength": 3, "full": "yes"}),
                           (commands.DISMISSED, [sid])):
        notify(client, method, params)
    notify(client, commands.DISMISSED, {"id": 10 ** 9})   # well-formed, but no such suggestion
    after = await user_acceptance(client, lambda u: u["unknownReports"] == before["unknownReports"] + 1)
    assert {k: v for k, v in after.items() if k != "unknownReports"} == {
        k: v for k, v in before.items() if k != "unknownReports"}
    await wait_until(lambda: sum("ignored specfill/" in m.message for m in client.log_messages) >= 5,
                     30, "a warning per malformed report")
    warnings = [m for m in client.log_messages if "ignored specfill/" in m.message]
    assert all(m.type == types.MessageType.Warning and "\n" not in m.message for m in warnings)
    assert any("id must be a non-negative integer, got 'seven'" in m.message for m in warnings)
    # The command refuses bad arguments with an error answer, and the server goes on.
    with pytest.raises(Exception, match="specfill.accepted takes one argument"):
        await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command=commands.ACCEPTED, arguments=[]))
    assert items(await inline(client, DOC_URI, *POSITIONS[0])) is not None
    assert (await user_acceptance(client))["displayed"] == before["displayed"]


async def test_alternatives_are_the_greedy_one_then_different_samples(client):
    for line, character in POSITIONS:
        shown = items(await inline(client, DOC_URI, line, character))
        if shown:
            greedy = shown[0]
            break
    else:
        raise AssertionError(f"no suggestion at {POSITIONS}")
    params = {"textDocument": {"uri": DOC_URI}, "position": {"line": line, "character": character}}
    # candidates 1 (the default): the greedy one only.
    one = await client.protocol.send_request_async(commands.ALTERNATIVES, params)
    assert [i.insertText for i in one.items] == [greedy.insert_text]
    push_settings(client, {**tiny_options(maxNewTokens=16), "candidates": 3})
    await wait_for_setting(client, "candidates", 3)
    found = (await client.protocol.send_request_async(commands.ALTERNATIVES, params)).items
    texts = [i.insertText for i in found]
    assert texts[0] == greedy.insert_text and 2 <= len(texts) <= 3
    assert len({t.rstrip() for t in texts}) == len(texts)
    ids = [i.command.arguments[0].id for i in found]
    assert len(set(ids)) == len(ids)   # each one reported on its own
    # The ordinary request still answers the greedy one (samples are not cached).
    assert [i.insert_text for i in items(await inline(client, DOC_URI, line, character))] == texts[:1]
    with pytest.raises(JsonRpcInvalidParams, match="needs textDocument.uri and position"):
        await client.protocol.send_request_async(commands.ALTERNATIVES, {"position": {}})
    # a position out of range: the Invalid Params answer textDocument/inlineCompletion gets
    with pytest.raises(JsonRpcInvalidParams, match=r"invalid params: Position.line should be in range .* but was -1"):
        await client.protocol.send_request_async(commands.ALTERNATIVES, {**params, "position": {"line": -1, "character": 0}})
