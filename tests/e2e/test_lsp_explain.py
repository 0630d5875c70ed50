"""The real server says why: a setting it does not know is named with the closest known one, a bad
value is told once however many ways it arrives, a malformed request gets an error response (and
no traceback), a document it will not complete is reported to the editor and in specfill.stats, and
an empty answer keeps the figures of its run."""
from __future__ import annotations

import asyncio
import subprocess

import pytest
import pytest_asyncio
from lsprotocol import types

from lsp import commands
from tests.e2e.lsp_helpers import (SERVER_COMMAND, SERVER_ENV, frame, init_params, inline, items, make_client,
                                   open_doc, parse_frames, push_settings, reference, reset, server_stdin, stats,
                                   stop_client, tiny_options, tiny_server, wait_for_setting, wait_until)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]


def shown(client, text: str) -> list[types.ShowMessageParams]:
    return [m for m in client.messages if text in m.message]


async def started(options: dict, pulled: dict | None = None):
    """A hand-started server (no models: `enable` false unless `options` says otherwise)."""
    client = make_client()
    if pulled is not None:
        client.set_configuration(dict(pulled), section="specfill")
    await client.start_io(*SERVER_COMMAND, env=SERVER_ENV)
    await client.initialize_session(init_params(options))
    return client


async def test_an_unknown_setting_is_named_once_with_the_closest_known_one():
    section = {"enable": False, "maxNewToken": 12}
    client = await started(section, pulled=section)   # initializationOptions, then the same pulled
    try:
        push_settings(client, section)                # and pushed
        await wait_until(lambda: shown(client, "maxNewToken"), 30, "the notice")
        await asyncio.sleep(1.0)   # time for the pull and the push to be told again (they are not)
        notices = shown(client, "maxNewToken")
        assert [(m.type, m.message) for m in notices] == [(
            types.MessageType.Warning,
            "specfill: unknown setting 'maxNewToken' (did you mean maxNewTokens?); ignored")]
        # the known settings still apply
        assert (await stats(client))["settings"]["enable"] is False
    finally:
        await stop_client(client)


async def test_a_removed_setting_is_one_line_saying_where_it_went_and_the_rest_applies():
    """An editor's config from before: benchmark switches are server options now, and the remote
    connection is one object. Each old name is one warning line; nothing else is lost."""
    section = {"enable": False, "maxLines": 3, "kvReuse": False, "apiKeyEnv": "TEAM_KEY",
               "remote": {"readTimeout": 500}}
    client = await started(section, pulled=section)
    try:
        await wait_until(lambda: shown(client, "kvReuse"), 30, "the notice")
        await asyncio.sleep(1.0)   # the pull is not told again
        [notice] = shown(client, "no longer a setting")
        assert notice.type == types.MessageType.Warning
        assert notice.message.split("; ") == [
            "specfill: specfill.apiKeyEnv is no longer a setting: it is specfill.remote.apiKeyEnv",
            "ignored",
            "specfill.kvReuse is no longer a setting: it is a server option "
            "(specfill serve --option kvReuse=VALUE)",
            "ignored",
            "unknown setting 'remote.readTimeout' (did you mean remote.readTimeoutMs?)",
            "ignored"]
        s = await stats(client)
        assert s["settings"]["maxLines"] == 3 and s["settings"]["enable"] is False
        assert s["options"]["kvReuse"] is True and s["settings"]["remote"]["apiKeyEnv"] == ""
    finally:
        await stop_client(client)


async def test_an_invalid_value_is_one_notice_whatever_route_it_came_by():
    section = {"enable": False, "temperature": 5}
    client = await started(section, pulled=section)
    try:
        push_settings(client, section)
        await wait_until(lambda: shown(client, "temperature"), 30, "the notice")
        await asyncio.sleep(1.0)
        notices = shown(client, "temperature")
        assert len(notices) == 1, [m.message for m in client.messages]
        assert notices[0].type == types.MessageType.Error
        assert notices[0].message == ("specfill: invalid value for specfill.temperature: 5 (allowed: number 0-2); "
                                      "keeping temperature = 0.0")
        # the rest of the section applies: one mistake does not undo the user's other settings
        assert (await stats(client))["settings"]["enable"] is False
        # fixed, then broken again: told again
        push_settings(client, {"enable": False, "temperature": 0.5})
        await wait_for_setting(client, "temperature", 0.5)
        push_settings(client, section)
        await wait_until(lambda: len(shown(client, "temperature")) == 2, 30, "the second notice")
    finally:
        await stop_client(client)


