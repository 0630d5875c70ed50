"""Next-edit suggestions in a real Neovim on the real server (`nextEdit: demo`: the shipped demo
target asked to copy the region; what it suggests is not the point, the mechanics are): where the
inline answer is empty the plugin asks specfill/nextEdit and draws exactly the edit the server
returned (read back from the extmarks; the server's answers are recorded as they reach the
client), Tab jumps to it and Tab again applies exactly that edit; the dismiss key, moving the
cursor and typing drop it, and Tab is Tab again; leaving insert mode keeps it, in normal mode. An
inline completion at the cursor takes precedence (no next edit is asked), and with
`nextEdit: off` none is asked. In normal mode a change (`x`, `cw...<Esc>`, undo) asks for the
next edit alone: drawn as the server answered, Tab jumps and Tab applies it, <Esc>, moving and
another change drop it, <Tab> with none shown still jumps forward in the jump list, and the
request key asks again for text already asked about. In a
tmux pane: the deleted text is struck through and the new text green on the screen.

The inline answer is empty at the end of `def walk(root):` with `multiline: never` (the tiny
pair's first line there is empty; tests/e2e/test_nvim_recover.py relies on the same)."""
from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.e2e.test_nvim import (SGR, TMUX, WAIT_MODEL_S, Nvim, TmuxNvim, attached_nvim, fresh_buffer,
                                 server_settings, style_at, type_until_ghost)

WALK = "import os\n\n\ndef walk(root)\n"   # `:` typed at the end of line 4 makes the empty case

# Records every request the specfill client sends (method) and each specfill/nextEdit answer as it
# reaches the client, before the plugin's handler sees it.
SPY = """
local client = vim.lsp.get_clients({ bufnr = 0, name = 'specfill' })[1]
local method = require('specfill.protocol').methods.nextEdit
_G.sf_asked, _G.sf_answers = {}, {}
local request = client.request
client.request = function(self, m, params, handler, bufnr)
  table.insert(_G.sf_asked, m)
  if m == method then
    local inner = handler
    handler = function(err, result, ...)
      table.insert(_G.sf_answers, { err = err or vim.NIL, result = result == nil and vim.NIL or result })
      return inner(err, result, ...)
    end
  end
  return request(self, m, params, handler, bufnr)
end
"""


@pytest.fixture(scope="module")
def editor():
    settings = {**server_settings(), "multiline": "never", "extraTokens": 0, "nextEdit": "demo"}
    with attached_nvim("sfne", settings, "walk.py", files={"walk.py": WALK}) as nv:
        nv.wait("require('specfill').statusline():match('^specfill: ready') ~= nil", WAIT_MODEL_S, "models loaded")
        nv.lua(SPY)
        yield nv


def drawn(nv: Nvim) -> dict:
    return nv.lua("return require('specfill').rendered_next_edit(0)") or {}


def asked(nv: Nvim) -> list[str]:
    return nv.lua("return _G.sf_asked") or []


def offset(text: str, position: dict) -> int:
    """The offset of an LSP position in `text` (ASCII: characters are columns)."""
    lines = text.split("\n")
    return sum(len(line) + 1 for line in lines[:position["line"]]) + position["character"]


def applied(text: str, edit: dict) -> str:
    """`text` with the server's edit applied."""
    start, end = offset(text, edit["range"]["start"]), offset(text, edit["range"]["end"])
    return text[:start] + edit["newText"] + text[end:]


def changed_lines(old: str, new: str) -> list[str]:
    """The lines of `new` that are not in `old`'s place: equal lines at both ends left out."""
    a, b = old.split("\n"), new.split("\n")
    lead = 0
    while lead < min(len(a), len(b)) and a[lead] == b[lead]:
        lead += 1
    trail = 0
    while trail < min(len(a), len(b)) - lead and a[-1 - trail] == b[-1 - trail]:
        trail += 1
    return b[lead:len(b) - trail]


def buffer_text(nv: Nvim) -> str:
    return nv.buffer() + "\n"   # the buffer's last line ends with an end of line, as on disk


