"""Bad input against the real server process (tiny model pair): each case gets a clear error or
an empty result, and the server keeps answering afterwards."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest
import pytest_asyncio
from lsprotocol import types

from tests.e2e.lsp_helpers import (SERVER_COMMAND, SERVER_ENV, change_doc, frame, init_params, inline,
                         items, make_client, open_doc, parse_frames, push_settings, reference, reset,
                         server_stdin, stats, stop_client, tiny_options, tiny_server,
                         wait_loaded, wait_until)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

GOOD_URI = "file:///work/good.py"
GOOD = "def area(r):\n    return 3.14 * \n"
GOOD_AT = (1, 18)


shared = tiny_server(maxNewTokens=16)
holding = tiny_server(maxNewTokens=16, debounceMs=1000)   # holds each request 1 s on the server


@pytest_asyncio.fixture(loop_scope="module")
async def client(shared):
    """The shared server with no documents but GOOD open and the module's settings."""
    await reset(shared, tiny_options(maxNewTokens=16))
    open_doc(shared, GOOD_URI, GOOD)
    return shared


@pytest_asyncio.fixture(loop_scope="module")
async def held(holding):
    """The server that holds each request 1 s before decoding it, with no documents open."""
    await reset(holding, tiny_options(maxNewTokens=16))
    return holding


async def still_serving(client) -> None:
    """The server answers a normal request with what the pipeline itself says."""
    got = [i.insert_text for i in items(await inline(client, GOOD_URI, *GOOD_AT))]
    expected = reference(GOOD_URI, GOOD, *GOOD_AT, maxNewTokens=16)
    assert got == ([expected] if expected else [])


async def test_unknown_document_gets_an_empty_result(client):
    before = (await stats(client))["server"]["unknown_document"]
    assert items(await inline(client, "file:///never/opened.py", 0, 0)) == []
    assert (await stats(client))["server"]["unknown_document"] == before + 1
    # a change for a document that was never opened is ignored, not fatal
    change_doc(client, "file:///never/opened.py", 2, (0, 0), (0, 0), "x")
    await still_serving(client)


async def test_position_past_the_end(client):
    before = (await stats(client))["server"]["out_of_range"]
    assert items(await inline(client, GOOD_URI, 50, 0)) == []
    assert (await stats(client))["server"]["out_of_range"] == before + 1
    # a column past the end of an existing line is clamped to its end (clients race edits)
    got = [i.insert_text for i in items(await inline(client, GOOD_URI, 1, 500))]
    expected = reference(GOOD_URI, GOOD, 1, len("    return 3.14 * "), maxNewTokens=16)
    assert got == ([expected] if expected else [])


async def test_empty_file(client):
    uri = "file:///work/empty.py"
    open_doc(client, uri, "")
    got = [i.insert_text for i in items(await inline(client, uri, 0, 0))]
    expected = reference(uri, "", 0, 0, maxNewTokens=16)
    assert got == ([expected] if expected else [])


async def test_five_megabyte_file_is_not_kept_and_gets_an_empty_result(client):
    uri = "file:///work/huge.py"
    big = ("x = 1  # filler line for a very large file\n" * 120_000)[:5_000_000]
    open_doc(client, uri, big)
    assert items(await inline(client, uri, 1000, 4)) == []
    s = await stats(client)
    assert s["server"]["oversized_document"] >= 1 and s["oversizedDocuments"] == 1
    # edits to it are ignored; closing forgets it
    change_doc(client, uri, 2, (0, 0), (0, 0), "y = 2\n")
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))
    assert (await stats(client))["oversizedDocuments"] == 0
    await still_serving(client)


async def test_binary_junk_document(client):
    uri = "file:///work/junk.bin"
    junk = bytes(range(256)).decode("latin-1") * 4 + "\ud800 lone surrogate \udfff\n\x00\x00end"
    open_doc(client, uri, junk, language="plaintext")
    for line, col in ((0, 10), (1, 3), (2, 0)):
        assert isinstance(items(await inline(client, uri, line, col)), list)
    s = await stats(client)
    assert s["server"]["errors"] == 0          # refused cleanly (rejected), never crashed
    await still_serving(client)


