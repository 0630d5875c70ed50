-- The specfill language server: its registration with vim.lsp and the requests the plugin
-- sends it besides inline completions (settings, commands). Restarts: restart.lua.
local editing = require('specfill.editing')
local log = require('specfill.log')
local notice = require('specfill.notice')
local protocol = require('specfill.protocol')
local restart = require('specfill.restart')
local state = require('specfill.state')
local status = require('specfill.status')

local M = {}

-- workspace/executeCommand ids the server answers (generated from the server's table).
M.commands = protocol.commands

local function json_object(tbl)
  -- An empty Lua table would go over the wire as [] instead of {}.
  return next(tbl) == nil and vim.empty_dict() or tbl
end

local LEVELS = { vim.log.levels.ERROR, vim.log.levels.WARN, vim.log.levels.INFO, vim.log.levels.INFO }

-- The server's log lines go to :SpecfillLog (with their levels), then to Neovim's own handler.
local function log_message(err, params, ctx)
  if params then
    log.add_message(params)
  end
  return vim.lsp.handlers['window/logMessage'](err, params, ctx)
end

-- What the server wants the user to see: one notice that cannot prompt (notice.lua), kept in
-- :SpecfillLog. (Neovim's own handler echoes it with a line break, a prompt in insert mode.)
local function show_message(_, params)
  if params and type(params.message) == 'string' then
    log.add_message(params)
    notice.show(params.message, LEVELS[params.type] or vim.log.levels.INFO, true)
  end
  return vim.NIL
end

local function on_exit(code, signal, client_id)
  -- A fast (libuv) callback: only plain Lua here, the rest is scheduled.
  local client = vim.lsp.get_client_by_id(client_id)
  restart.on_exit(code, signal, client_id, client ~= nil and client.initialized == true)
  vim.schedule(function()
    if code ~= 0 or (signal or 0) ~= 0 then
      log.add('ERROR', ('server exited with code %d%s'):format(code, (signal or 0) ~= 0 and (', signal %d'):format(signal) or ''))
    end
    vim.cmd.redrawstatus({ bang = true, mods = { emsg_silent = true } })
  end)
end

local function config(opts)
  return {
    handlers = {
      ['window/logMessage'] = log_message,
      ['window/showMessage'] = show_message,
      [protocol.methods.status] = status.on_status, -- the target's status, for the statusline
      [protocol.methods.documentStatus] = status.on_document_status, -- a document without answers
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
  }
end

--- Register the server with vim.lsp.config / vim.lsp.enable under `opts.name`.
function M.register(opts)
  vim.lsp.config(opts.name, config(opts))
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

--- The current buffer and its specfill client, or nil when suggestions are off or no specfill
--- client is attached to it.
function M.current_target()
  if not (state.opts and state.enabled) then
    return nil
  end
  local buf = vim.api.nvim_get_current_buf()
  local client = M.client_for(buf)
  if client then
    return buf, client
  end
end

--- The buffer and client to ask for a suggestion now, or nil when suggestions are off, the
--- editor is not in insert mode or no specfill client is attached to the current buffer.
function M.request_target()
  if not editing.in_insert_mode() then
    return nil
  end
  return M.current_target()
end

--- Every running specfill client (attached to any buffer).
function M.clients()
  if not state.opts then
    return {}
  end
  return vim.lsp.get_clients({ name = state.opts.name })
end

--- Change server settings on the fly (sent with workspace/didChangeConfiguration). A server
--- started later (a restart) gets them too.
function M.set_settings(changes)
  local opts = state.opts
  opts.settings = vim.tbl_extend('force', opts.settings, changes)
  vim.lsp.config(opts.name, { init_options = json_object(opts.settings), settings = { specfill = json_object(opts.settings) } })
  for _, client in ipairs(M.clients()) do
    client.settings = { specfill = json_object(opts.settings) }
    client:notify('workspace/didChangeConfiguration', { settings = client.settings })
  end
end

local function execute(client, command, cb)
  client:request('workspace/executeCommand', { command = command, arguments = {} }, function(err, result)
    cb(err and err.message or nil, result)
  end)
end

--- Ask the server for its statistics (`specfill.stats`); cb(err, stats_table).
function M.stats(cb)
  local client = M.client_for(vim.api.nvim_get_current_buf()) or M.clients()[1]
  if not client then
    return cb(M.not_running(), nil)
  end
  execute(client, M.commands.stats, cb)
end

--- The figures of the latest model run, also one that showed nothing (`specfill.lastCompletion`);
--- cb(err, table).
function M.last_completion(cb)
  local client = M.client_for(vim.api.nvim_get_current_buf()) or M.clients()[1]
  if not client then
    return cb(M.not_running(), nil)
  end
  execute(client, M.commands.lastCompletion, cb)
end

--- Why no server answers, in one line.
function M.not_running()
  if status.phase == 'restarting' then
    return 'specfill: the server is starting again (it exited: ' .. status.how_exited() .. ')'
  elseif status.phase == 'gave_up' then
    return 'specfill: the server is not running (it kept exiting); :SpecfillRestart starts it'
  end
  return 'specfill: the server is not running'
end

--- Reload the models (`specfill.reload`); with no server running, start one (:SpecfillRestart).
function M.reload()
  local client = M.clients()[1]
  if client then
    client:request('workspace/executeCommand', { command = M.commands.reload, arguments = {} }, function() end)
  else
    M.restart()
  end
end

--- Stop every specfill server and start one for every buffer again, the settings kept.
function M.restart()
  if state.opts then
    restart.now(M.clients())
  end
end

return M