async def test_a_malformed_position_gets_an_error_response_and_no_traceback():
    uri = "file:///work/x.py"

    def inline_at(id_: int, position: dict) -> dict:
        return {"jsonrpc": "2.0", "id": id_, "method": "textDocument/inlineCompletion",
                "params": {"textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 1}}}

    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"processId": None, "rootUri": None, "capabilities": {},
                    "initializationOptions": {"enable": False}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "x = 1\n"}}},
        inline_at(2, {"line": -1, "character": 0}),
        inline_at(3, {"line": "one", "character": 0}),
        # a malformed notification: one warning line, and the server goes on
        {"jsonrpc": "2.0", "method": "textDocument/didChange",
         "params": {"textDocument": {"uri": uri, "version": 2}, "contentChanges": 7}},
        {"jsonrpc": "2.0", "id": 4, "method": "workspace/executeCommand", "params": {"command": commands.STATS}},
        {"jsonrpc": "2.0", "id": 5, "method": "shutdown", "params": None},
        {"jsonrpc": "2.0", "method": "exit", "params": None},
    ]
    done = await asyncio.to_thread(subprocess.run, SERVER_COMMAND, input=b"".join(map(frame, messages)),
                                   capture_output=True, env=SERVER_ENV, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    replies = {m["id"]: m for m in parse_frames(done.stdout) if "id" in m}
    for id_, what in ((2, "Position.line should be in range [0:2147483647], but was -1"),
                      (3, "invalid literal for int() with base 10: 'one'")):
        error = replies[id_].get("error")
        assert error and error["code"] == -32602, replies[id_]
        assert error["message"].startswith("textDocument/inlineCompletion: invalid params: "), error
        assert what in error["message"] and "position" in error["message"], error
    assert replies[4]["result"]["openDocuments"] == 1
    log = [m["params"]["message"] for m in parse_frames(done.stdout) if m.get("method") == "window/logMessage"]
    assert any("ignored textDocument/didChange: invalid params" in line for line in log), log
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr and "cattrs" not in stderr, stderr


async def test_invalid_utf8_from_an_editor_is_read_and_refused_as_complete_refuses_it(tmp_path):
    """Neovim sends a buffer's bytes as they are: the message is still read (the document is
    not lost), and a request there is refused with the line `specfill complete` prints."""
    from lsp.cli import read_document

    client = await started({"enable": False})
    try:
        uri = "file:///work/latin1.py"
        body = (b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": '
                b'{"uri": "' + uri.encode() + b'", "languageId": "python", "version": 1, '
                b'"text": "caf\xe9 = 1\\nx = "}}}')
        server_stdin(client).write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await server_stdin(client).drain()
        assert (await stats(client))["openDocuments"] == 1
        push_settings(client, {**tiny_options(maxNewTokens=4), "enable": True})
        s = await stats(client)
        while s["models"]["loading"] or not s["models"]["loaded"]:
            await asyncio.sleep(0.1)
            s = await stats(client)
        assert items(await inline(client, uri, 1, 4)) == []
        reason = (await stats(client))["lastRequest"]["reason"]
    finally:
        await stop_client(client)
    path = tmp_path / "latin1.py"
    path.write_bytes(b"caf\xe9 = 1\nx = ")
    text, why = read_document(str(path), 2, 5, 2_000_000)
    assert text is None and why == f"{path}: {reason}", (why, reason)
    assert "not valid UTF-8 text (line 1, column 4)" in reason


shared = tiny_server(maxNewTokens=16, maxDocumentChars=1000)   # an option: the smallest limit


@pytest_asyncio.fixture(loop_scope="module")
async def client(shared):
    await reset(shared, tiny_options(maxNewTokens=16))
    return shared


async def test_a_document_over_max_document_chars_is_reported_and_explained(client):
    statuses: list = []

    @client.feature(commands.DOCUMENT_STATUS)
    def on_document_status(params):
        statuses.append(params)

    assert (await stats(client))["options"]["maxDocumentChars"] == 1000
    uri = "file:///work/big.py"
    open_doc(client, uri, "x = 1\n" * 300)   # 1800 characters
    assert items(await inline(client, uri, 10, 0)) == []
    await wait_until(lambda: statuses, 30, "specfill/documentStatus")
    first = statuses[0]
    assert (first.textDocument.uri, first.state, first.kind) == (uri, "refused", "too_large"), first
    assert first.reason.startswith("1800 characters, over maxDocumentChars (1000)"), first
    s = await stats(client)
    assert s["refusedDocuments"] == {uri: first.reason}
    assert s["lastRequest"] == {"uri": uri, "answered": False, "pending": False,
                                 "reason": first.reason}
    # back under the limit (a whole-text change): told, and kept again
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="def f(x):\n    return ")]))
    await wait_until(lambda: len(statuses) == 2, 30, "the document back")
    assert (statuses[1].state, statuses[1].reason) == ("ok", "")
    s = await stats(client)
    assert s["refusedDocuments"] == {} and s["openDocuments"] == 1


async def test_disabled_completions_say_so_in_the_stats(client):
    uri = "file:///work/off.py"
    open_doc(client, uri, "def f(x):\n    return ")
    push_settings(client, {**tiny_options(maxNewTokens=16), "enable": False})
    await wait_for_setting(client, "enable", False)
    assert items(await inline(client, uri, 1, 11)) == []
    last = (await stats(client))["lastRequest"]
    assert last["answered"] is False and "enable setting is false" in last["reason"], last


async def test_an_empty_answer_keeps_its_run_in_last_completion_and_stats(client):
    """At the end of a `def` line with one-line answers, the tiny pair's first line is empty:
    nothing is shown, but the run's figures say what was decoded and what cut it."""
    text = "import os\n\n\ndef walk(root):\n"
    uri = "file:///work/empty_answer.py"
    assert reference(uri, text, 3, 15, maxNewTokens=16, multiline="never") == ""
    push_settings(client, {**tiny_options(maxNewTokens=16), "multiline": "never"})
    await wait_for_setting(client, "multiline", "never")
    open_doc(client, uri, text)
    assert items(await inline(client, uri, 3, 15)) == []
    last = await client.workspace_execute_command_async(types.ExecuteCommandParams(command=commands.LAST_COMPLETION))
    assert last["decoded_tokens"] >= 1 and last["stop_reason"] and last["cut_by"] == "newline", last
    assert "before any text" in last["empty_reason"], last
    s = await stats(client)
    job = s["server"]["last_job"]
    assert job["empty"] and job["stats"]["cut_by"] == "newline" and job["stats"]["decoded_tokens"] >= 1, job
    assert s["lastRequest"]["answered"] is False and last["empty_reason"] in s["lastRequest"]["reason"]
