"""Write the server's settings into the comment above `settings` in lua/specfill/config.lua.

The server's settings table (lsp/settings.py, `python -m lsp.settings --schema`) is the one
source of truth for names, defaults, allowed values and descriptions; config.lua, where every
option of the Neovim plugin is documented, gets a generated copy between two marker lines.

    python editors/nvim/scripts/sync_settings.py          # rewrite config.lua
    python editors/nvim/scripts/sync_settings.py --check  # exit 1 if it is out of date
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent
CONFIG_LUA = HERE / "lua" / "specfill" / "config.lua"

BEGIN = "  -- BEGIN server settings (editors/nvim/scripts/sync_settings.py writes this from lsp/settings.py)"
END = "  -- END server settings"
WIDTH = 100


def server_schema() -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "lsp.settings", "--schema"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def lua_literal(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)  # numbers and plain strings read the same in Lua


def settings_comment(schema: list[dict]) -> list[str]:
    """The comment lines for every setting: `name = default`, then what it does and allows."""
    lines = [BEGIN]
    for entry in schema:
        lines.append(f"  --   {entry['name']} = {lua_literal(entry['default'])}")
        about = f"{entry['description']} Allowed: {entry['allowed']}."
        lines += textwrap.wrap(about, WIDTH, initial_indent="  --       ",
                               subsequent_indent="  --       ", break_on_hyphens=False)
    lines.append(END)
    return lines


def with_settings_comment(config_lua: str, schema: list[dict]) -> str:
    """`config_lua` with the lines between the markers replaced by the generated comment."""
    lines = config_lua.split("\n")
    start, end = lines.index(BEGIN), lines.index(END)
    return "\n".join(lines[:start] + settings_comment(schema) + lines[end + 1:])


def main(argv: list[str]) -> int:
    have = CONFIG_LUA.read_text()
    want = with_settings_comment(have, server_schema())
    if "--check" in argv:
        if have != want:
            print(f"{CONFIG_LUA.relative_to(REPO)}: the server settings comment is out of date; "
                  f"run python {Path(__file__).relative_to(REPO)}")
            return 1
        return 0
    CONFIG_LUA.write_text(want)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
