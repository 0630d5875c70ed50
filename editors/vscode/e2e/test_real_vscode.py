"""The extension in a real VS Code (code-server 4.139 = VS Code 1.139) shown in headless chromium,
with the real specfill server on tiny real models (tests/tiny_models.py, built with
tests/conftest.py's settings): ghost text after typing, Tab inserts exactly the suggestion that
was drawn, the status bar reports ready / latency / acceptance of the suggestions VS Code really
drew, the server's INFO log lines are not errors, the ghost text beside an open IntelliSense menu
continues its selected item (selectedCompletionInfo), Alt+] / Alt+[ cycle through the server's
alternatives (specfill.candidates) and Tab takes the one shown, and a server that cannot start
says so in the status bar and opens its log.

Part of `python -m pytest -q` once its dependencies are installed (CI installs them and sets
SPECFILL_VSCODE_E2E=required, so a missing install fails there); skipped with the reason
otherwise. Run:
    editors/vscode/e2e/install.sh                 # once: chromium, Node 24, code-server, puppeteer-core
    python -m pytest editors/vscode/e2e -q
Screenshots of each step, the driver's result.json, code-server's logs and the extension's output
channel land in the test's tmp folder, printed on failure.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiny_models import tiny_pair_dirs

E2E = Path(__file__).resolve().parent
EXT = E2E.parent
REPO = EXT.parent.parent
DEPS = E2E / ".deps"
# How long an answer must stay current to count as shown: src/shown.ts's SETTLE_MS.
SETTLE_MS = int(re.search(r"SETTLE_MS = (\d+)", (EXT / "src" / "shown.ts").read_text()).group(1))
# CI sets this: a missing install there is a failure, not a skip.
REQUIRED = os.environ.get("SPECFILL_VSCODE_E2E") == "required"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vsix(tmp_path_factory) -> Path:
    missing = [p for p in (DEPS / "node" / "bin" / "node", DEPS / "node_modules" / "code-server",
                           DEPS / "node_modules" / "puppeteer-core") if not p.exists()]
    if shutil.which("chromium") is None:
        missing.append(Path("chromium"))
    if missing:
        why = f"real-VS Code suite not installed ({', '.join(map(str, missing))}): run {E2E / 'install.sh'}"
        pytest.fail(why) if REQUIRED else pytest.skip(why)
    if not (EXT / "node_modules" / ".package-lock.json").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=EXT, check=True)
    out = tmp_path_factory.mktemp("vsix") / "specfill.vsix"
    subprocess.run(["npm", "run", "package", "--", "-o", str(out)], cwd=EXT, check=True,
                   capture_output=True, timeout=300)
    return out


@contextlib.contextmanager
def folder_on_failure(out: Path):
    """Any failure (an assertion, the driver's timeout, unreadable output) also names the folder
    with the screenshots and logs."""
    try:
        yield
    except Exception as err:
        err.add_note(f"screenshots and logs: {out}")
        raise


def drive(vsix: Path, tmp_path: Path, scenario: str, settings: dict, text: str = "",
          files: dict[str, str] | None = None, **env_extra: str) -> tuple[dict, Path]:
    """Runs run.js for one scenario on example.py holding `text` (and `files` beside it);
    returns what it saw and its output folder."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "example.py").write_text(text)
    for name, content in (files or {}).items():
        (workspace / name).write_text(content)
    out = tmp_path / "out"
    out.mkdir()
    # Also in the captured output, which pytest shows for a failed or timed-out test.
    print(f"screenshots and logs: {out}", file=sys.stderr)
    base = {
        "editor.inlineSuggest.enabled": True,
        "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
        "workbench.startupEditor": "none",
        # The web build saves after a delay by default; the ghost-text test saves by hand and
        # reads the file to see what Tab inserted.
        "files.autoSave": "off",
        "workbench.secondarySideBar.defaultVisibility": "hidden",
        "chat.disableAIFeatures": True,
        "security.workspace.trust.enabled": False,
        "telemetry.telemetryLevel": "off",
        "extensions.autoUpdate": False,
        "extensions.autoCheckUpdates": False,
    }
    env = {
        **os.environ,
        "PATH": f"{DEPS / 'node' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        "E2E_SCENARIO": scenario,
        "E2E_DEPS": str(DEPS),
        "E2E_VSIX": str(vsix),
        "E2E_WORKSPACE": str(workspace),
        "E2E_FILE": "example.py",
        "E2E_SETTINGS": json.dumps({**base, **settings}),
        "E2E_OUT": str(out),
        "E2E_PORT": str(free_port()),
        "CHROMIUM": shutil.which("chromium") or "/usr/bin/chromium",
        **env_extra,
    }
    with folder_on_failure(out):
        # Under the suite's own timeout (pyproject: 600 s), so this one names the folder.
        res = subprocess.run([str(DEPS / "node" / "bin" / "node"), str(E2E / "run.js")], env=env,
                             capture_output=True, text=True, timeout=480)
        assert res.stdout.strip(), f"driver printed nothing\n--- driver stderr ---\n{res.stderr[-6000:]}"
        seen = json.loads(res.stdout.strip().splitlines()[-1])
        assert seen.get("ok"), f"{seen.get('error', '')}\n--- driver stderr ---\n{res.stderr[-6000:]}"
    return seen, out


def rendered_suggestions(renders: dict) -> list[str]:
    """The suggestions VS Code drew for at least SETTLE_MS, from the page's record of every ghost
    text change, each as the text it showed longest. VS Code draws a multi-line suggestion in
    steps (and redraws its rest after Tab), so one appearance is a run of non-empty ghost text
    between empty ones."""
    changes = renders["changes"] + [{"t": renders["now"], "text": ""}]
    shown: list[str] = []
    start = None
    for change, after in zip(changes, changes[1:] + [None]):
        visible = bool(change["text"].strip())
        if visible and start is None:
            start, lasted = change["t"], {}
        if visible and after is not None:
            lasted[change["text"]] = lasted.get(change["text"], 0) + after["t"] - change["t"]
        elif not visible and start is not None:
            if change["t"] - start >= SETTLE_MS:
                shown.append(max(lasted, key=lasted.get))
            start = None
    return shown


def output_channel_lines(out: Path) -> list[str]:
    """The extension's `specfill` output channel, as VS Code wrote it to its log folder."""
    files = sorted((out / "user-data" / "logs").glob("**/*specfill*/*.log"))
    return [line for f in files for line in f.read_text(errors="replace").splitlines()]


# The file the ghost-text test opens, and the keystroke typed at its end.
FILE_TEXT = "def add(a, b):\n    "
TYPED = "r"


def tiny_pair_settings() -> dict:
    """The server on the tests' tiny pair, on the CPU, with short multi-line answers."""
    target, draft = tiny_pair_dirs()
    return {
        "specfill.server.command": sys.executable,
        "specfill.server.args": ["-m", "lsp"],
        "specfill.targetModel": target,
        "specfill.draftModel": draft,
        "specfill.device": "cpu",
        "specfill.maxNewTokens": 24,
        "specfill.multiline": "always",
    }


def test_ghost_text_shows_after_typing_and_tab_accepts_it(vsix, tmp_path):
    settings = tiny_pair_settings()
    seen, out = drive(vsix, tmp_path, "complete", settings, text=FILE_TEXT, E2E_TYPE=TYPED,
                      E2E_SETTINGS_CHANGE=json.dumps({"specfill.draftLength": "3"}))
    with folder_on_failure(out):
        suggestion = seen["suggestion"]
        assert suggestion.strip(), seen
        # Nothing replaced it while it was read (one request decides it).
        assert seen["suggestionAtTab"] == suggestion, seen
        # Tab inserted exactly the suggestion that was drawn: the saved file says so.
        assert seen["fileAfter"] == FILE_TEXT + TYPED + suggestion, (seen["fileAfter"], suggestion)
        assert "specfill" in seen["statusReady"]["label"]
        # Shown = drawn on screen: one Tab accepted one of the suggestions VS Code drew (after
        # Tab it may draw the next one at once, which counts too).
        drawn = rendered_suggestions(seen["rendersAfter"])
        assert drawn and drawn[0] == suggestion, seen["rendersAfter"]
        status = seen["statusAfter"]["label"]
        assert re.search(r"\d+ ms", status), status
        assert f"{round(100 / len(drawn))}% accepted" in status, (status, drawn)
        # The settings change made in settings.json reached the running server: its stats say so.
        assert any(re.search(r'"draftLength": 3\b', line) for line in seen["statsDraftLength"]), seen["statsDraftLength"]
        # The server's INFO log lines arrive at their level, not as errors.
        log = output_channel_lines(out)
        assert any("[info]" in line for line in log), log[:40]
        assert not [line for line in log if "[error]" in line and re.search(r"\bINFO\b", line)], log[:40]


def test_manual_mode_for_python_asks_only_when_invoked_and_then_for_alternatives(vsix, tmp_path):
    settings = {
        **tiny_pair_settings(),
        "specfill.candidates": 2,
        # Per language: the user-wide value stays automatic.
        "[python]": {"specfill.trigger": "manual"},
    }
    seen, out = drive(vsix, tmp_path, "manual", settings, text=FILE_TEXT, E2E_TYPE=TYPED)
    with folder_on_failure(out):
        # The keystroke asked nothing: no ghost text, no answer timed in the status bar.
        assert seen["ghostBeforeInvoke"].strip() == "", seen
        assert not re.search(r"\d+ ms", seen["statusBeforeInvoke"]["label"]), seen["statusBeforeInvoke"]
        # Asking drew a suggestion, answered through specfill/alternatives.
        assert seen["suggestion"].strip(), seen
        assert re.search(r"\d+ ms", seen["statusAfter"]["label"]), seen["statusAfter"]
        # Through specfill/alternatives (the extension logs each explicit ask).
        log = output_channel_lines(out)
        assert any(re.search(r"asked for alternatives \(specfill/alternatives\): [12] different", line) for line in log), log[-40:]


# IntelliSense (word-based suggestions) offers `alpha` for the typed `al`.
MENU_FILE_TEXT = "def add(alpha, beta):\n    return a"
MENU_TYPED = "l"


def pipeline_answer(settings: dict, uri: str, text: str, at: tuple[int, int] | None = None) -> str:
    """What the completion pipeline (in this process, the server's models and settings) answers
    at `at` (0-based line and character; default: the end of `text`) in the file at `uri`."""
    import threading

    from lsp.backend import completion_options, completion_request, load_backend
    from lsp.settings import Settings, parse_settings

    server = parse_settings({k.removeprefix("specfill."): v for k, v in settings.items()
                             if k.startswith("specfill.") and not k.startswith("specfill.server.")}, Settings())
    # (the server options on its command line, in specfill.server.args, change no answer here)
    lines = text.split("\n")
    line, character = at if at is not None else (len(lines) - 1, len(lines[-1]))
    found = load_backend(server).pipeline.complete(
        completion_request(uri, text, line, character),
        completion_options(server), cancel=threading.Event())
    return found.text if found is not None else ""


def test_ghost_text_beside_intellisense_continues_the_selected_item(vsix, tmp_path):
    settings = tiny_pair_settings()
    typed = MENU_FILE_TEXT + MENU_TYPED
    with_item = typed.removesuffix("al") + "alpha"
    uri = (tmp_path / "ws" / "example.py").as_uri()   # where drive() writes the file
    continuation = pipeline_answer(settings, uri, with_item)
    assert continuation and continuation != pipeline_answer(settings, uri, typed), \
        "the tiny pair should answer differently after `al` and after `alpha`"
    seen, out = drive(vsix, tmp_path, "selected", settings, text=MENU_FILE_TEXT, E2E_TYPE=MENU_TYPED,
                      E2E_GHOST_START="pha")
    with folder_on_failure(out):
        assert seen["menu"]["selected"] == "alpha", seen["menu"]
        assert seen["menuAtRead"]["visible"], seen
        # Beside the open menu, the ghost text is the item's rest, then the server's answer
        # for the document with the item in place (not its answer after `al`).
        assert seen["suggestion"] == "pha" + continuation, (seen["suggestion"], seen["ghostPieces"])
        # Tab takes the item and the ghost text stays; Tab again takes the ghost text.
        assert seen["afterFirstTab"]["text"].rstrip().endswith("return alpha"), seen["afterFirstTab"]
        assert seen["afterFirstTab"]["suggestion"] == continuation, seen["afterFirstTab"]
        assert seen["fileAfter"] == with_item + continuation, (seen["fileAfter"], continuation)


def sent_results(log: list[str]) -> list:
    """The result of each message the server sent, in order, read from its debug log (pygls logs
    each message it sends)."""
    results = []
    for line in log:
        _, found, body = line.partition("Sending data: ")
        if not found:
            continue
        try:
            message = json.loads(body)
        except ValueError:
            continue
        results.append(message.get("result"))
    return results


def alternatives_answers(log: list[str]) -> list[list[str]]:
    """The texts of each answer the server sent with two or more items (only specfill/alternatives
    answers more than one)."""
    items = [r.get("items") for r in sent_results(log) if isinstance(r, dict)]
    return [[item["insertText"] for item in found] for found in items if found and len(found) >= 2]


def test_alt_brackets_cycle_through_the_servers_alternatives_and_tab_takes_the_shown_one(vsix, tmp_path):
    settings = {
        **tiny_pair_settings(),
        # The greedy suggestion, then up to two exact samples at temperature 1 (the server's
        # default for samples when `temperature` is 0): at this cursor the tiny pair's samples
        # are different from it and from each other (300 of 300 seeds, in-process).
        "specfill.candidates": 3,
        # pygls logs every message the server sends at this level: the alternatives it answered.
        "specfill.server.args": ["-m", "lsp", "--log-level", "debug"],
    }
    uri = (tmp_path / "ws" / "example.py").as_uri()   # where drive() writes the file
    greedy = pipeline_answer(settings, uri, FILE_TEXT + TYPED)
    seen, out = drive(vsix, tmp_path, "cycle", settings, text=FILE_TEXT, E2E_TYPE=TYPED)
    with folder_on_failure(out):
        # Typing shows one suggestion: the greedy one.
        assert seen["first"] == greedy, (seen["first"], greedy)
        # Alt+] asked the server once for alternatives (VS Code's explicit trigger), which
        # answered the greedy one first and different others.
        log = output_channel_lines(out)
        asked = [line for line in log if "asked for alternatives (specfill/alternatives)" in line]
        answers = alternatives_answers(log)
        assert len(asked) == 1 and len(answers) == 1, (asked, answers)
        texts = answers[0]
        assert f"{len(texts)} different" in asked[0], (asked, texts)
        assert len(set(texts)) == len(texts) and texts[0] == greedy, texts
        # Alt+] shows the next one, Alt+[ comes back to the first.
        assert seen["next"] == texts[1], (seen["next"], texts)
        assert seen["back"] == seen["suggestionAtTab"] == greedy, seen
        # Tab accepts the suggestion shown: the saved file says so.
        assert seen["fileAfter"] == FILE_TEXT + TYPED + greedy, (seen["fileAfter"], greedy)


def test_a_server_that_cannot_start_says_so_in_the_status_bar_and_shows_its_log(vsix, tmp_path):
    settings = {
        "specfill.server.command": sys.executable,
        "specfill.server.args": ["-m", "lsp", "--log-level", "bogus"],
    }
    seen, out = drive(vsix, tmp_path, "broken", settings)
    with folder_on_failure(out):
        label = seen["statusError"]["label"]
        code = re.search(r"error: server exited \(code (\d+)\)", label)
        assert code and code.group(1) != "0", label
        # The click opened the output channel with the server's own complaint and the exit.
        assert "bogus" in seen["log"], seen["log"]
        assert f"server exited (code {code.group(1)})" in seen["log"], seen["log"]


def test_a_killed_server_is_started_again_with_one_notice_each_time(vsix, tmp_path):
    settings = {
        **tiny_pair_settings(),
        # A request waits this long on the server before decoding (the server option debounceMs):
        # the second kill lands in one.
        "specfill.server.args": ["-m", "lsp", "--option", "debounceMs=3000"],
        "specfill.draftLength": "3",
    }
    seen, out = drive(vsix, tmp_path, "restart", settings, text=FILE_TEXT, E2E_TYPE=TYPED)
    with folder_on_failure(out):
        assert seen["first"].strip() and seen["afterBetween"].strip() and seen["afterDuring"].strip(), seen
        for kill, attempt, delay in (("between", 1, 1), ("during", 2, 2)):
            assert "specfill: restarting" in seen[kill]["restarting"]["label"], seen[kill]
            assert "codicon-check" in seen[kill]["ready"]["icons"], seen[kill]
        texts = [n["text"] for n in seen["notifications"]]
        exits = [t for t in texts if "server exited" in t]
        assert exits == [
            "specfill: the server exited (signal SIGKILL); starting it again in 1 s (1 of 3)",
            "specfill: the server exited (signal SIGKILL); starting it again in 2 s (2 of 3)",
        ], texts
        # nothing else popped up: no "Connection to server got closed", no failed request
        assert texts == exits, texts
        log = output_channel_lines(out)
        assert any("server exited (signal SIGKILL)" in line for line in log), log[-40:]
        assert "codicon-check" in seen["statusAfter"]["icons"], seen["statusAfter"]


WALK = "import os\n\n\ndef walk(root):\n"


def test_the_status_bar_and_stats_say_why_nothing_is_shown(vsix, tmp_path):
    settings = {
        **tiny_pair_settings(),
        "specfill.multiline": "never",   # at the end of the def line the tiny pair's first line is empty
        "specfill.server.args": ["-m", "lsp", "--option", "maxDocumentChars=1000"],   # a server option
        "[markdown]": {"specfill.enable": False},
    }
    uri = (tmp_path / "ws" / "example.py").as_uri()
    assert pipeline_answer(settings, uri, WALK, at=(3, len("def walk(root):"))) == ""
    seen, out = drive(vsix, tmp_path, "why", settings, text=WALK, E2E_TYPE="", E2E_LINE="4",
                      files={"big.py": "x = 1\n" * 300, "notes.md": "# notes\n"},
                      E2E_OTHER_FILES="big.py,notes.md")
    with folder_on_failure(out):
        assert seen["ghostAtLine"].strip() == "", seen
        # "specfill: Show Stats" shows the run of the empty answer: what cut it, and why empty
        assert any('"cut_by": "newline"' in line for line in seen["statsCutBy"]), seen["statsCutBy"]
        assert any("before any text" in line for line in seen["statsEmptyReason"]), seen["statsEmptyReason"]
        big, notes = seen["others"]["big.py"], seen["others"]["notes.md"]
        assert "specfill: file too large" in big["label"], big
        assert "specfill: off for markdown" in notes["label"], notes


def next_edit_answers(log: list[str]) -> list[dict]:
    """Each specfill/nextEdit answer the server sent that is an edit, in order."""
    return [r for r in sent_results(log) if isinstance(r, dict) and "newText" in r and "range" in r]


def log_time(line: str) -> float | None:
    """The time (epoch seconds) a line of VS Code's log was written, from its timestamp."""
    import datetime

    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})", line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None