async def test_malformed_settings_get_a_message_and_change_nothing(client):
    settings_before = (await stats(client))["settings"]
    for bad in ("not an object", [1, 2, 3], {"temperature": "NaN"}, {"maxNewTokens": {"a": 1}},
                {"multiline": None, "draftModel": ""}, {"remote": "http://gpu:8080"},
                {"remote": {"readTimeoutMs": "soon"}}):
        before = len(client.messages)
        push_settings(client, bad)
        await wait_until(lambda: len(client.messages) > before, 30, f"message for {bad!r}")
        assert client.messages[-1].type == types.MessageType.Error
        assert "invalid value" in client.messages[-1].message
    assert (await stats(client))["settings"] == settings_before
    await still_serving(client)


async def test_a_burst_of_a_thousand_requests(client):
    uri = "file:///work/burst.py"
    text = "def mean(xs):\n    return sum(xs) / \n"
    open_doc(client, uri, text)
    before = await stats(client)
    results = await asyncio.gather(*(inline(client, uri, 1, 21) for _ in range(1000)))
    assert len(results) == 1000
    expected = reference(uri, text, 1, 21, maxNewTokens=16)
    # every request is answered; each one superseded the one before it, and the last one,
    # which nothing superseded, gets the completion
    assert [i.insert_text for i in items(results[-1])] == ([expected] if expected else [])
    assert all(items(r)[0].insert_text == expected for r in results if items(r))
    s = await stats(client)
    assert s["server"]["requests"] - before["server"]["requests"] == 1000
    assert s["inflight"] == 0 and s["pendingRequests"] <= before["pendingRequests"]
    assert s["maxRssMb"] - before["maxRssMb"] < 300      # no per-request growth worth the name
    await still_serving(client)


async def test_requests_across_many_documents_are_capped(held):
    """At most MAX_INFLIGHT (4) requests wait or decode at once; older ones are dropped."""
    client = held
    uris = [f"file:///work/many{i}.py" for i in range(6)]
    for uri in uris:
        open_doc(client, uri, GOOD)
    before = (await stats(client))["server"]["superseded"]
    results = await asyncio.gather(*(inline(client, uri, *GOOD_AT) for uri in uris))
    expected = [reference(uri, GOOD, *GOOD_AT, maxNewTokens=16) for uri in uris]
    assert [items(r) for r in results[:2]] == [[], []]
    assert [[i.insert_text for i in items(r)] for r in results[2:]] == \
        [[e] if e else [] for e in expected[2:]]
    assert (await stats(client))["server"]["superseded"] == before + 2


async def test_junk_on_the_wire_is_survived(client):
    for body in (b"\xff\xfe{not json!", b'{"jsonrpc": "2.0", "id": 1234}',
                 b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"x": 1}}'):
        server_stdin(client).write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await server_stdin(client).drain()
    await still_serving(client)


async def test_utf8_client_positions():
    """Neovim may negotiate utf-8: columns count bytes."""
    client = make_client()
    await client.start_io(*SERVER_COMMAND, env=SERVER_ENV)
    try:
        result = await client.initialize_session(init_params(tiny_options(maxNewTokens=16),
                                                             encoding="utf-8"))
        assert result.capabilities.position_encoding == types.PositionEncodingKind.Utf8
        await wait_loaded(client)
        uri = "file:///work/utf8.py"
        text = "def grüße(naïve):\n    ß = naïve  # é😋\n    return \n"
        open_doc(client, uri, text)
        # change inside the non-ASCII line, addressed in bytes: replace "naïve" after "ß = "
        start = len("    ß = ".encode())
        change_doc(client, uri, 2, (1, start), (1, start + len("naïve".encode())), "2 * naïve")
        text = "def grüße(naïve):\n    ß = 2 * naïve  # é😋\n    return \n"
        line1 = text.splitlines()[1]
        col = line1.index("  #")
        got = [i for i in items(await inline(client, uri, 1, len(line1[:col].encode())))]
        expected = reference(uri, text, 1, col, maxNewTokens=16)
        assert [i.insert_text for i in got] == ([expected] if expected else [])
        for item in got:
            assert item.range.start == types.Position(line=1, character=len(line1[:col].encode()))
        got = [i.insert_text for i in items(await inline(client, uri, 2, 11))]
        expected = reference(uri, text, 2, 11, maxNewTokens=16)
        assert got == ([expected] if expected else [])
        await client.shutdown_session()
    finally:
        await stop_client(client)