def ask_where_the_answer_is_empty(nv: Nvim) -> None:
    """In insert mode at the end of `def walk(root):`, explicitly ask; wait for the next edit."""
    nv.lua("_G.sf_answers = {}")
    nv.send("<M-\\>")
    nv.wait("#_G.sf_answers > 0 and next(require('specfill').rendered_next_edit(0)) ~= nil", WAIT_MODEL_S,
            "a next edit drawn")


def assert_drawn(nv: Nvim, edit: dict, before: str) -> dict:
    """What is drawn is the server's `edit` of `before` (the buffer's text): the range it replaces
    struck through, the text it writes beside it. Returns what is drawn."""
    after = applied(before, edit)
    assert after != before
    shown = drawn(nv)
    start, end = edit["range"]["start"], edit["range"]["end"]
    last_row = len(before.split("\n")) - 2
    if (start["line"], start["character"]) != (end["line"], end["character"]):
        end_row, end_col = (end["line"], end["character"]) if end["line"] <= last_row else (last_row, len(before.split("\n")[last_row]))
        assert shown["deleted"] == {"row": start["line"], "col": start["character"],
                                    "end_row": end_row, "end_col": end_col}, (shown, edit)
    else:
        assert "deleted" not in shown, (shown, edit)
    if start["line"] == end["line"] and "\n" not in edit["newText"]:
        assert shown["inline"] == {"row": end["line"], "col": end["character"], "text": edit["newText"]}, (shown, edit)
    else:
        assert shown.get("lines", {}).get("texts", []) == changed_lines(before, after), (shown, edit)
    return shown


def the_edit_drawn(nv: Nvim) -> dict:
    """Wait for a next edit drawn; it is the server's latest answer (the one the plugin keeps)."""
    nv.wait("next(require('specfill').rendered_next_edit(0)) ~= nil", WAIT_MODEL_S, "a next edit drawn")
    edit = [a["result"] for a in nv.lua("return _G.sf_answers") if a["result"]][-1]
    assert nv.lua("return require('specfill.next_edit').current.result") == edit
    assert edit["uri"] == nv.lua("return vim.uri_from_bufnr(0)"), edit
    return edit


def open_walk(nv: Nvim, request) -> None:
    """A new file holding WALK, named after the test, in a fresh buffer."""
    name = re.sub(r"\W", "_", request.node.name) + ".py"
    (nv.dir / name).write_text(WALK)
    fresh_buffer(nv, name)


@pytest.fixture
def walk(editor, request):
    """The editor on a new file holding WALK, `:` just typed at the end of line 4 (insert mode):
    the change that makes the server suggest a next edit."""
    nv = editor
    open_walk(nv, request)
    nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 13 })")
    nv.lua("_G.sf_asked, _G.sf_answers = {}, {}")
    nv.send("a:")
    nv.wait("vim.api.nvim_get_current_line() == 'def walk(root):'", 10, "the typed colon")
    return nv


def test_the_edit_drawn_is_the_servers_and_tab_jumps_then_applies_it(walk):
    nv = walk
    edit = the_edit_drawn(nv)
    assert nv.ghost() == []   # the inline answer here is empty: that is why it was asked
    before = buffer_text(nv)
    after = applied(before, edit)
    shown = assert_drawn(nv, edit, before)
    start = edit["range"]["start"]

    # Tab jumps to its start (unless the cursor is there), the edit still drawn; Tab applies it.
    row, col = nv.cursor()
    nv.send("<Tab>")
    nv.wait(f"vim.api.nvim_win_get_cursor(0)[1] == {start['line'] + 1} and vim.api.nvim_win_get_cursor(0)[2] == {start['character']}",
            10, "the jump to the edit")
    assert drawn(nv) == shown
    if (row, col) != (start["line"], start["character"]):
        assert buffer_text(nv) == before
        nv.send("<Tab>")
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "the edit applied")
    # (A Neovim buffer ends with an end of line ('eol'): an edit that would drop the last one
    # keeps it.)
    assert buffer_text(nv) == (after if after.endswith("\n") else after + "\n")
    up_to_cursor = after[:offset(before, start) + len(edit["newText"])].split("\n")
    assert nv.cursor() == (len(up_to_cursor) - 1, len(up_to_cursor[-1])), "the cursor after the text written"
    assert nv.lua("return vim.api.nvim_get_mode().mode") == "i"


