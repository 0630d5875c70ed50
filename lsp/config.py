"""Settings from the client: initializationOptions, workspace/configuration (pull) and
workspace/didChangeConfiguration (push), versioned so a late pull reply cannot undo a push."""
from __future__ import annotations

import json
import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from lsp import next_edit
from lsp.loading import ensure_models
from lsp.notify import show
from lsp.settings import parse_settings_leniently, unknown_keys, unknown_setting

if TYPE_CHECKING:
    from lsp.server import SpecfillServer

log = logging.getLogger("specfill.config")

SECTION = "specfill"


def apply_settings(ls: SpecfillServer, raw: Any, source: str) -> bool:
    """Validate and apply a `specfill` section: its valid values apply, an invalid one keeps its
    previous value, and the user is told (once) what was wrong. Returns whether anything was
    applied."""
    state = ls.state
    if raw is None:
        return False
    if isinstance(raw, dict) and set(raw) == {SECTION}:
        raw = raw[SECTION]      # {"specfill": {...}} where the bare section was expected
    new, errors = parse_settings_leniently(raw, state.settings)
    problems = [f"{err}; keeping {_shown(state.settings, err.name)}" for err in errors]
    problems += [f"{unknown_setting(name, list_known=False)}; ignored" for name in unknown_keys(raw)]
    tell_settings_problems(ls, problems, source, error=bool(errors))
    if not isinstance(raw, dict):
        return False
    state.settings = new
    state.settings_version += 1
    log.info("settings v%d from %s: %s", state.settings_version, source, new)
    next_edit.settings_changed(ls)
    if state.initialized:
        ensure_models(ls)
    return True


def _shown(settings, name: str) -> str:
    """`name = value` as in force (a secret shown as set; `remote.readTimeoutMs = 30000` for a
    nested one), or the previous settings for a section that is not an object."""
    value: Any = settings.to_dict()
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return "the previous settings"
        value = value[part]
    return f"{name} = {json.dumps(value)}"


def tell_settings_problems(ls: SpecfillServer, problems: list[str], source: str, error: bool) -> None:
    """One notice for the problems of a settings section that were not told already. Editors
    send the same section up to three ways (initializationOptions, the configuration pull, a
    push): a problem is told once while it lasts, and again only after a section without it."""
    state = ls.state
    new = [p for p in problems if p not in state.settings_problems]
    state.settings_problems = set(problems)
    if not new:
        if problems:
            log.info("settings from %s: %s (told already)", source, "; ".join(problems))
        return
    log.info("settings problems from %s", source)
    show(ls, "; ".join(new), types.MessageType.Error if error else types.MessageType.Warning)


def pull_settings(ls: SpecfillServer) -> Future:
    """Ask the client for the `specfill` section. A reply that arrives after a newer change
    (a push) is stale and dropped."""
    state = ls.state
    asked_at = state.settings_version
    fut = ls.protocol.send_request(
        types.WORKSPACE_CONFIGURATION,
        types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)]))

    def on_reply(f: Future) -> None:
        try:
            if f.cancelled():
                return
            reply = f.result()
        except Exception as exc:
            log.warning("workspace/configuration failed: %s", exc)
            return
        if state.settings_version != asked_at:
            log.info("dropping a stale workspace/configuration reply (settings changed meanwhile)")
            return
        if isinstance(reply, (list, tuple)) and reply:   # lsprotocol gives a tuple
            apply_settings(ls, reply[0], "workspace/configuration")

    fut.add_done_callback(on_reply)
    return fut


def on_pushed_settings(ls: SpecfillServer, settings: Any, can_pull: bool) -> None:
    if isinstance(settings, dict) and SECTION in settings:
        apply_settings(ls, settings[SECTION], "workspace/didChangeConfiguration")
    elif isinstance(settings, dict) and settings and not unknown_keys(settings):
        # Some clients push the section's contents without the `specfill` wrapper.
        apply_settings(ls, settings, "workspace/didChangeConfiguration")
    elif can_pull:
        # VS Code style: the push only says "something changed"; pull the section.
        pull_settings(ls)
