-- Neovim 0.12's built-in renderer (renderer = 'builtin', and 'auto' when it exists):
-- vim.lsp.inline_completion asks, draws and accepts; this plugin only switches it on per
-- buffer and maps the accept key. It has no accept-word / accept-line.
local server = require('specfill.server')
local state = require('specfill.state')

local M = {}

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
