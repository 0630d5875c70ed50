"""The server's log reaches the client as window/logMessage with each line's real level (clients
file a server's stderr as errors), over real stdio; stderr keeps only what the client cannot get."""
from __future__ import annotations

import pytest
from lsprotocol import types

from tests.e2e.lsp_helpers import (SERVER_COMMAND, SERVER_ENV, init_params, make_client,
                                   push_settings, stop_client, wait_until)

pytestmark = pytest.mark.timeout(300)


def received(client, text: str) -> list[types.MessageType]:
    return [m.type for m in client.log_messages if text in m.message]


@pytest.mark.asyncio
async def test_log_lines_reach_the_client_with_their_level(capfd):
    client = make_client()
    await client.start_io(*SERVER_COMMAND, env=SERVER_ENV)   # --log-level info
    try:
        # enable: false keeps models out of it; an unknown key is a warning.
        await client.initialize_session(init_params({"enable": False, "noSuchSetting": 1}))
        push_settings(client, {"maxNewTokens": -5})   # a bad value: an error
        await wait_until(lambda: received(client, "invalid value for specfill.maxNewTokens"), 60,
                         "the error about maxNewTokens")
        assert received(client, "specfill.config: settings v1 from initializationOptions") == [
            types.MessageType.Info]
        assert received(client, "unknown setting 'noSuchSetting'") == [types.MessageType.Warning]
        assert received(client, "invalid value for specfill.maxNewTokens") == [types.MessageType.Error]
        await client.shutdown_session()
        await wait_until(lambda: client.exit_code is not None, 30, "the server to exit")
        assert client.exit_code == 0
    finally:
        await stop_client(client)
    stderr = capfd.readouterr().err   # pytest-lsp forwards the server's stderr to ours
    # Nothing the client received went to stderr as well ...
    assert "settings v1" not in stderr and "unknown setting" not in stderr, stderr
    # ... but the time after the connection ends does.
    assert "INFO specfill.serve: server stopped (exit code 0)" in stderr, stderr
