"""Extra context from where the user works, in a real Neovim on the real server (tiny model pair):
a yank sends specfill/yanked and leaving a buffer sends specfill/visited, and the yanked text and
the lines around the visited one reach the prompt of a request in another buffer."""
from __future__ import annotations

import pytest

from tests.e2e.test_nvim import WAIT_MODEL_S, Nvim, attached_nvim, lua_string, server_settings, server_stats

LIB = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n" for i in range(40))   # 120 lines

# What the plugin's client sends, recorded on its way out (the message still goes to the server).
RECORD_NOTIFICATIONS = """
local client = vim.lsp.get_clients({ name = 'specfill' })[1]
_G.sf_sent = {}
local notify = client.notify
client.notify = function(self, method, params)
  if method:find('^specfill/') then table.insert(_G.sf_sent, { method = method, params = params }) end
  return notify(self, method, params)
end
"""

# The recorded notifications of one method (Lua), or nil while there are none.
SENT = ("(function() local out = {} for _, s in ipairs(_G.sf_sent) do if s.method == '%s' then "
        "table.insert(out, s) end end return #out > 0 and out or nil end)()")


@pytest.fixture(scope="module")
def nv():
    settings = {**server_settings(), "extraTokens": 512, "maxNewTokens": 8,
                "extraContextFrom": "open,edits,yanks,visits"}
    with attached_nvim("sfcx", settings, "main.py", files={"lib.py": LIB}) as editor:
        yield editor


def last_completion(nv: Nvim) -> dict:
    nv.lua("_G.sf_last = nil; vim.lsp.get_clients({ name = 'specfill' })[1]:request('workspace/executeCommand', "
           "{ command = 'specfill.lastCompletion', arguments = {} }, "
           "function(err, r) _G.sf_last = { err = err or false, r = r } end, 0)")
    got = nv.wait("_G.sf_last", 30, "specfill.lastCompletion")
    assert not got["err"], got
    return got["r"] if isinstance(got["r"], dict) else {}


def test_a_yank_and_a_visit_reach_the_prompt_of_another_buffer(nv):
    for _ in range(WAIT_MODEL_S * 10):
        if server_stats(nv)["models"]["loaded"]:
            break
        nv.lua("vim.wait(100)")
    nv.lua(RECORD_NOTIFICATIONS)
    nv.lua(f"vim.cmd.edit({lua_string(str(nv.dir / 'lib.py'))})")
    nv.wait("#vim.lsp.get_clients({ bufnr = 0, name = 'specfill' }) > 0", 60, "LSP attach to lib.py")
    nv.send("<Esc>31Gyj")   # yank "def helper_10(x):" and the line after it (linewise)
    yanked = "def helper_10(x):\n    return x * 10\n"
    (yank,) = nv.wait(f"{SENT % 'specfill/yanked'}", 10, "specfill/yanked")
    assert yank["params"]["text"] == yanked
    assert yank["params"]["textDocument"]["uri"].endswith("/lib.py")

    nv.send("91G")          # move on, then leave lib.py from line 91 ("def helper_30(x):")
    nv.wait("vim.api.nvim_win_get_cursor(0)[1] == 91", 10, "line 91")
    nv.lua(f"vim.cmd.edit({lua_string(str(nv.dir / 'main.py'))})")
    visits = nv.wait(f"{SENT % 'specfill/visited'}", 10, "specfill/visited")
    assert any(v["params"]["position"]["line"] == 90 and v["params"]["textDocument"]["uri"].endswith("/lib.py")
               for v in visits), visits

    nv.send("itotal = <M-\\>")
    for _ in range(WAIT_MODEL_S * 10):
        chunks = last_completion(nv).get("extra_context") or []
        if any(c["source"] == "yanks" for c in chunks):
            break
        nv.lua("vim.wait(100)")
    else:
        pytest.fail(f"no prompt with the yanked text: {chunks}")
    # Newest last: the yank, then the lines around where lib.py was left.
    assert [c["source"] for c in chunks][-2:] == ["yanks", "visits"]
    assert chunks[-2]["text"] == yanked and chunks[-2]["path"].endswith("lib.py")
    assert "def helper_30(x):" in chunks[-1]["text"] and chunks[-1]["path"].endswith("lib.py")
    # A delete is an edit, not a yank: nothing is sent for it.
    nv.send("<Esc>dd")
    nv.wait("vim.api.nvim_get_mode().mode == 'n'", 10, "normal mode")
    nv.lua("vim.wait(200)")
    assert len(nv.lua(f"return {SENT % 'specfill/yanked'}")) == 1
