-- The renderer object, chosen once by setup(). Both renderers have the same functions:
-- request, schedule, visible, accept, accept_word, accept_line, clear, attach, set_enabled,
-- models_loaded, create_autocmds and map_keys.
local builtin = require('specfill.renderer.builtin')

local M = {}

--- The renderer for the `renderer` option ('auto', 'builtin' or 'specfill').
function M.choose(name)
  if name == 'builtin' or (name == 'auto' and builtin.available()) then
    if not builtin.available() then
      error('specfill: this Neovim has no vim.lsp.inline_completion; use renderer = "specfill"', 2)
    end
    return builtin
  end
  return require('specfill.renderer.own')
end

return M