def test_dismiss_key_moving_and_typing_drop_it_tab_is_tab_again_and_esc_keeps_it(walk):
    nv = walk
    nv.wait("next(require('specfill').rendered_next_edit(0)) ~= nil", WAIT_MODEL_S, "a next edit drawn")
    before = buffer_text(nv)
    nv.send("<C-]>")   # the dismiss key
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "the dismiss key")
    assert buffer_text(nv) == before
    # Nothing shown: Tab is Tab (expandtab: spaces), not a jump.
    nv.send("<Tab>")
    spaces = nv.wait("vim.api.nvim_get_current_line():match('^def walk%(root%):( +)$')", 10, "Tab inserting spaces")
    assert drawn(nv) == {} or nv.cursor() == (3, 15 + len(spaces))
    nv.send("<BS>" * len(spaces))
    nv.wait("vim.api.nvim_get_current_line() == 'def walk(root):'", 10, "the spaces deleted")

    ask_where_the_answer_is_empty(nv)
    nv.send("<Left>")   # moving the cursor yourself
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "moving away")
    nv.send("<Right>")
    nv.wait("vim.api.nvim_win_get_cursor(0)[2] == 15", 10, "back at the line's end")

    ask_where_the_answer_is_empty(nv)
    nv.send("#")   # typing
    nv.wait("vim.api.nvim_get_current_line() == 'def walk(root):#'", 10, "the typed character")
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "typing to drop it")
    nv.send("<BS>")

    ask_where_the_answer_is_empty(nv)
    shown, result = drawn(nv), nv.lua("return require('specfill.next_edit').current.result")
    nv.send("<Esc>")   # leaving insert mode keeps it, now in normal mode, for the normal-mode keys
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    time.sleep(0.3)   # the debounce and more: the change the insert made is not asked about again
    assert drawn(nv) == shown and nv.lua("return require('specfill').next_edit_visible()")
    assert nv.lua("return require('specfill.next_edit').current.result") == result
    nv.send("<Esc>")   # and <Esc> in normal mode drops it
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "<Esc> in normal mode")
    assert nv.lua("return vim.api.nvim_get_mode().mode") == "n"


@pytest.fixture
def walk_normal(editor, request):
    """The editor in normal mode on a new file holding WALK, nothing asked yet."""
    nv = editor
    open_walk(nv, request)
    nv.lua("_G.sf_asked, _G.sf_answers = {}, {}")
    return nv


def mode(nv: Nvim) -> str:
    return nv.lua("return vim.api.nvim_get_mode().mode")


def changedtick(nv: Nvim) -> int:
    return nv.lua("return vim.b.changedtick")


def normal_col(line: str, col: int) -> int:
    """Where normal mode puts the cursor for byte `col` of `line` (ASCII): on a character."""
    return max(0, min(col, len(line) - 1))


def test_a_change_in_normal_mode_shows_the_servers_next_edit_and_tab_tab_applies_it(walk_normal):
    nv = walk_normal
    nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 13 })")
    nv.send("x")   # deletes the `)` of `def walk(root)`
    edit = the_edit_drawn(nv)
    method = nv.lua("return require('specfill.protocol').methods.nextEdit")
    assert asked(nv) == [method]   # the next edit alone: no inline completion in normal mode
    assert mode(nv) == "n"
    before = buffer_text(nv)
    assert before == "import os\n\n\ndef walk(root\n"
    after = applied(before, edit)
    shown = assert_drawn(nv, edit, before)

    # Tab jumps to its start (here away from the cursor), the edit still drawn; Tab applies it.
    start = edit["range"]["start"]
    jump = (start["line"], normal_col(before.split("\n")[start["line"]], start["character"]))
    assert nv.cursor() != jump, (nv.cursor(), edit)
    nv.send("<Tab>")
    nv.wait(f"vim.deep_equal(vim.api.nvim_win_get_cursor(0), {{ {jump[0] + 1}, {jump[1]} }})", 10, "the jump to the edit")
    assert drawn(nv) == shown and buffer_text(nv) == before and mode(nv) == "n"
    tick = changedtick(nv)
    nv.send("<Tab>")
    nv.wait(f"vim.b.changedtick ~= {tick}", 10, "the edit applied")
    assert buffer_text(nv) == (after if after.endswith("\n") else after + "\n")
    # The cursor on the last character written (where the last line written is empty, on what
    # follows it), in normal mode.
    up_to_cursor = after[:offset(before, start) + len(edit["newText"])].split("\n")
    row = len(up_to_cursor) - 1
    col = len(up_to_cursor[-1]) - (1 if edit["newText"].split("\n")[-1] else 0)
    assert nv.cursor() == (row, normal_col(after.split("\n")[row], col))
    assert mode(nv) == "n"


