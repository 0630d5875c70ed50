"""The VS Code extension: its manifest against the server's settings table, a `tsc` compile,
the unit tests of its settings handling (node --test), and a .vsix package.

The real-VS Code suite (code-server + chromium) lives in editors/vscode/e2e and is not part of
this default run. Needs `node` and `npm` (Node 20+); node deps are installed with `npm ci` from
the committed package-lock.json when node_modules is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
EXT = REPO / "editors" / "vscode"
sync_settings = load_script("editors/vscode/scripts/sync_settings.py", "vscode_sync_settings")


def npm(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["npm", *args], cwd=EXT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "npm_config_fund": "false",
                                                "npm_config_audit": "false"})


@pytest.fixture(scope="module")
def node_deps():
    if shutil.which("npm") is None:
        pytest.fail("npm is needed for the VS Code extension tests (Node 20+)")
    if not (EXT / "node_modules" / ".package-lock.json").exists():
        res = npm("ci")
        assert res.returncode == 0, res.stdout + res.stderr


def server_schema() -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "lsp.settings", "--schema"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def manifest() -> dict:
    return json.loads((EXT / "package.json").read_text())


def test_every_server_setting_is_a_vscode_setting_with_its_default_range_and_description():
    props = manifest()["contributes"]["configuration"]["properties"]
    schema = server_schema()
    assert len(schema) >= 15
    for entry in schema:
        prop = props.get("specfill." + entry["name"])
        assert prop is not None, f"specfill.{entry['name']} missing from package.json"
        assert prop["default"] == entry["default"], entry["name"]
        assert entry["description"] in prop["markdownDescription"], entry["name"]
        if isinstance(entry["type"], list):  # `auto` or a number: a drop-down of both
            assert prop["enum"][0] == entry["default"]
            assert prop["enum"][1:] == [str(i) for i in range(entry["min"], entry["max"] + 1)]
        else:
            assert prop["type"] == entry["type"], entry["name"]
            assert prop.get("minimum") == entry.get("min"), entry["name"]
            assert prop.get("maximum") == entry.get("max"), entry["name"]
            assert prop.get("enum") == entry.get("enum"), entry["name"]
            assert prop.get("pattern") == entry.get("pattern"), entry["name"]
    server_keys = {"specfill." + e["name"] for e in schema}
    extension_keys = set(props) - server_keys
    assert extension_keys == set(sync_settings.EXTENSION_SETTINGS)
    # And the generator agrees: package.json is what sync_settings.py writes.
    assert props == sync_settings.expected_properties(schema)
    assert sync_settings.main(["--check"]) == 0   # and so is src/serverCommands.ts


def test_compiles_with_tsc_and_unit_tests_pass(node_deps):
    res = npm("test")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "# fail 0" in out and "# pass 0" not in out, out
    assert (EXT / "out" / "src" / "extension.js").exists()


def test_packages_as_vsix(node_deps, tmp_path):
    vsix = tmp_path / "specfill.vsix"
    res = subprocess.run(["npx", "vsce", "package", "--skip-license", "-o", str(vsix)], cwd=EXT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        assert "extension/out/src/extension.js" in names
        assert "extension/node_modules/vscode-languageclient/package.json" in names
        own = [n for n in names if not n.startswith("extension/node_modules/")]
        # Compiled code only: no sources, tests, e2e suite or source maps in the package.
        assert not [n for n in own if n.startswith(("extension/src/", "extension/test/", "extension/out/test/",
                                                    "extension/e2e/", "extension/scripts/"))
                    or n.endswith((".ts", ".map"))], own
        packaged = json.loads(z.read("extension/package.json"))
    assert packaged["contributes"]["configuration"] == manifest()["contributes"]["configuration"]
    assert {c["command"] for c in packaged["contributes"]["commands"]} == {
        "specfill.showStats", "specfill.restartServer", "specfill.reloadModels"}
