"""The Neovim plugin recovers and explains, in a real Neovim on the real server (tiny model pair):
a server killed with SIGKILL (between requests, and in the middle of one) is started again with
back-off, every buffer attached again and the settings kept, with one notice and no "Press ENTER"
prompt in insert mode (a real terminal: tmux); after three restarts in a row it stops and says so,
and :SpecfillRestart starts it by hand. Setting mistakes are one notice each, a typo in setup{} is
one error line and the rest of init.lua runs, and the statusline says why a buffer gets nothing."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.test_nvim import (TMUX, WAIT_MODEL_S, Nvim, TmuxNvim, attached_nvim, lua_string,
                                 nvim_in_new_folder, server_settings, server_setup, server_stats,
                                 type_until_ghost)

CLIENTS = "vim.lsp.get_clients({ name = 'specfill' })"


def server_pids(nvim_pid: int) -> list[int]:
    """The specfill servers Neovim started (its child processes running `-m lsp`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == nvim_pid and b"lsp" in cmdline and b"-m" in cmdline:
            found.append(int(entry.name))
    return found


def kill_server(nv: Nvim) -> int:
    """SIGKILL the one running server; returns its pid."""
    (pid,) = server_pids(nv.lua("return vim.fn.getpid()"))
    os.kill(pid, signal.SIGKILL)
    return pid


def attached_to(nv: Nvim, bufs: list[int], not_client: int | None = None) -> str:
    """A Lua condition: every buffer in `bufs` has a specfill client (other than `not_client`)."""
    checks = [f"(function() local c = vim.lsp.get_clients({{ bufnr = {b}, name = 'specfill' }})[1] "
              f"return c ~= nil and c.id ~= {not_client or -1} and c.initialized end)()" for b in bufs]
    return " and ".join(checks)


def notices(nv: Nvim, text: str) -> list[str]:
    return [n for n in nv.lua("return require('specfill.notice').shown") or [] if text in n]


def no_prompt_while(nv: TmuxNvim, seconds: float, until=None) -> None:
    """Watch the terminal: no "Press ENTER" prompt, for `seconds` or until `until()` is true."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        screen = nv.screen(escapes=False)
        assert "Press ENTER" not in screen and "press ENTER" not in screen, screen
        if until is not None and until():
            return
        time.sleep(0.1)


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux; .ci/run installs it)")
def test_a_killed_server_comes_back_for_every_buffer_with_the_settings_and_no_prompt():
    tmp = Path(tempfile.mkdtemp(prefix="sfrc"))
    (tmp / "other.py").write_text("import os\n")
    # The server holds each request 3 s (the debounceMs option), so that one can be in flight
    # when it is killed; the plugin starts it again with the same command.
    setup = {**server_setup({**server_settings(), "debounceMs": 3000}), "debounce_ms": 30}
    nv = TmuxNvim(tmp, setup, "main.py")
    try:
        nv.wait(f"#{CLIENTS} > 0", 60, "LSP attach")
        main = nv.lua("return vim.api.nvim_get_current_buf()")
        nv.lua(f"vim.cmd.edit({lua_string(str(tmp / 'other.py'))})")
        other = nv.lua("return vim.api.nvim_get_current_buf()")
        nv.wait(attached_to(nv, [main, other]), 60, "both buffers attached")
        nv.lua(f"vim.cmd.buffer({main})")
        nv.lua("require('specfill').set_settings({ draftLength = 3 })")   # a change made live
        type_until_ghost(nv, "def add(a, b):<CR>")

        # 1. Killed between requests, in insert mode: one notice, no prompt, back in about 1 s.
        first = nv.lua(f"return {CLIENTS}[1].id")
        kill_server(nv)
        no_prompt_while(nv, 30, until=lambda: nv.lua("return " + attached_to(nv, [main, other], first)))
        nv.wait(attached_to(nv, [main, other], first), 60, "both buffers attached to the new server")
        assert nv.lua("return vim.api.nvim_get_mode().mode") == "i"
        assert len(notices(nv, "exited")) == 1, nv.lua("return require('specfill.notice').shown")
        assert notices(nv, "exited (signal 9); starting it again in 1 s (1 of 3)"), notices(nv, "")
        log = "\n".join(nv.lua("return require('specfill.log').lines()"))
        assert "Client specfill quit with exit code" in log   # Neovim's own warning: kept in the log
        assert server_stats(nv)["settings"]["draftLength"] == 3   # the settings in force, kept
        nv.send("<Esc>G")
        nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
        type_until_ghost(nv, "<End><CR>def sub(a, b):<CR>")   # suggestions again

        # 2. Killed while a request waits on the server (held there 3 s).
        second = nv.lua(f"return {CLIENTS}[1].id")
        nv.send("Q")   # not the suggestion's next character: an automatic request (held 3 s)
        nv.wait(f"(function() for _, r in pairs(vim.lsp.get_client_by_id({second}).requests) do "
                "if r.type == 'pending' and r.method == 'textDocument/inlineCompletion' then return true end "
                "end return false end)()", 10, "a request in flight")
        kill_server(nv)
        no_prompt_while(nv, 30, until=lambda: nv.lua("return " + attached_to(nv, [main, other], second)))
        nv.wait(attached_to(nv, [main, other], second), 60, "both buffers attached again")
        assert nv.lua("return vim.api.nvim_get_mode().mode") == "i"
        assert notices(nv, "exited (signal 9); starting it again in 2 s (2 of 3)"), notices(nv, "")
        assert len(notices(nv, "exited")) == 2
        assert server_stats(nv)["options"]["debounceMs"] == 3000   # started with the same command
        assert server_stats(nv)["settings"]["draftLength"] == 3
    finally:
        nv.close()
        shutil.rmtree(tmp, ignore_errors=True)


def test_after_three_restarts_it_stops_says_so_and_specfill_restart_starts_it():
    with attached_nvim("sfrs", {**server_settings(), "enable": False}, "stop.py") as nv:
        # Shorter waits than the 1 s, 2 s, 4 s a person gets (the count is what is tested here).
        nv.lua("require('specfill.restart').DELAYS_MS = { 100, 200, 400 }")
        for attempt in (1, 2, 3):
            before = nv.lua(f"return {CLIENTS}[1].id")
            kill_server(nv)
            nv.wait(f"(function() local c = {CLIENTS}[1] return c ~= nil and c.id ~= {before} and c.initialized end)()",
                    60, f"restart {attempt}")
        kill_server(nv)
        line = nv.wait("require('specfill').statusline():find('not restarted') and require('specfill').statusline()",
                       30, "the statusline to say it stopped")
        assert line == "specfill: error: server exited (signal 9), not restarted; :SpecfillRestart"
        assert notices(nv, "exited (signal 9), 4 times in a row: not starting it again"), notices(nv, "")
        time.sleep(1.0)
        assert nv.lua(f"return #{CLIENTS}") == 0   # it stays stopped
        # :SpecfillReload and :SpecfillRestart start it again (the count starts over)
        nv.lua("vim.cmd('SpecfillRestart')")
        nv.wait(f"#{CLIENTS} > 0 and {CLIENTS}[1].initialized", 60, "the server started by hand")
        assert "not restarted" not in nv.lua("return require('specfill').statusline()")
        assert nv.lua("return require('specfill.restart').exits") == 0


def test_a_setting_mistake_is_one_notice_whatever_route_it_came_by():
    settings = {**server_settings(), "enable": False, "temperature": 5, "maxNewToken": 3}
    with attached_nvim("sfst", settings, "settings.py") as nv:
        nv.wait("#require('specfill.notice').shown > 0", 60, "the notice")
        time.sleep(3.0)   # the same section also arrives pulled and pushed: no more notices
        shown = nv.lua("return require('specfill.notice').shown")
        assert len(shown) == 1, shown
        assert "invalid value for specfill.temperature: 5" in shown[0], shown
        assert "unknown setting 'maxNewToken' (did you mean maxNewTokens?)" in shown[0], shown


def test_a_typo_in_setup_is_one_error_line_and_the_rest_of_init_lua_runs():
    setup = {"cmd": [sys.executable, "-m", "lsp"], "settngs": {"maxNewTokens": 8},
             "keys": {"acept": "<Tab>"}, "filetypes": ["specfill-none"]}
    with nvim_in_new_folder("sfty", setup, "typo.py", after_setup="vim.g.rest_of_init = 'ran'") as nv:
        assert nv.lua("return vim.g.rest_of_init") == "ran"
        shown = nv.wait("require('specfill.notice').shown[1]", 10, "the error line")
        assert shown == ("specfill: setup: unknown option settngs (did you mean settings?); "
                         "unknown option keys.acept (did you mean keys.accept?)"), shown
        messages = nv.lua("return vim.api.nvim_exec2('messages', { output = true }).output")
        assert "E5113" not in messages and "stack traceback" not in messages, messages
        assert "unknown option settngs" in messages
        # the plugin is set up with the rest
        assert nv.lua("return vim.fn.exists(':SpecfillRestart')") == 2


def test_the_statusline_says_why_a_buffer_gets_nothing():
    settings = {**server_settings(), "maxDocumentChars": 1000}
    files = {"big.py": "x = 1\n" * 300, "notes.md": "# notes\n"}
    with attached_nvim("sfwh", settings, "small.py", files=files) as nv:
        nv.wait("require('specfill').statusline():match('^specfill: ready') ~= nil", WAIT_MODEL_S, "models loaded")
        nv.lua(f"vim.cmd.edit({lua_string(str(nv.dir / 'big.py'))})")
        line = nv.wait("require('specfill').statusline():find('off here') and require('specfill').statusline()",
                       30, "the statusline to say why")
        assert line == "specfill: off here: file too large"
        stats = server_stats(nv)
        (reason,) = stats["refusedDocuments"].values()
        assert reason.startswith("1800 characters, over maxDocumentChars (1000)"), reason
        nv.send(":SpecfillStats!<CR>")
        nv.wait("vim.api.nvim_buf_get_name(0):match('specfill://stats$') ~= nil", 30, ":SpecfillStats! buffer")
        full = nv.buffer()
        nv.lua("vim.cmd('close')")
        assert "-- this buffer: no suggestions: file too large" in full, full
        # a filetype the plugin is not set up for
        nv.lua("require('specfill.state').opts.filetypes = { 'python' }")
        nv.lua(f"vim.cmd.edit({lua_string(str(nv.dir / 'notes.md'))})")
        assert nv.lua("return require('specfill').statusline()") == \
            "specfill: off here: filetype markdown is not in filetypes"


def test_an_empty_answer_shows_its_run_in_specfill_stats_bang():
    """One-line answers at the end of the `def` line: the tiny pair's first line is empty, so
    nothing is drawn; :SpecfillStats! still shows what was decoded and what cut it."""
    settings = {**server_settings(), "multiline": "never", "extraTokens": 0}
    files = {"walk.py": "import os\n\n\ndef walk(root):\n"}
    with attached_nvim("sfem", settings, "walk.py", files=files) as nv:
        nv.wait("require('specfill').statusline():match('^specfill: ready') ~= nil", WAIT_MODEL_S, "models loaded")
        nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 15 })")
        nv.send("a")
        nv.wait("vim.api.nvim_get_mode().mode == 'i'", 10, "insert mode")
        nv.send("<M-\\>")
        deadline = time.monotonic() + 60
        while (not (last := server_stats(nv)["lastRequest"]) or not last.get("uri", "").endswith("walk.py")
               or last["pending"]):
            assert time.monotonic() < deadline, last
            time.sleep(0.2)
        assert last["answered"] is False and "before any text" in last["reason"], last
        assert nv.ghost() == []
        nv.send("<Esc>:SpecfillStats!<CR>")
        nv.wait("vim.api.nvim_buf_get_name(0):match('specfill://stats$') ~= nil", 30, ":SpecfillStats! buffer")
        full = nv.buffer()
        assert 'cut_by = "newline"' in full and "empty_reason" in full and "decoded_tokens" in full, full
        assert "last request     no answer" not in full   # (that is the short summary's line)
