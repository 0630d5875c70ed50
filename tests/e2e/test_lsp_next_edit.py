"""specfill/nextEdit over the wire: the real server over stdio (pytest-lsp), `nextEdit: demo` (the
shipped demo target as the edit model, which cannot predict edits: these tests check the
mechanics, never what it suggests). After didOpen and a few didChange edits the answer is an
edit inside the region around the cursor whose application gives the region as the model
rewrote it; with `nextEdit: off` or no edits it is null; bad params are -32602 and the server
goes on answering."""
from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled

from lsp import commands
from tests.e2e.lsp_helpers import (change_doc, open_doc, push_settings, stats, tiny_server,
                                   wait_for_setting)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

DOC = ("import math\n\n\ndef area(width, height):\n    result = width * height\n    return result\n\n\n"
       "def perimeter(width, height):\n    total = 2 * (width + height)\n    return total\n")

client = tiny_server(nextEdit="demo")


def params(uri: str, line: int, character: int) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


async def ask(client, uri: str, line: int, character: int):
    return await client.protocol.send_request_async(commands.NEXT_EDIT, params(uri, line, character))


def utf16_to_index(line: str, units: int) -> int:
    """The codepoint index of `units` UTF-16 code units into `line`."""
    n = 0
    for i, ch in enumerate(line):
        if n >= units:
            return i
        n += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def apply(text: str, edit) -> str:
    """The document `text` with the answer's edit applied, as a client applies it (UTF-16)."""
    lines = text.split("\n")

    def offset(p) -> int:
        return sum(len(x) + 1 for x in lines[:p["line"]]) + utf16_to_index(lines[p["line"]], p["character"])
    r = edit["range"]
    return text[:offset(r["start"])] + edit["newText"] + text[offset(r["end"]):]


def plain(result) -> dict | None:
    """The answer as plain JSON (pygls hands a dict result back as a named tuple)."""
    if result is None:
        return None
    from lsp.telemetry import plain as to_plain
    return to_plain(result)


async def edited(client, uri: str) -> str:
    """Open DOC at `uri` and make three edits (a rename typed in place, then a new line); the text now."""
    open_doc(client, uri, DOC)
    change_doc(client, uri, 2, (3, 9), (3, 14), "w")           # width -> w in the signature
    change_doc(client, uri, 3, (4, 13), (4, 18), "w")          # ... and in the body
    change_doc(client, uri, 4, (5, 17), (5, 17), "  # area")
    text = DOC.replace("area(width", "area(w").replace("= width *", "= w *")
    return text.replace("    return result\n", "    return result  # area\n", 1)


async def test_the_answer_is_an_edit_in_the_region_that_gives_the_models_rewrite(client):
    uri = "file:///work/next_edit_demo.py"
    text = await edited(client, uri)
    answer = plain(await ask(client, uri, 4, 8))
    last = (await stats(client))["nextEdit"]["last"]
    assert last["format"] == "copy" and last["verdict"] == "rewrite", last
    assert answer is not None, f"the demo's rewrite was the region itself here: {last}"
    assert answer["uri"] == uri and answer["id"].startswith("nextEdit-")
    first, end = last["region_lines"]
    r = answer["range"]
    assert first <= r["start"]["line"] <= r["end"]["line"] <= end
    # Applying the edit gives the document with the region as the model rewrote it, the rest kept.
    lines = text.split("\n")
    want = "\n".join(lines[:first] + last["rewrite"].split("\n") + lines[end + 1:])
    assert apply(text, answer) == want != text
    s = await stats(client)
    assert s["nextEdit"]["suggestions"] >= 1 and s["nextEdit"]["loaded"]


async def test_no_edits_yet_and_off_answer_null(client):
    uri = "file:///work/next_edit_fresh.py"
    open_doc(client, uri, DOC)
    # Other documents' edits are history too; a server with none answers null.
    push_settings(client, {"nextEdit": "off"})
    await wait_for_setting(client, "nextEdit", "off")
    assert await ask(client, uri, 4, 8) is None
    assert (await stats(client))["nextEdit"]["last"]["reason"].startswith("next-edit suggestions are off")
    push_settings(client, {"nextEdit": "demo"})
    await wait_for_setting(client, "nextEdit", "demo")
    # Switching off dropped the history: nothing was edited since.
    assert await ask(client, uri, 4, 8) is None
    assert (await stats(client))["nextEdit"]["last"]["reason"] == "no edit history yet"


async def test_bad_params_are_invalid_params_and_the_server_goes_on(client):
    uri = "file:///work/next_edit_bad.py"
    await edited(client, uri)
    for bad in ({"position": {"line": 0, "character": 0}},
                {"textDocument": {"uri": uri}, "position": {"line": "x", "character": 0}},
                {"textDocument": {"uri": uri}, "position": {"line": -1, "character": 0}},
                params(uri, 99, 0)):
        with pytest.raises(JsonRpcInvalidParams, match=f"{commands.NEXT_EDIT}: invalid params"):
            await client.protocol.send_request_async(commands.NEXT_EDIT, bad)
    assert plain(await ask(client, uri, 4, 8)) is not None


async def reload_edit_model(client) -> None:
    """nextEdit off and on again: the edit model (and the history) went, so the next request
    loads the model on the worker first (a few hundred ms), and requests sent just after it wait."""
    push_settings(client, {"nextEdit": "off"})
    await wait_for_setting(client, "nextEdit", "off")
    push_settings(client, {"nextEdit": "demo"})
    await wait_for_setting(client, "nextEdit", "demo")


async def test_a_newer_request_supersedes_a_waiting_one(client):
    await reload_edit_model(client)
    uri = "file:///work/next_edit_race.py"
    await edited(client, uri)
    before = (await stats(client))["nextEdit"]
    first = asyncio.ensure_future(ask(client, uri, 4, 8))
    second = asyncio.ensure_future(ask(client, uri, 4, 8))
    answers = await asyncio.gather(first, second)
    after = (await stats(client))["nextEdit"]
    assert answers[0] is None and plain(answers[1]) is not None
    assert after["superseded"] == before["superseded"] + 1 and after["loads"] == before["loads"] + 1


async def test_a_cancelled_request_is_answered_32800(client):
    await reload_edit_model(client)
    uri = "file:///work/next_edit_cancel.py"
    await edited(client, uri)
    before = (await stats(client))["nextEdit"]
    fut = asyncio.ensure_future(client.protocol.send_request_async(commands.NEXT_EDIT, params(uri, 4, 8),
                                                                   msg_id="next-edit-cancel-1"))
    await asyncio.sleep(0.02)      # sent, and its job started loading the model
    client.cancel_request(types.CancelParams(id="next-edit-cancel-1"))
    with pytest.raises(JsonRpcRequestCancelled):
        await fut
    after = (await stats(client))["nextEdit"]
    assert after["cancelled"] == before["cancelled"] + 1
    assert plain(await ask(client, uri, 4, 8)) is not None      # the server goes on
