"""The extension in a real VS Code (code-server 4.139 = VS Code 1.139) shown in headless chromium,
with the real specfill server on tiny real models: ghost text after typing, Tab accepts it, the
status bar reports ready / latency / acceptance.

Not part of the default `pytest` run (tests/ only). Run:
    editors/vscode/e2e/install.sh                 # once: chromium, Node 24, code-server, puppeteer-core
    python -m pytest editors/vscode/e2e -q
Screenshots of each step land in the test's tmp folder (printed on failure).
"""
from __future__ import annotations

import json
import re
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

E2E = Path(__file__).resolve().parent
EXT = E2E.parent
REPO = EXT.parent.parent
DEPS = E2E / ".deps"
sys.path.insert(0, str(REPO / "tests"))
from tiny_models import tiny_pair_dirs  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vsix(tmp_path_factory) -> Path:
    if not (DEPS / "node" / "bin" / "node").exists() or not (DEPS / "node_modules" / "code-server").exists():
        pytest.fail(f"run {E2E / 'install.sh'} first (code-server, Node 24, puppeteer-core)")
    if not (EXT / "node_modules" / ".package-lock.json").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=EXT, check=True)
    out = tmp_path_factory.mktemp("vsix") / "specfill.vsix"
    subprocess.run(["npx", "vsce", "package", "--skip-license", "-o", str(out)], cwd=EXT,
                   check=True, capture_output=True, timeout=300)
    return out


def test_ghost_text_shows_after_typing_and_tab_accepts_it(vsix, tmp_path):
    target, draft = tiny_pair_dirs()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "example.py").write_text("")
    settings = {
        "specfill.server.command": sys.executable,
        "specfill.server.args": ["-m", "lsp"],
        "specfill.targetModel": target,
        "specfill.draftModel": draft,
        "specfill.device": "cpu",
        "specfill.maxNewTokens": 24,
        "specfill.multiline": "always",
        "editor.inlineSuggest.enabled": True,
        "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
        "workbench.startupEditor": "none",
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "chat.disableAIFeatures": True,
        "security.workspace.trust.enabled": False,
        "telemetry.telemetryLevel": "off",
        "extensions.autoUpdate": False,
        "extensions.autoCheckUpdates": False,
    }
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "PATH": f"{DEPS / 'node' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        "E2E_DEPS": str(DEPS),
        "E2E_VSIX": str(vsix),
        "E2E_WORKSPACE": str(workspace),
        "E2E_FILE": "example.py",
        "E2E_SETTINGS": json.dumps(settings),
        "E2E_OUT": str(out),
        "E2E_PORT": str(free_port()),
        "E2E_TYPE": "def add(a, b):",
        "E2E_SETTINGS_CHANGE": json.dumps({"specfill.draftLength": "3"}),
        "CHROMIUM": shutil.which("chromium") or "/usr/bin/chromium",
    }
    res = subprocess.run([str(DEPS / "node" / "bin" / "node"), str(E2E / "run.js")], env=env,
                         capture_output=True, text=True, timeout=900)
    log = f"\n--- driver stderr ---\n{res.stderr[-6000:]}\nscreenshots and logs: {out}"
    assert res.stdout.strip(), "driver printed nothing" + log
    seen = json.loads(res.stdout.strip().splitlines()[-1])
    assert seen.get("ok"), seen.get("error", "") + log

    ghost = seen["ghost"]
    first_line = ghost.strip().split("\n")[0].strip()
    assert first_line, seen
    # Accepted: the suggestion is now text in the editor, and the ghost decoration is gone.
    assert first_line in seen["editorAfter"], seen
    assert "def add(a, b):" in seen["editorAfter"]
    assert "specfill" in seen["statusReady"]["label"]
    status = seen["statusAfter"]["label"]
    assert "ms" in status and "100% accepted" in status, status
    # The settings change made in settings.json reached the running server: its stats say so.
    assert any(re.search(r'"draftLength": 3\b', line) for line in seen["statsDraftLength"]), seen["statsDraftLength"]
