"""The `workspace/executeCommand` ids the server answers. The bench and both editors send these
exact strings; tests/e2e/test_lsp_commands.py checks the editors' sources against this table, and
editors/vscode/scripts/sync_settings.py writes it into the extension as
src/serverCommands.ts."""
from __future__ import annotations

STATS = "specfill.stats"                     # server, pipeline and model figures (a dict)
LAST_COMPLETION = "specfill.lastCompletion"  # engine and prompt figures of the latest model run
RELOAD = "specfill.reload"                   # load the models again (the settings' ones)

ALL = {"stats": STATS, "lastCompletion": LAST_COMPLETION, "reload": RELOAD}
"""Every command, by the short name the VS Code extension uses for it."""
