-- Neovim 0.12's built-in renderer (renderer = 'builtin' only; 'auto' keeps specfill's own):
-- vim.lsp.inline_completion asks, draws and accepts; this plugin only switches it on per
-- buffer and maps the accept key. What it does not do (M.MISSING, also in :checkhealth and
-- the README): accept a word or a line (those keys are not mapped), cycle with this plugin's
-- keys, this plugin's menu hiding, max_line_suffix, shown/dismissed reports (a whole accept
-- runs the item's command, so it is counted), next-edit suggestions. Typing through is
-- Neovim's own: it asks again as you type (the server answers from its cache when you typed
-- the suggestion's text).
-- Not run in this project's tests: no Neovim 0.12 is installable on their machines.
local server = require('specfill.server')
local state = require('specfill.state')

local M = {}

--- What the plugin's own renderer does that this one does not.
M.MISSING = 'accept-word, accept-line, <M-]>/<M-[> cycling, hiding while pumvisible() or '
  .. 'vim.b.specfill_hidden, max_line_suffix, shown/dismissed reports, next-edit suggestions'

--- Whether this Neovim has vim.lsp.inline_completion.
function M.available()
  return vim.lsp.inline_completion ~= nil and vim.lsp.inline_completion.enable ~= nil
end

--- Ask now (the built-in asks by itself while typing).
function M.request(_)
  local buf = server.request_target()
  if buf then
    vim.lsp.inline_completion.get({ bufnr = buf })
  end
end

function M.schedule() end

--- The built-in's suggestions are its own: this plugin's keys and visible() do not see them.
function M.visible()
  return false
end

function M.accept()
  return vim.lsp.inline_completion.get()
end

function M.accept_word() end

function M.accept_line() end

function M.cycle(_) end

function M.clear() end

function M.attach(buf)
  vim.lsp.inline_completion.enable(state.enabled, { bufnr = buf })
end

function M.set_enabled(enabled)
  vim.lsp.inline_completion.enable(enabled)
end

function M.models_loaded() end

function M.create_autocmds(_) end

--- Tab accepts the built-in's suggestion, or does what it did before (keys.lua).
function M.map_keys(lhs)
  require('specfill.keys').map(lhs.accept, 'accept', function()
    return vim.lsp.inline_completion.get()
  end, true)
end

return M
