"""The completion menu's selected item over the wire (LSP 3.18 selectedCompletionInfo, which
VS Code sends while its suggest widget is open): the real server over stdio (pytest-lsp, tiny
model pair) answers as if the selected item were accepted, with an item that starts with the
selected text and replaces the selected range (VS Code shows nothing else beside the widget),
and its cache keys on the selected text."""
from __future__ import annotations

import threading

import pytest
from lsprotocol import types

from lsp import commands
from tests.e2e.lsp_helpers import (_reference_backend, change_doc, inline_params, items, open_doc, push_settings,
                                   stats, tiny_options, tiny_server, wait_for_setting)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

SETTINGS = {"maxNewTokens": 24}
DOC = "def add(a, b):\n    re"          # the user typed `re`; the menu offers `return`
WORD = types.Range(start=types.Position(line=1, character=4), end=types.Position(line=1, character=6))


client = tiny_server(**SETTINGS)


def expected(uri: str, text: str, line: int, character: int) -> tuple[str, int]:
    """What the pipeline itself (in this process, same tiny pair and settings) answers at a
    codepoint position: (text, characters it replaces after the cursor)."""
    from lsp.backend import completion_options, completion_request
    from lsp.settings import settings_from

    options = completion_options(settings_from({**tiny_options(), **SETTINGS}))
    c = _reference_backend().pipeline.complete(completion_request(uri, text, line, character), options,
                                               cancel=threading.Event())
    assert c is not None, f"the tiny pair should complete {text!r} at {line}:{character}"
    return c.text, c.replace_end[1] - c.cursor[1]


async def ask(client, uri: str, line: int, character: int, text: str | None = None,
              rng: types.Range = WORD) -> list[types.InlineCompletionItem]:
    params = inline_params(uri, line, character)
    if text is not None:
        params.context.selected_completion_info = types.SelectedCompletionInfo(range=rng, text=text)
    return items(await client.text_document_inline_completion_async(params))


def pos(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


async def last_job(client) -> dict:
    return (await stats(client))["server"]["last_job"]


async def test_the_item_continues_the_selected_text_over_its_range(client):
    uri = "file:///work/selected_return.py"
    open_doc(client, uri, DOC)
    continuation, replace = expected(uri, "def add(a, b):\n    return", 1, 10)
    [item] = await ask(client, uri, 1, 6, "return")
    assert item.insert_text == "return" + continuation
    assert item.range == types.Range(start=pos(1, 4), end=pos(1, 6 + replace))
    # The prompt held the selected text: without it the answer continues `re` instead.
    [plain] = await ask(client, uri, 1, 6)
    assert plain.insert_text == expected(uri, DOC, 1, 6)[0] != continuation
    assert plain.range.start == pos(1, 6)


async def test_the_cache_keys_on_the_selected_text_and_accepting_it_finds_the_answer(client):
    uri = "file:///work/selected_cache.py"
    open_doc(client, uri, DOC)
    [ret] = await ask(client, uri, 1, 6, "return")
    assert not (await last_job(client))["from_cache"]
    # Another selected item is another prompt and another entry.
    [res] = await ask(client, uri, 1, 6, "result")
    assert res.insert_text == "result" + expected(uri, "def add(a, b):\n    result", 1, 10)[0]
    assert not (await last_job(client))["from_cache"]
    # Back to the first item: its own answer, from the cache.
    hits = (await stats(client))["pipeline"]["cache_hits"]
    [again] = await ask(client, uri, 1, 6, "return")
    assert again.insert_text == ret.insert_text and (await last_job(client))["from_cache"]
    assert (await stats(client))["pipeline"]["cache_hits"] == hits + 1
    # The user accepts `return` from the menu: the ghost text is the same rest, with no model run.
    change_doc(client, uri, 2, (1, 4), (1, 6), "return")
    [after] = await ask(client, uri, 1, 10)
    assert "return" + after.insert_text == ret.insert_text
    assert after.range.start == pos(1, 10) and (await last_job(client))["from_cache"]


async def test_utf16_positions_and_closers_after_the_selected_range(client):
    uri = "file:///work/selected_utf16.py"
    text = "value = 1\nprint('😀', va)\n"       # `va` at codepoints 11-13, utf-16 units 12-14
    open_doc(client, uri, text)
    continuation, replace = expected(uri, "value = 1\nprint('😀', value)\n", 1, 16)
    assert replace == 1, "the tiny pair closes the call here; the item must replace the `)`"
    word = types.Range(start=pos(1, 12), end=pos(1, 14))
    [item] = await ask(client, uri, 1, 14, "value", rng=word)
    assert item.insert_text == "value" + continuation
    assert item.range == types.Range(start=pos(1, 12), end=pos(1, 15))


async def test_a_range_outside_the_document_answers_nothing_and_the_server_goes_on(client):
    uri = "file:///work/selected_bad.py"
    open_doc(client, uri, DOC)
    before = (await stats(client))["server"]["out_of_range"]
    far = types.Range(start=pos(40, 0), end=pos(40, 2))
    assert await ask(client, uri, 1, 6, "return", rng=far) == []
    backwards = types.Range(start=pos(1, 6), end=pos(1, 4))
    assert await ask(client, uri, 1, 6, "return", rng=backwards) == []
    assert (await stats(client))["server"]["out_of_range"] == before + 2
    [item] = await ask(client, uri, 1, 6, "return")
    assert item.insert_text.startswith("return")


async def test_alternatives_continue_the_selected_text_too(client):
    uri = "file:///work/selected_alternatives.py"
    open_doc(client, uri, DOC)
    [greedy] = await ask(client, uri, 1, 6, "return")
    push_settings(client, {**tiny_options(**SETTINGS), "candidates": 3})
    await wait_for_setting(client, "candidates", 3)
    params = {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 6},
              "context": {"selectedCompletionInfo": {
                  "range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 6}},
                  "text": "return"}}}
    found = (await client.protocol.send_request_async(commands.ALTERNATIVES, params)).items
    assert found[0].insertText == greedy.insert_text and len(found) >= 2
    assert all(i.insertText.startswith("return") for i in found), [i.insertText for i in found]
    assert all((i.range.start.line, i.range.start.character) == (1, 4) for i in found)
    with pytest.raises(Exception, match="selectedCompletionInfo with range and text"):
        await client.protocol.send_request_async(commands.ALTERNATIVES, {
            **params, "context": {"selectedCompletionInfo": {"text": "return"}}})
