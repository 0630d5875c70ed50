-- Autocommands: the specfill client's lifecycle (attach, model-loading progress, detach) for
-- the statusline, the renderer's own editing events, and where the user works (context.lua).
local api = vim.api
local context = require('specfill.context')
local restart = require('specfill.restart')
local server = require('specfill.server')
local status = require('specfill.status')

local M = {}

--- Returns the augroup, for the plugin's other autocommands.
function M.setup(renderer)
  local group = api.nvim_create_augroup('specfill', { clear = true })
  api.nvim_create_autocmd('LspAttach', {
    group = group,
    callback = function(ev)
      if server.is_ours(ev.data.client_id) then
        status.attached()
        restart.attached()
        renderer.attach(ev.buf)
      end
    end,
  })
  api.nvim_create_autocmd('LspProgress', {
    group = group,
    callback = function(ev)
      if not server.is_ours(ev.data.client_id) then
        return
      end
      local value = ev.data.params and ev.data.params.value or {}
      if status.progress(value) then
        renderer.models_loaded()
      end
      vim.cmd.redrawstatus({ bang = true, mods = { emsg_silent = true } })
    end,
  })
  api.nvim_create_autocmd('LspDetach', {
    group = group,
    callback = function(ev)
      if server.is_ours(ev.data.client_id) then
        renderer.clear()
        status.detached()
      end
    end,
  })
  renderer.create_autocmds(group)
  context.create_autocmds(group)
  return group
end

return M
