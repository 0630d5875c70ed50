"""What Copilot, llama.vim and Tabby users expect of the Neovim plugin, in a real Neovim on the
real server (tiny model pair): the ghost text keeps out of the way of completion menus, its
keys fall back to the user's own mappings, no automatic request mid-line (max_line_suffix),
and what the user does with suggestions reaches `specfill.stats` as user acceptance.

The Neovim here has the user's own insert-mode <Tab> (an expr mapping) and <S-Tab> (a plain
one) mapped before setup(), as a person's init.lua would."""
from __future__ import annotations

import re

import pytest

from tests.e2e.test_nvim import (WAIT_MODEL_S, Nvim, attached_nvim, fresh_buffer, lua_string, server_settings,
                                 server_stats, type_until_ghost)

USER_MAPPINGS = """
vim.keymap.set('i', '<Tab>', function() return 'TAB!' end, { expr = true, desc = 'my tab' })
vim.keymap.set('i', '<S-Tab>', 'STAB!')
"""


@pytest.fixture(scope="module")
def editor():
    with attached_nvim("sfev", server_settings(), "first.py", before_setup=USER_MAPPINGS) as nv:
        yield nv


@pytest.fixture
def nvim(editor, request):
    editor.lua("vim.b.specfill_hidden = nil; require('specfill.state').opts.auto_trigger = true")
    fresh_buffer(editor, re.sub(r"\W", "_", request.node.name) + ".py")
    return editor


def line(nv: Nvim) -> str:
    return nv.lua("return vim.api.nvim_get_current_line()")


def test_ghost_text_hides_while_the_popup_menu_is_open_and_returns_after(nvim):
    nv = nvim
    ghost = type_until_ghost(nv, "def add(alpha, beta):<CR>")
    nv.send("<C-n>")   # the built-in keyword completion: a popup menu of the buffer's words
    nv.wait("vim.fn.pumvisible() == 1", 10, "the popup menu")
    assert nv.ghost() == []
    assert nv.lua("return require('specfill').visible()") is False
    nv.send("<C-e>")   # menu closed, the text as it was
    nv.wait("vim.fn.pumvisible() == 0 and #require('specfill').rendered(0) == 1", 10,
            "the ghost text back after the menu")
    assert nv.ghost() == [ghost]

    # Another plugin's menu (nvim-cmp, blink.cmp) hides it through vim.b.specfill_hidden.
    nv.lua("vim.b.specfill_hidden = true")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the ghost text to hide")
    nv.lua("vim.b.specfill_hidden = false")
    nv.wait("#require('specfill').rendered(0) == 1", 10, "the ghost text to come back")
    assert nv.ghost() == [ghost]
    # And Tab accepts it again.
    row, col = nv.cursor()
    before = nv.buffer().split("\n")[row]
    nv.send("<Tab>")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the ghost text to go")
    assert nv.buffer().split("\n")[row] == before[:col] + ghost["text"].split("\n")[0]


def test_keys_fall_back_to_the_users_mappings_and_their_own_meaning(nvim):
    nv = nvim
    type_until_ghost(nv, "value = compute(alpha, beta)<CR>")
    # A suggestion is kept but hidden (a menu is open): the keys are the user's again.
    nv.lua("vim.b.specfill_hidden = true")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the ghost text to hide")
    nv.send("<Tab>")
    nv.wait("vim.api.nvim_get_current_line():find('TAB!', 1, true) ~= nil", 10, "the user's <Tab>")
    nv.send("<S-Tab>")
    nv.wait("vim.api.nvim_get_current_line():find('TAB!STAB!', 1, true) ~= nil", 10, "the user's <S-Tab>")
    assert line(nv).strip() == "TAB!STAB!"
    # <C-Right> has no user mapping: its own meaning, a word to the right.
    nv.send("<Up><Home>")
    nv.wait("vim.api.nvim_win_get_cursor(0)[2] == 0", 10, "the line start")
    nv.send("<C-Right>")
    nv.wait("vim.api.nvim_win_get_cursor(0)[2] == #'value '", 10, "a word to the right")
    assert nv.buffer().split("\n")[0] == "value = compute(alpha, beta)"
    mapping = nv.lua("return vim.fn.maparg('<Tab>', 'i', false, true).desc")
    assert mapping == "specfill: accept"


