"""The executeCommand ids and specfill/* methods: lsp/commands.py is the one table; the server
registers exactly its commands, both editors get both tables generated from it, and no other
editor source spells an id or a method itself."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from lsp import commands
from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
VSCODE = REPO / "editors" / "vscode"
NVIM = REPO / "editors" / "nvim"
QUOTED_ID = re.compile(r"""['"](specfill\.[A-Za-z][\w.]*)['"]""")
QUOTED_METHOD = re.compile(r"""['"](specfill/[A-Za-z]\w*)['"]""")


def test_the_server_registers_exactly_the_table():
    probe = "import json; from lsp.server import server; print(json.dumps(sorted(server.protocol.fm.commands)))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=True)
    assert json.loads(done.stdout) == sorted(commands.ALL.values())


def test_vscode_gets_the_ids_from_the_generated_table():
    sync_settings = load_script("editors/vscode/scripts/sync_settings.py", "vscode_sync_settings")

    generated = (VSCODE / "src" / "serverCommands.ts").read_text()
    assert generated == sync_settings.server_commands_ts(commands.ALL, commands.METHODS)
    server_ids = set(commands.ALL.values())
    for source in (VSCODE / "src").glob("*.ts"):
        if source.name == "serverCommands.ts":
            continue
        written = set(QUOTED_ID.findall(source.read_text())) & server_ids
        assert not written, f"{source.name} spells {written} itself; use SERVER_COMMANDS"
    used = set(re.findall(r"SERVER_COMMANDS\.(\w+)", (VSCODE / "src" / "extension.ts").read_text()))
    assert used and used <= set(commands.ALL)
    # vscode-languageclient registers every server command as a VS Code command, so the
    # extension's own commands must not take those ids.
    contributed = {c["command"] for c in json.loads((VSCODE / "package.json").read_text())
                   ["contributes"]["commands"]}
    assert contributed and not contributed & server_ids


def test_neovim_sends_only_the_servers_ids():
    lua = list(NVIM.rglob("*.lua"))
    modules = {".".join(p.relative_to(NVIM / "lua").with_suffix("").parts) for p in lua
               if (NVIM / "lua") in p.parents}
    modules |= {m.rsplit(".", 1)[0] for m in modules if m.endswith(".init")}
    ids = {found for p in lua for found in QUOTED_ID.findall(p.read_text())} - modules
    assert ids, "the Neovim plugin sends specfill.stats and specfill.reload"
    assert ids <= set(commands.ALL.values()), ids - set(commands.ALL.values())


def test_neovim_gets_the_ids_and_methods_from_the_generated_table():
    sync_settings = load_script("editors/nvim/scripts/sync_settings.py", "nvim_sync_settings")
    protocol = NVIM / "lua" / "specfill" / "protocol.lua"
    assert protocol.read_text() == sync_settings.protocol_lua({"commands": commands.ALL, "methods": commands.METHODS})
    for source in NVIM.rglob("*.lua"):
        if source == protocol:
            continue
        text = source.read_text()
        assert not QUOTED_METHOD.findall(text), f"{source.name} spells {QUOTED_METHOD.findall(text)}; use protocol.methods"
        assert not set(QUOTED_ID.findall(text)) & set(commands.ALL.values()), source.name


def test_vscode_gets_the_methods_from_the_generated_table():
    for source in (VSCODE / "src").glob("*.ts"):
        if source.name != "serverCommands.ts":
            found = QUOTED_METHOD.findall(source.read_text())
            assert not found, f"{source.name} spells {found}; use SERVER_METHODS"