def test_after_cw_esc_the_next_edit_shows_esc_drops_it_and_tab_still_jumps_forward(walk_normal):
    nv = walk_normal
    nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 4 })")
    nv.send("cwwalker<Esc>")   # a change made through insert mode, asked about once back in normal mode
    edit = the_edit_drawn(nv)
    assert mode(nv) == "n" and nv.lua("return vim.api.nvim_get_current_line()") == "def walker(root)"
    before = buffer_text(nv)
    assert_drawn(nv, edit, before)
    nv.send("<Esc>")
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "<Esc> dropping it")
    assert buffer_text(nv) == before and mode(nv) == "n"

    # Nothing shown: <Tab> is <C-i>, forward in the jump list.
    here = nv.cursor()
    nv.send("gg")
    nv.wait("vim.api.nvim_win_get_cursor(0)[1] == 1", 10, "gg")
    nv.send("<C-o>")
    nv.wait(f"vim.api.nvim_win_get_cursor(0)[1] == {here[0] + 1}", 10, "<C-o> back")
    nv.send("<Tab>")
    nv.wait("vim.api.nvim_win_get_cursor(0)[1] == 1", 10, "<Tab> forward in the jump list")
    assert buffer_text(nv) == before and drawn(nv) == {}
    assert len(asked(nv)) == 1   # moving asks nothing


def test_moving_and_another_change_drop_the_normal_mode_edit(walk_normal):
    nv = walk_normal
    nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 13 })")
    nv.send("x")
    the_edit_drawn(nv)
    nv.send("h")   # moving away
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "moving to drop it")
    time.sleep(0.3)
    assert len(asked(nv)) == 1 and drawn(nv) == {}   # and asks nothing

    nv.send("x")
    the_edit_drawn(nv)
    first = nv.lua("return require('specfill.next_edit').current")
    nv.send("u")   # another change (an undo): the edit shown goes, the new text is asked about
    nv.wait("#_G.sf_answers == 3", WAIT_MODEL_S, "the answer about the undo")
    tick = changedtick(nv)
    now = nv.lua("return require('specfill.next_edit').current")
    latest = nv.lua("return _G.sf_answers")[-1]["result"]
    assert now is None or (now["tick"] == tick and now["tick"] != first["tick"] and now["result"] == latest), (now, first)
    assert len(asked(nv)) == 3


def test_the_normal_mode_request_key_asks_again_for_the_text_as_it_is(walk_normal):
    """Dismissed, a next edit is not asked about again until the text changes; the request key
    (`<M-\\>`) asks now, and the answer is drawn in its place."""
    nv = walk_normal
    method = nv.lua("return require('specfill.protocol').methods.nextEdit")
    nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 13 })")
    nv.send("x")
    edit = the_edit_drawn(nv)
    nv.send("<Esc>")
    nv.wait("next(require('specfill').rendered_next_edit(0)) == nil", 10, "<Esc> dropping it")
    time.sleep(0.3)
    assert asked(nv) == [method] and drawn(nv) == {}
    tick, before = changedtick(nv), buffer_text(nv)
    nv.send("<M-\\>")
    nv.wait("#_G.sf_answers == 2 and next(require('specfill').rendered_next_edit(0)) ~= nil", WAIT_MODEL_S,
            "the asked-for edit drawn")
    assert asked(nv) == [method, method] and changedtick(nv) == tick and mode(nv) == "n"
    again = the_edit_drawn(nv)
    # the same text asked about: the same greedy answer, under a new id
    assert {k: v for k, v in again.items() if k != "id"} == {k: v for k, v in edit.items() if k != "id"}
    assert again["id"] != edit["id"]
    assert_drawn(nv, again, before)


