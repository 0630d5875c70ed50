"""The VS Code extension: its manifest against the server's settings table, a `tsc` compile,
the unit tests of its settings handling (node --test), the Node versions it declares, and a
.vsix package holding one esbuild bundle.

The real-VS Code suite (code-server + chromium) lives in editors/vscode/e2e. Needs `node` and
`npm` (Node ^20.18.1 or 22+, as package.json's engines say); node deps are installed with
`npm ci` from the committed package-lock.json when node_modules is missing.
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
        assert prop.get("pattern") == entry.get("pattern"), entry["name"]
        if isinstance(entry["type"], list):  # `auto` or a number: text checked by the pattern
            assert prop["type"] == "string" and "enum" not in prop, entry["name"]
        else:
            assert prop["type"] == entry["type"], entry["name"]
            assert prop.get("minimum") == entry.get("min"), entry["name"]
            assert prop.get("maximum") == entry.get("max"), entry["name"]
            assert prop.get("enum") == entry.get("enum"), entry["name"]
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


def node(script: str, *args: str, stdin: str | None = None) -> str:
    res = subprocess.run(["node", "-e", script, *args], cwd=EXT, input=stdin, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_declared_node_versions_are_true(node_deps):
    """package.json's engines.node is what every locked dependency accepts (npm's engine-strict,
    set in .npmrc, makes `npm ci` refuse any other Node), and the Node running here is one."""
    assert "engine-strict=true" in (EXT / ".npmrc").read_text().splitlines()
    declared = manifest()["engines"]["node"]
    out = node("""
        const semver = require('semver');
        const lock = require('./package-lock.json');
        const [declared] = process.argv.slice(1);
        const narrower = Object.entries(lock.packages)
          .filter(([, p]) => p.engines && typeof p.engines.node === 'string' && !semver.subset(declared, p.engines.node))
          .map(([name, p]) => `${name} wants ${p.engines.node}`);
        console.log(JSON.stringify({ narrower, running: semver.satisfies(process.version, declared) }));
    """, declared)
    found = json.loads(out)
    assert found["narrower"] == [], f"engines.node {declared!r} promises more than: {found['narrower']}"
    assert found["running"], f"this Node is outside engines.node {declared!r}"


def test_packages_as_vsix_with_one_bundled_file(node_deps, tmp_path):
    vsix = tmp_path / "specfill.vsix"
    res = npm("run", "package", "--", "-o", str(vsix))
    assert res.returncode == 0, res.stdout + res.stderr
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        packaged = json.loads(z.read("extension/package.json"))
        bundle = z.read("extension/dist/extension.js").decode()
    # esbuild bundles the extension and vscode-languageclient into dist/extension.js: no
    # node_modules, sources, tests, e2e suite or source maps in the package.
    assert packaged["main"] == "./dist/extension.js"
    assert sorted(n for n in names if n.startswith("extension/")) == [
        "extension/dist/extension.js", "extension/package.json", "extension/readme.md"], names
    assert "textDocument/inlineCompletion" in bundle   # vscode-languageclient is inside
    # Everything the bundle still requires at run time is VS Code itself or part of Node.
    required = json.loads(node("""
        const { builtinModules } = require('node:module');
        const text = require('node:fs').readFileSync(0, 'utf8');
        const names = [...new Set([...text.matchAll(/require\\(["']([^"']+)["']\\)/g)].map((m) => m[1]))];
        console.log(JSON.stringify(names.filter((n) => n !== 'vscode' && !builtinModules.includes(n.replace(/^node:/, '')))));
    """, stdin=bundle))
    assert required == [], required
    assert packaged["contributes"]["configuration"] == manifest()["contributes"]["configuration"]
    assert {c["command"] for c in packaged["contributes"]["commands"]} == {
        "specfill.showStats", "specfill.restartServer", "specfill.reloadModels", "specfill.showLog",
        "specfill.toggle"}

