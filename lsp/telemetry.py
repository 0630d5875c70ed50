"""User acceptance reports from the editor: what became of each suggestion it showed.

The editor sends specfill/shown, specfill/accepted and specfill/dismissed notifications, and
runs the item's `specfill.accepted` command on a full accept (the LSP 3.18 way). Each carries the
suggestion id the server put in the item's command arguments. A malformed report is one log
line and changes nothing; nothing is sent anywhere."""
from __future__ import annotations

import logging
from typing import Any

from completion.stats import UserAcceptance

log = logging.getLogger("specfill.telemetry")


def plain(value: Any) -> Any:
    """JSON params as dicts and lists (pygls hands unknown notifications' params over as
    namedtuples)."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _int_field(params: dict, name: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _params(params: Any, what: str) -> dict:
    params = plain(params)
    if not isinstance(params, dict):
        raise ValueError(f"{what}: params must be an object with an id, got {params!r}")
    return params


def report(user: UserAcceptance, event: str, params: Any) -> None:
    """Count one report: event is 'shown', 'accepted' or 'dismissed'. Raises ValueError with a
    one-line message on malformed params."""
    p = _params(params, f"specfill/{event}")
    sid = _int_field(p, "id")
    if event == "shown":
        known = user.on_shown(sid)
    elif event == "dismissed":
        known = user.on_dismissed(sid)
    else:
        full = p.get("full", False)
        if not isinstance(full, bool):
            raise ValueError(f"full must be true or false, got {full!r}")
        length = _int_field(p, "acceptedLength") if not full or "acceptedLength" in p else 0
        known = user.on_accepted(sid, length, full)
    if not known:
        log.info("specfill/%s for suggestion %d, which this server did not send (or forgot)", event, sid)


def accept_command(user: UserAcceptance, args: list) -> dict:
    """The item's `specfill.accepted` command: the client inserted the whole suggestion."""
    args = plain(list(args))
    if len(args) != 1:
        raise ValueError(f"specfill.accepted takes one argument {{id, length}}, got {len(args)}")
    p = _params(args[0], "specfill.accepted")
    sid = _int_field(p, "id")
    if not user.on_accepted(sid, 0, full=True):
        log.info("specfill.accepted for suggestion %d, which this server did not send (or forgot)", sid)
    return {"id": sid}


def safely(what: str, fn, *args) -> None:
    """Run a report handler; a bad report is one warning line, the server goes on."""
    try:
        fn(*args)
    except ValueError as exc:
        log.warning("ignored %s: %s", what, exc)
