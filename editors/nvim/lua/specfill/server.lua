-- The specfill language server: its registration with vim.lsp and the requests the plugin
-- sends it besides inline completions (settings, commands).
local editing = require('specfill.editing')
local log = require('specfill.log')
local state = require('specfill.state')
local status = require('specfill.status')

local M = {}

-- workspace/executeCommand ids the server answers.
M.commands = { stats = 'specfill.stats', reload = 'specfill.reload' }

local function json_object(tbl)
  -- An empty Lua table would go over the wire as [] instead of {}.
  return next(tbl) == nil and vim.empty_dict() or tbl
end

-- The server's messages go to :SpecfillLog (with their levels), then to Neovim's own handler.
local function logged(method)
  return function(err, params, ctx)
    if params then
      log.add_message(params)
    end
    return vim.lsp.handlers[method](err, params, ctx)
  end
end

local function on_exit(code, signal)
  vim.schedule(function() -- on_exit may run in a fast (libuv) callback
    status.exited(code, signal)
    if code ~= 0 or (signal or 0) ~= 0 then
      log.add('ERROR', ('server exited with code %d%s'):format(code, (signal or 0) ~= 0 and (', signal %d'):format(signal) or ''))
    end
    vim.cmd.redrawstatus({ bang = true, mods = { emsg_silent = true } })
  end)
end

--- Register the server with vim.lsp.config / vim.lsp.enable under `opts.name`.
function M.register(opts)
  vim.lsp.config(opts.name, {
    handlers = {
      ['window/logMessage'] = logged('window/logMessage'),
      ['window/showMessage'] = logged('window/showMessage'),
      ['specfill/status'] = status.on_status, -- the target's status, for the statusline
    },
    on_exit = on_exit,
    cmd = opts.cmd,
    filetypes = opts.filetypes,
    root_markers = opts.root_markers,
    init_options = json_object(opts.settings),
    settings = { specfill = json_object(opts.settings) },
    capabilities = {
      textDocument = { inlineCompletion = { dynamicRegistration = false } },
      window = { workDoneProgress = true },
    },
  })
  vim.lsp.enable(opts.name)
end

--- Whether `client_id` is a specfill client.
function M.is_ours(client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  return client ~= nil and state.opts ~= nil and client.name == state.opts.name
end

--- The specfill client attached to `buf`, or nil.
function M.client_for(buf)
  if not state.opts then
    return nil
  end
  return vim.lsp.get_clients({ bufnr = buf, name = state.opts.name })[1]
end

--- The buffer and client to ask for a suggestion now, or nil when suggestions are off, the
--- editor is not in insert mode or no specfill client is attached to the current buffer.
function M.request_target()
  if not (state.opts and state.enabled and editing.in_insert_mode()) then
    return nil
  end
  local buf = vim.api.nvim_get_current_buf()
  local client = M.client_for(buf)
  if client then
    return buf, client
  end
end

--- Every running specfill client (attached to any buffer).
function M.clients()
  if not state.opts then
    return {}
  end
  return vim.lsp.get_clients({ name = state.opts.name })
end

--- Change server settings on the fly (sent with workspace/didChangeConfiguration).
function M.set_settings(changes)
  local opts = state.opts
  opts.settings = vim.tbl_extend('force', opts.settings, changes)
  for _, client in ipairs(M.clients()) do
    client.settings = { specfill = json_object(opts.settings) }
    client:notify('workspace/didChangeConfiguration', { settings = client.settings })
  end
end

--- Ask the server for its statistics (`specfill.stats`); cb(err, stats_table).
function M.stats(cb)
  local client = M.client_for(vim.api.nvim_get_current_buf()) or M.clients()[1]
  if not client then
    return cb('specfill: the server is not running', nil)
  end
  client:request('workspace/executeCommand', { command = M.commands.stats, arguments = {} }, function(err, result)
    cb(err and err.message or nil, result)
  end)
end

--- Reload the models (`specfill.reload`), when a server is running.
function M.reload()
  local client = M.clients()[1]
  if client then
    client:request('workspace/executeCommand', { command = M.commands.reload, arguments = {} }, function() end)
  end
end

return M
