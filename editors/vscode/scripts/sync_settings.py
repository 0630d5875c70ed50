"""Write the server's settings into package.json's contributes.configuration.

The server's settings table (lsp/settings.py, `python -m lsp.settings --schema`) is the one
source of truth for names, defaults, ranges and descriptions; this turns each entry into a VS
Code setting `specfill.<name>`. Settings of the extension itself (EXTENSION_SETTINGS) are kept.

    python editors/vscode/scripts/sync_settings.py          # rewrite package.json
    python editors/vscode/scripts/sync_settings.py --check  # exit 1 if it is out of date
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
REPO = HERE.parent.parent
PACKAGE_JSON = HERE / "package.json"

# Settings only the extension reads (not sent to the server).
EXTENSION_SETTINGS = {
    "specfill.server.command": {
        "type": "string",
        "default": "specfill",
        "scope": "machine",
        "markdownDescription": "Program that starts the language server, e.g. `specfill` or the "
                               "full path of a virtual environment's `python`.",
    },
    "specfill.server.args": {
        "type": "array",
        "items": {"type": "string"},
        "default": ["serve"],
        "scope": "machine",
        "markdownDescription": "Arguments for `specfill.server.command`, e.g. `[\"serve\"]` or "
                               "`[\"-m\", \"lsp\"]` with a `python` command.",
    },
    "specfill.trace.server": {
        "type": "string",
        "enum": ["off", "messages", "verbose"],
        "default": "off",
        "markdownDescription": "Log the LSP traffic to the `specfill` output channel.",
    },
}

# Settings a checked-out repository must not be able to turn on for you.
MACHINE_SCOPED = {"trustRemoteCode"}


def server_schema() -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "lsp.settings", "--schema"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def vscode_property(entry: dict, order: int) -> dict:
    prop: dict = {}
    type_ = entry["type"]
    if isinstance(type_, list):
        # `auto` or a number (draftLength): a drop-down of strings; the extension sends numbers.
        prop["type"] = "string"
        prop["enum"] = [entry["default"]] + [str(i) for i in range(entry["min"], entry["max"] + 1)]
    else:
        prop["type"] = type_
        if "enum" in entry:
            prop["enum"] = entry["enum"]
        if "min" in entry:
            prop["minimum"] = entry["min"]
        if "max" in entry:
            prop["maximum"] = entry["max"]
    prop["default"] = entry["default"]
    prop["markdownDescription"] = f"{entry['description']} Allowed: {entry['allowed']}."
    if entry["name"] in MACHINE_SCOPED:
        prop["scope"] = "machine"
    prop["order"] = order
    return prop


def expected_properties(schema: list[dict]) -> dict:
    props = {f"specfill.{e['name']}": vscode_property(e, i) for i, e in enumerate(schema)}
    props.update(EXTENSION_SETTINGS)
    return props


def main(argv: list[str]) -> int:
    package = json.loads(PACKAGE_JSON.read_text())
    want = expected_properties(server_schema())
    have = package["contributes"]["configuration"]["properties"]
    if "--check" in argv:
        if have != want:
            missing = sorted(set(want) - set(have))
            extra = sorted(set(have) - set(want))
            changed = sorted(k for k in set(want) & set(have) if want[k] != have[k])
            print(f"package.json settings out of date: missing {missing}, extra {extra}, "
                  f"changed {changed}; run python {Path(__file__).relative_to(REPO)}")
            return 1
        return 0
    package["contributes"]["configuration"]["properties"] = want
    PACKAGE_JSON.write_text(json.dumps(package, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