def server_requests(nv: Nvim, at_least: int = 0) -> int:
    """The inline requests the server has received, once it has `at_least` and none is in
    flight."""
    for _ in range(600):
        s = server_stats(nv)
        if s["server"]["requests"] >= at_least and not s["inflight"] and not s["workerBusy"]:
            return s["server"]["requests"]
        nv.lua("vim.wait(50)")
    pytest.fail(f"the server never had {at_least} requests and none in flight: {s}")


def test_no_automatic_request_with_code_after_the_cursor(nvim):
    nv = nvim
    assert nv.lua("return require('specfill.state').opts.max_line_suffix") == 8
    nv.send("iresult = compute(alpha, beta)<Esc>")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    requests = server_requests(nv)
    skips = nv.lua("return require('specfill.status').suffix_skips")
    # Insert mode at the line's start, 29 characters after the cursor: no request.
    nv.send("0i")
    nv.wait(f"require('specfill.status').suffix_skips == {skips + 1}", 10, "the skipped request")
    nv.send("x")
    nv.wait(f"require('specfill.status').suffix_skips == {skips + 2}", 10, "the skipped request")
    assert server_requests(nv) == requests and nv.ghost() == []
    # The request key still asks there.
    nv.send("<M-\\>")
    assert server_requests(nv, requests + 1) == requests + 1
    # At the line's end (trailing blanks do not count) typing asks again.
    nv.send("<End>  ")
    assert server_requests(nv, requests + 2) >= requests + 2
    assert nv.lua("return require('specfill.status').suffix_skips") == skips + 2
    # A bad value is one problem at setup (the default stands); false turns the limit off.
    opts, problems = nv.lua("return { require('specfill.config').resolve({ max_line_suffix = -1 }) }")
    assert opts["max_line_suffix"] == 8
    assert problems == ["max_line_suffix must be a whole number >= 0 or false, not -1"], problems
    assert nv.lua("return require('specfill.config').resolve({ max_line_suffix = false })"
                  ".max_line_suffix") is False


def user_acceptance(nv: Nvim, until) -> dict:
    for _ in range(600):
        u = server_stats(nv)["userAcceptance"]
        if until(u):
            return u
        nv.lua("vim.wait(50)")
    pytest.fail(f"userAcceptance never got there: {u}")


def ask_until_ghost(nv: Nvim, name: str) -> dict:
    """A new file, "def add(alpha, beta):" typed, a suggestion asked for with the request key."""
    fresh_buffer(nv, name)
    nv.send("idef add(alpha, beta):<CR>")
    nv.wait("vim.api.nvim_win_get_cursor(0)[1] == 2", 10, "the first line")
    nv.send("<M-\\>")
    nv.wait("#require('specfill').rendered(0) > 0", WAIT_MODEL_S, "ghost text")
    (ghost,) = nv.ghost()
    return ghost


