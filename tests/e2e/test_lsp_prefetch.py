"""Prefetch over the wire: the real server over stdio (pytest-lsp, tiny model pair). After the
editor reports a suggestion shown, the server computes the next one as if it were accepted; the
request after the accept is then answered from the completion cache with no model run, and a
keystroke elsewhere stops the prefetch mid-decode and gets the answer it would have had anyway."""
from __future__ import annotations

import pytest
from lsprotocol import types

from lsp import commands
from lsp.prefetch import Answer, accepted_document
from tests.e2e.lsp_helpers import (change_doc, inline, items, open_doc, reference, reset, stats, tiny_options,
                                   tiny_server)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

DOC = "import os\n\n\ndef add(a, b):\n    \n\n\ndef read(path):\n    with open(path) as f:\n        \n"
URI = "file:///work/prefetch.py"
SHORT = {"maxNewTokens": 16}
# Long answers (decoded to maxNewTokens, about 1.5 s here, by a server started with the option
# stopWhileDecoding false): a prefetch is still decoding when the next keystroke comes.
LONG = {"maxNewTokens": 512, "multiline": "always", "maxLines": 200}
DECODE_ALL = {"stopWhileDecoding": False}


client = tiny_server(**SHORT)
decoding_all = tiny_server(**SHORT, **DECODE_ALL)


async def until(client, predicate, what: str) -> dict:
    for _ in range(3000):
        s = await stats(client)
        if predicate(s):
            return s
    raise AssertionError(f"never got {what}: {s['prefetch']}")


def engine_work(s: dict) -> int:
    """Tokens the models have read or decoded since the server started."""
    p = s["pipeline"]
    return p["decoded_tokens"] + p["prefill_tokens"] + p["reused_tokens"]


async def last_completion(client) -> dict:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=commands.LAST_COMPLETION))


def suggestion_id(item: types.InlineCompletionItem) -> int:
    return item.command.arguments[0]["id"]


async def shown_suggestion(client, line: int, character: int):
    """Ask at (line, character) of DOC; the item and where accepting it leads."""
    (item,) = items(await inline(client, URI, line, character))
    assert (item.range.start.line, item.range.start.character) == (line, character)
    end = (item.range.end.line, item.range.end.character)
    after = accepted_document(Answer(URI, DOC, (line, character), end, item.insert_text))
    return item, after


def accept(client, item: types.InlineCompletionItem, version: int) -> None:
    """What the editor does on Tab: the item's text over its range."""
    r = item.range
    change_doc(client, URI, version, (r.start.line, r.start.character), (r.end.line, r.end.character),
               item.insert_text)


async def test_the_request_after_an_accept_is_answered_from_the_prefetch(client):
    await reset(client, tiny_options(**SHORT))
    open_doc(client, URI, DOC)
    item, (text, line, character) = await shown_suggestion(client, 4, 4)
    before = await stats(client)
    assert before["prefetch"]["run"] == 0 and before["settings"]["prefetch"] is True
    last_request = await last_completion(client)

    client.protocol.notify(commands.SHOWN, {"id": suggestion_id(item)})
    s = await until(client, lambda s: s["prefetch"]["ready"] == 1 and not s["inflight"], "a finished prefetch")
    assert s["prefetch"]["run"] == 1
    assert await last_completion(client) == last_request   # still the request's own figures
    model_work = engine_work(s)
    assert model_work > engine_work(before)   # the prefetch itself ran the model
    # ... as a background run: not a request, nor in the requests' latencies
    p, q = s["pipeline"], before["pipeline"]
    assert p["background_runs"] == q["background_runs"] + 1
    assert (p["requests"], p["latency_ms"], p["model_latency_ms"]) == (q["requests"], q["latency_ms"], q["model_latency_ms"])

    accept(client, item, 2)
    answer = items(await inline(client, URI, line, character))
    s = await stats(client)
    assert engine_work(s) == model_work           # no model run for it: nothing read or decoded
    assert s["server"]["last_job"]["from_cache"] is True
    assert s["pipeline"]["cache_hits"] == before["pipeline"]["cache_hits"] + 1
    assert s["prefetch"]["used"] == 1 and s["prefetch"]["cancelled"] == 0
    # The same answer the pipeline gives there from scratch.
    assert [i.insert_text for i in answer] == [t for t in [reference(URI, text, line, character, **SHORT)] if t]

    # Shown again (drawn once more): nothing new to prefetch for the same place.
    client.protocol.notify(commands.SHOWN, {"id": suggestion_id(item)})
    s = await until(client, lambda s: not s["inflight"], "an idle server")
    assert s["prefetch"]["run"] == 1


async def test_a_keystroke_elsewhere_stops_the_prefetch_and_gets_its_own_answer(decoding_all):
    client = decoding_all
    await reset(client, tiny_options(**LONG))
    open_doc(client, URI, DOC)
    item, _ = await shown_suggestion(client, 4, 4)
    before = await stats(client)
    client.protocol.notify(commands.SHOWN, {"id": suggestion_id(item)})
    await until(client, lambda s: s["prefetch"]["run"] == before["prefetch"]["run"] + 1 and s["workerBusy"],
                "a prefetch decoding")

    # The user types "x" instead of accepting: the prefetch stops, the request is answered.
    change_doc(client, URI, 2, (4, 4), (4, 4), "x")
    answer = items(await inline(client, URI, 4, 5))
    s = await stats(client)
    grew = {k: s["prefetch"][k] - before["prefetch"][k] for k in ("run", "ready", "used", "joined", "cancelled")}
    assert grew == {"run": 1, "ready": 0, "used": 0, "joined": 0, "cancelled": 1}
    # Stopped mid-decode (the engine's cancel), not left to finish; a background run, so the
    # requests' own count of cancellations stays as it was.
    assert s["pipeline"]["background_cancelled"] == before["pipeline"]["background_cancelled"] + 1
    assert s["pipeline"]["cancelled"] == before["pipeline"]["cancelled"]
    typed = DOC.replace("def add(a, b):\n    \n", "def add(a, b):\n    x\n")
    assert [i.insert_text for i in answer] == [t for t in [reference(URI, typed, 4, 5, **LONG, **DECODE_ALL)] if t]


async def test_prefetch_false_turns_it_off(client):
    await reset(client, tiny_options(**SHORT, prefetch=False))
    open_doc(client, URI, DOC)
    item, (_, line, character) = await shown_suggestion(client, 4, 4)
    before = await stats(client)
    client.protocol.notify(commands.SHOWN, {"id": suggestion_id(item)})
    accept(client, item, 2)
    items(await inline(client, URI, line, character))
    s = await stats(client)
    assert s["prefetch"] == before["prefetch"]
    assert engine_work(s) > engine_work(before)   # the request ran the model