def text_offset(text: str, position: dict) -> int:
    """The offset of an LSP position in `text` (ASCII: UTF-16 characters are columns)."""
    return sum(len(line) + 1 for line in text.split("\n")[:position["line"]]) + position["character"]


def drawn_beside(edit: dict) -> list[str]:
    """The new text as the extension draws it beside the lines it replaces: its i-th line after
    the range's i-th line, its last line (with any lines beyond the range's, joined by ⏎) at the
    range's end; empty lines draw nothing; spaces drawn as no-break spaces."""
    lines = edit["newText"].split("\n")
    beside = min(edit["range"]["end"]["line"] - edit["range"]["start"]["line"], len(lines) - 1)
    labels = lines[:beside] + ["\n".join(lines[beside:]).replace("\n", " \u23ce ")]
    return [label.replace(" ", "\u00a0") for label in labels if label]


# An ordinary suggestion after `    r` at the end; at the end of `def walk(root):` (the colon typed
# there) the inline answer is empty, so that keystroke asks for a next edit.
NEXT_EDIT_FILE = "import os\n\n\ndef walk(root)\n\n\ndef add(a, b):\n    "


def test_next_edit_is_drawn_where_the_inline_answer_is_empty_and_tab_jumps_then_applies_it(vsix, tmp_path):
    settings = {
        **tiny_pair_settings(),
        "specfill.multiline": "never",
        "specfill.extraTokens": 0,
        "specfill.nextEdit": "demo",   # the shipped demo target asked to copy: the mechanics only
        "specfill.server.args": ["-m", "lsp", "--log-level", "debug"],
    }
    uri = (tmp_path / "ws" / "example.py").as_uri()
    typed = NEXT_EDIT_FILE + "r"
    with_colon = typed.replace("def walk(root)", "def walk(root):")
    assert pipeline_answer(settings, uri, typed).strip(), "the tiny pair suggests something after `    r`"
    assert pipeline_answer(settings, uri, with_colon, at=(3, len("def walk(root):"))) == ""
    seen, out = drive(vsix, tmp_path, "nextEdit", settings, text=NEXT_EDIT_FILE, E2E_TYPE="r",
                      E2E_LINE="4", E2E_TYPE2=":")
    with folder_on_failure(out):
        log = output_channel_lines(out)
        # An ordinary suggestion at the cursor takes precedence: none drawn beside it, none asked
        # before the keystroke where the inline answer is empty.
        assert seen["first"].strip(), seen
        assert seen["drawnBesideGhost"] == {"struck": [], "inserted": []}, seen["drawnBesideGhost"]
        asked_at = [log_time(line) for line in log if "Request 'specfill/nextEdit' received" in line]
        typed_there = next(s["t"] for s in seen["steps"] if s["name"] == "typed where the inline answer is empty")
        assert asked_at and min(asked_at) >= typed_there / 1000 - 0.5, (asked_at, typed_there)
        # What is drawn is the server's edit: the range's text struck through, the new text beside it.
        # (The extension logs the id of the edit it applied.)
        applied_ids = [m.group(1) for line in log if (m := re.search(r"next edit (\S+) applied", line))]
        assert len(applied_ids) == 1, log[-40:]
        (edit,) = [a for a in next_edit_answers(log) if str(a["id"]) == applied_ids[0]]
        start, end = edit["range"]["start"], edit["range"]["end"]
        a, b = text_offset(with_colon, start), text_offset(with_colon, end)
        for shown in (seen["shown"], seen["shownAgain"]):
            assert "".join(shown["struck"]) == with_colon[a:b].replace("\n", ""), (shown, edit)
            labels = [json.dumps(label, ensure_ascii=False) for label in drawn_beside(edit)]
            assert shown["inserted"] == labels, (shown, edit)
        # Tab jumps to the edit's start, the edit still drawn; Tab applies exactly the edit.
        assert seen["cursorAfterJump"] == {"line": start["line"] + 1, "column": start["character"] + 1}, seen
        assert seen["drawnAfterJump"] == seen["shownAgain"], seen
        assert seen["fileAfter"] == with_colon[:a] + edit["newText"] + with_colon[b:], (seen["fileAfter"], edit)
        up_to_cursor = (with_colon[:a] + edit["newText"]).split("\n")
        assert seen["cursorAfterApply"] == {"line": len(up_to_cursor), "column": len(up_to_cursor[-1]) + 1}, seen