def test_what_the_user_does_with_suggestions_reaches_specfill_stats(nvim):
    nv = nvim
    nv.lua("require('specfill.state').opts.auto_trigger = false")   # one suggestion per ask
    before = server_stats(nv)["userAcceptance"]

    # Accepted whole with Tab (the item's command), ...
    ask_until_ghost(nv, "whole.py")
    nv.send("<Tab>")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the accept")
    # ... dismissed with the dismiss key, ...
    ask_until_ghost(nv, "dismissed.py")
    nv.send("<C-]>")
    nv.wait("#require('specfill').rendered(0) == 0", 10, "the dismiss")
    # ... a word of it taken, then left (the rest typed over): accepted in part, ...
    ghost = ask_until_ghost(nv, "part.py")
    nv.send("<C-Right>")
    nv.wait("#require('specfill').rendered(0) == 0 or require('specfill').rendered(0)[1].text ~= "
            f"{lua_string(ghost['text'])}", 10, "the accepted word")
    whole_word = nv.ghost() == []
    nv.send("<Esc>")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    # ... and one hidden by a menu the whole time it existed: never shown, not counted.
    fresh_buffer(nv, "hidden.py")
    nv.lua("vim.b.specfill_hidden = true")
    nv.send("idef add(alpha, beta):<CR><M-\\>")
    nv.wait("require('specfill.ghost').current ~= nil", WAIT_MODEL_S, "a kept suggestion")
    nv.send("<Esc>")

    fully, partly = (2, 0) if whole_word else (1, 1)
    u = user_acceptance(nv, lambda u: u["displayed"] == before["displayed"] + 3
                        and u["dismissed"] == before["dismissed"] + 1
                        and u["acceptedFully"] == before["acceptedFully"] + fully
                        and u["acceptedPartly"] == before["acceptedPartly"] + partly)
    assert u["pending"] == before["pending"] and u["unknownReports"] == 0
    assert u["userAcceptanceRate"] == round((u["acceptedFully"] + u["acceptedPartly"]) / u["displayed"], 4)

    # :SpecfillStats says the same, apart from the draft model's token acceptance.
    nv.lua("_G.sf_notes = {}; vim.notify = function(msg) table.insert(_G.sf_notes, msg) end")
    nv.send(":SpecfillStats<CR>")
    note = nv.wait("_G.sf_notes[1]", 30, ":SpecfillStats output")
    pct = int(u["userAcceptanceRate"] * 100 + 0.5)
    assert (f"  you accepted     {pct}% of {u['displayed']} suggestions shown ({u['acceptedFully']} whole, "
            f"{u['acceptedPartly']} in part, {u['dismissed']} dismissed)") in note.split("\n"), note
    assert re.search(r"^  draft accepted +\d+% of drafted tokens$", note, re.M), note


def test_cycling_through_alternatives(nvim):
    nv = nvim
    nv.lua("require('specfill').set_settings({ candidates = 3 })")
    try:
        for _ in range(200):
            if server_stats(nv)["settings"]["candidates"] == 3:
                break
            nv.lua("vim.wait(50)")
        else:
            pytest.fail("candidates never reached the server")
        ghost = type_until_ghost(nv, "def add(alpha, beta):<CR>")
        assert re.fullmatch(r"specfill: ready \d+ms", nv.lua("return require('specfill').statusline()"))
        nv.send("<M-]>")   # asks for the alternatives, shows the second
        line = nv.wait("require('specfill').statusline():match(' %d/%d$')", 120, "the second alternative")
        position, total = map(int, line.strip().split("/"))
        assert position == 2 and 2 <= total <= 3, line
        (second,) = nv.ghost()
        assert second["text"] != ghost["text"] and (second["row"], second["col"]) == (ghost["row"], ghost["col"])
        nv.send("<M-[>")   # back to the greedy one, without asking again
        nv.wait("require('specfill').statusline():match(' 1/%d$')", 10, "the first again")
        assert nv.ghost() == [ghost]
        nv.send("<M-[>")   # wraps around to the last
        nv.wait(f"require('specfill').statusline():match(' {total}/{total}$')", 10, "the last one")
        (last,) = nv.ghost()
        nv.send("<Tab>")   # the one on screen is the one accepted
        nv.wait("#require('specfill').rendered(0) == 0", 10, "the accept")
        assert last["text"].split("\n")[0] in nv.buffer()
        assert not re.search(r" \d/\d$", nv.lua("return require('specfill').statusline()"))
    finally:
        nv.lua("require('specfill').set_settings({ candidates = 1 })")