async def test_client_disappearing_mid_request_ends_the_server():
    client = make_client()
    await client.start_io(*SERVER_COMMAND, env=SERVER_ENV)
    try:
        await client.initialize_session(init_params(tiny_options(
            maxNewTokens=1024, multiline="always", maxLines=200)))
        await wait_loaded(client)
        uri = "file:///work/gone.py"
        open_doc(client, uri, "class Tree:\n    def __init__(self):\n        \n")
        jobs = (await stats(client))["server"]["decode_jobs"]
        pending = asyncio.ensure_future(inline(client, uri, 2, 8))
        while (await stats(client))["server"]["decode_jobs"] == jobs:
            await asyncio.sleep(0.01)
        server_stdin(client).close()   # the editor is gone: no shutdown, no exit
        await wait_until(lambda: client.exit_code is not None, 60, "the server to exit")
        assert client.exit_code == 1   # LSP: exit without shutdown -> 1
        pending.cancel()
    finally:
        await stop_client(client)


async def test_tcp_listens_on_loopback():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = await asyncio.create_subprocess_exec(
        *SERVER_COMMAND, "--tcp", str(port), env=SERVER_ENV, stderr=asyncio.subprocess.DEVNULL)
    client = make_client()
    try:
        for _ in range(300):
            try:
                await client.start_tcp("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        # some clients wrap initializationOptions in the section name
        result = await client.initialize_session(init_params({"specfill": {"enable": False}}))
        assert result.capabilities.inline_completion_provider is not None
        reply = await stats(client)
        assert reply["settings"]["enable"] is False and not reply["models"]["loaded"]
        await client.shutdown_async(None)
        client.exit(None)
        assert await asyncio.wait_for(process.wait(), 30) == 0
    finally:
        if process.returncode is None:
            process.kill()
        await client.stop()


@pytest.mark.asyncio
async def test_stray_output_cannot_reach_the_wire():
    """Anything printed, or written to fd 1 by native code, after startup goes to stderr."""
    inject = ("import os, sys; from lsp import cli; setup = cli.setup_logging; "
              "cli.setup_logging = lambda *a, **k: (setup(*a, **k), print('stray print'), "
              "os.write(1, b'stray fd write\\n')); sys.exit(cli.serve_main([]))")
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"processId": None, "rootUri": None, "capabilities": {},
                    "initializationOptions": {"enable": False}}},
        {"jsonrpc": "2.0", "method": "initialized", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": None},
        {"jsonrpc": "2.0", "method": "exit", "params": None},
    ]
    done = subprocess.run([sys.executable, "-c", inject], input=b"".join(map(frame, requests)),
                          capture_output=True, env=SERVER_ENV, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    replies = parse_frames(done.stdout)
    answers = [m for m in replies if "id" in m]   # the rest: the server's log (window/logMessage)
    assert [m["id"] for m in answers] == [1, 2]
    assert "inlineCompletionProvider" in answers[0]["result"]["capabilities"]
    assert {m["method"] for m in replies if "id" not in m} <= {"window/logMessage"}
    assert b"stray print" in done.stderr and b"stray fd write" in done.stderr


async def test_a_late_configuration_reply_cannot_undo_a_newer_push():
    """The startup pull is answered slowly; a push made meanwhile must win."""
    from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, LanguageClient, register_lsp_features
    from pygls.protocol import default_converter

    client = LanguageClient(converter_factory=default_converter)
    register_lsp_features(client, {k: v for k, v in DEFAULT_CLIENT_FEATURES.items()
                                   if k != types.WORKSPACE_CONFIGURATION})
    answered = asyncio.Event()

    @client.feature(types.WORKSPACE_CONFIGURATION)
    async def slow_configuration(ls: LanguageClient, params: types.ConfigurationParams):
        await asyncio.sleep(1.0)
        answered.set()
        return [ls.get_configuration(section=item.section) for item in params.items]

    client.set_configuration({"maxNewTokens": 7}, section="specfill")
    await client.start_io(*SERVER_COMMAND, env=SERVER_ENV)
    try:
        await client.initialize_session(init_params({"enable": False}))
        push_settings(client, {"maxNewTokens": 9})
        await asyncio.wait_for(answered.wait(), 30)
        await asyncio.sleep(0.2)
        s = await stats(client)
        assert s["settings"]["maxNewTokens"] == 9
        # an up-to-date pull is applied
        push_settings(client, None)
        for _ in range(300):
            if (await stats(client))["settings"]["maxNewTokens"] == 7:
                break
            await asyncio.sleep(0.02)
        assert (await stats(client))["settings"]["maxNewTokens"] == 7
        await client.shutdown_session()
    finally:
        await stop_client(client)
