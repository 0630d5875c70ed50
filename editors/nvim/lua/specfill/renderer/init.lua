-- The renderer object, chosen once by setup(). Both renderers have the same functions:
-- request, schedule, visible, accept, accept_word, accept_line, clear, attach, set_enabled,
-- models_loaded, create_autocmds and map_keys.
--
-- 'auto' is specfill's own renderer, also on Neovim 0.12+: the built-in
-- vim.lsp.inline_completion path has not been run in this project's tests (no Neovim 0.12
-- is installable on the machines they run on), and it has no accept-word / accept-line.
-- 'builtin' asks for it explicitly.
local builtin = require('specfill.renderer.builtin')

local M = {}

--- What the `renderer` option picks: 'builtin' or 'specfill'.
function M.name(option)
  return option == 'builtin' and 'builtin' or 'specfill'
end

--- The renderer for the `renderer` option ('auto', 'builtin' or 'specfill'), and a problem
--- to tell the user when it cannot be the one asked for (then it is specfill's own).
function M.choose(option)
  if M.name(option) == 'builtin' then
    if builtin.available() then
      return builtin
    end
    return require('specfill.renderer.own'),
      "renderer 'builtin': this Neovim has no vim.lsp.inline_completion; specfill's own ghost text is used"
  end
  return require('specfill.renderer.own')
end

return M
