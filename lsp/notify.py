"""Telling the user: pop-ups for what needs action, and the target's status for the editors'
status lines. Everything logged also reaches the client's log as window/logMessage with its
level (lsp/client_log.py)."""
from __future__ import annotations

import logging
from typing import Any

from pygls.lsp.server import LanguageServer

from lsprotocol import types

from lsp import commands

log = logging.getLogger("specfill.server")


def show(ls: LanguageServer, message: str, kind=types.MessageType.Error) -> None:
    """window/showMessage (and the log)."""
    level = {types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}.get(kind, logging.INFO)
    log.log(level, "%s", message)
    try:
        ls.window_show_message(types.ShowMessageParams(type=kind, message=f"specfill: {message}"))
    except Exception:  # client gone
        log.debug("could not send showMessage", exc_info=True)


def client_supports(ls: LanguageServer, *path: str) -> bool:
    """Whether a client capability, e.g. ("window", "work_done_progress"), is declared true
    (lsprotocol's capability objects leave what the client did not declare as None)."""
    node: Any = ls.client_capabilities
    for name in path:
        node = getattr(node, name, None)
        if node is None:
            return False
    return bool(node)


STATUS_METHOD = commands.STATUS
LOCAL_STATUS = {"backend": "local", "url": "", "state": "ok", "kind": "", "message": ""}


def send_status(ls: LanguageServer, status: dict) -> None:
    """`specfill/status` {backend, url, state: ok|error, kind, message}: what the editors' status
    lines show about the target. Sent after every model load and whenever a remote target starts
    failing, fails otherwise, or answers again; `message` is the one line that showMessage gave."""
    try:
        ls.protocol.notify(STATUS_METHOD, status)
    except Exception:  # client gone
        log.debug("could not send %s", STATUS_METHOD, exc_info=True)
