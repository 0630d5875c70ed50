"""The `workspace/executeCommand` ids the server answers, and the methods of its own requests
and notifications (both ways). The bench and both editors use these exact strings: the editors'
sync scripts write both tables into them (editors/vscode/scripts/sync_settings.py as
src/serverCommands.ts, editors/nvim/scripts/sync_settings.py as lua/specfill/protocol.lua), and
tests/e2e/test_lsp_commands.py checks that the editors' sources spell no other id."""
from __future__ import annotations

STATS = "specfill.stats"                     # server, pipeline and model figures (a dict)
LAST_COMPLETION = "specfill.lastCompletion"  # engine and prompt figures of the latest model run
RELOAD = "specfill.reload"                   # load the models again (the settings' ones)
# The command every inline-completion item carries (LSP 3.18: the client runs it when the user
# accepts the item); arguments: [{"id": suggestion id, "length": characters inserted}].
ACCEPTED = "specfill.accepted"

ALL = {"stats": STATS, "lastCompletion": LAST_COMPLETION, "reload": RELOAD, "accepted": ACCEPTED}
"""Every command, by the short name the VS Code extension uses for it."""

# Notifications a client sends about the suggestions it shows (user acceptance in
# `specfill.stats`). Params: {"id": the id in the item's command arguments}, and for ACCEPTED_PART
# also "acceptedLength" (characters inserted so far, in all) and "full" (up to its end).
SHOWN = "specfill/shown"            # drawn on screen (once per suggestion)
ACCEPTED_PART = "specfill/accepted"  # accepted in part or (without running the command) in full
DISMISSED = "specfill/dismissed"    # went away without any of it accepted

NOTIFICATIONS = {"shown": SHOWN, "accepted": ACCEPTED_PART, "dismissed": DISMISSED}

# Notifications a client sends about where the user works (extra context for completions in
# other documents, lsp/documents.py). YANKED: {"textDocument": {"uri"}, "text": the text copied};
# VISITED: {"textDocument": {"uri"}, "position": {"line", "character"}} where the user was.
YANKED = "specfill/yanked"
VISITED = "specfill/visited"

# A request: {textDocument: {uri}, position} -> InlineCompletionList of up to `candidates`
# different suggestions, the greedy one first (what the ghost text shows), the others sampled
# from the target when asked (for cycling).
ALTERNATIVES = "specfill/alternatives"

# A request: {textDocument: {uri}, position} -> null, or the edit the user is likely to make next,
# {uri, range, newText, id}: replacing `range` of the document (as the client sent it last) with
# `newText` (lsp/next_edit.py).
NEXT_EDIT = "specfill/nextEdit"

# The server's notifications to the client. STATUS: the target's status, {backend, url, state:
# ok|error, kind, message} (lsp/notify.py). DOCUMENT_STATUS: whether a document gets answers,
# {textDocument: {uri}, state: ok|refused, reason: one line (empty when ok)}, sent when that
# changes (a document over maxDocumentChars, and back under it).
STATUS = "specfill/status"
DOCUMENT_STATUS = "specfill/documentStatus"

METHODS = {"alternatives": ALTERNATIVES, "nextEdit": NEXT_EDIT, **NOTIFICATIONS, "yanked": YANKED, "visited": VISITED,
           "status": STATUS, "documentStatus": DOCUMENT_STATUS}
"""Every specfill/* method (requests and notifications, both ways), by short name."""