def test_an_inline_completion_at_the_cursor_takes_precedence(editor):
    nv = editor
    fresh_buffer(nv, "precedence.py")
    nv.lua("_G.sf_asked = {}")
    type_until_ghost(nv, "def add(a, b):<CR>")
    inline = nv.lua("return require('specfill.protocol').methods")
    # A moment for anything that would follow the answer: no next edit is asked or drawn.
    time.sleep(1.5)
    assert drawn(nv) == {}
    methods = asked(nv)
    assert "textDocument/inlineCompletion" in methods and inline["nextEdit"] not in methods, methods
    # Tab takes the inline completion.
    nv.send("<Tab>")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the ghost text accepted")


def test_with_next_edit_off_none_is_asked(editor, request):
    nv = editor
    nv.lua("require('specfill').set_settings({ nextEdit = 'off' })")
    try:
        open_walk(nv, request)
        nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 13 })")
        nv.lua("_G.sf_asked = {}")
        nv.send("a:")
        nv.wait("vim.tbl_contains(_G.sf_asked, 'textDocument/inlineCompletion')", 10, "the inline request")
        nv.send("<Esc>x")   # and changes in normal mode: leaving insert mode after one, then `x`
        nv.wait("vim.api.nvim_get_current_line() == 'def walk(root)'", 10, "the `:` deleted")
        time.sleep(1.5)
        assert drawn(nv) == {}
        assert asked(nv) == ["textDocument/inlineCompletion"], asked(nv)
    finally:
        nv.lua("require('specfill').set_settings({ nextEdit = 'demo' })")


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install tmux; .ci/run installs it)")
def test_on_screen_the_deleted_text_is_struck_through_and_the_new_text_green():
    tmp = Path(tempfile.mkdtemp(prefix="sfnt"))
    (tmp / "walk.py").write_text(WALK)
    settings = {**server_settings(), "multiline": "never", "extraTokens": 0, "nextEdit": "demo"}
    nv = TmuxNvim(tmp, {"cmd": [sys.executable, "-m", "lsp"], "settings": settings, "debounce_ms": 30}, "walk.py")
    try:
        nv.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'specfill' }) > 0", 60, "LSP attach")
        nv.lua("vim.api.nvim_win_set_cursor(0, { 4, 13 })")
        nv.send("a:")
        nv.wait("next(require('specfill').rendered_next_edit(0)) ~= nil", WAIT_MODEL_S, "a next edit drawn")
        shown = drawn(nv)
        lines = nv.buffer().split("\n")
        new = shown["inline"]["text"] if "inline" in shown else shown["lines"]["texts"][0]
        struck = None
        if "deleted" in shown:   # the first non-blank text of the deleted range
            d = shown["deleted"]
            for row in range(d["row"], d["end_row"] + 1):
                text = lines[row][d["col"] if row == d["row"] else 0:d["end_col"] if row == d["end_row"] else None]
                if text.strip():
                    struck = text.strip()
                    break
        deadline = time.monotonic() + 10
        while True:   # until the next edit has reached the pane
            screen = nv.screen()
            rows = SGR.sub("", screen).split("\n")
            if new.strip() in screen and (struck is None or any(struck in r for r in rows)):
                break
            assert time.monotonic() < deadline, screen
            time.sleep(0.2)
        raw = screen.split("\n")
        if struck is not None:
            style = next(a for a in (style_at(r, struck) for r in raw) if a is not None)
            assert style["struck"], (struck, style, screen)
        style = next(a for a in (style_at(r, new.strip()) for r in raw) if a is not None)
        assert style["fg"] == "38;5;71" and not style["struck"], (new, style, screen)
        code = style_at(raw[0], "import os")
        assert code is not None and not code["struck"] and code["fg"] != "38;5;71", screen
    finally:
        nv.close()
        shutil.rmtree(tmp, ignore_errors=True)
