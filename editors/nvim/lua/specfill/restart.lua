-- Starting the server again: by itself after it exits unexpectedly (killed, crashed), with
-- back-off (DELAYS_MS, then it stops trying and says so), and by hand (:SpecfillRestart). The
-- new server gets every buffer the plugin attaches to (vim.lsp.enable runs the FileType check
-- of each buffer again) and the settings in force (server.set_settings keeps vim.lsp.config up
-- to date). The user sees one notice per exit, never a prompt.
local log = require('specfill.log')
local notice = require('specfill.notice')
local state = require('specfill.state')
local status = require('specfill.status')

local M = {}

M.DELAYS_MS = { 1000, 2000, 4000 } -- before the 1st, 2nd, 3rd start in a row; then no more
M.STABLE_MS = 60000 -- a server that ran this long without exiting starts the count again

M.exits = 0 -- unexpected exits in a row
M.started_at = nil -- vim.uv.now() when the newest server attached
local timer = nil -- the pending start
local stopping = {} -- client ids stopped on purpose (:SpecfillRestart)

local function enable()
  local name = state.opts and state.opts.name
  if name then
    vim.lsp.enable(name) -- starts a client for every buffer it applies to (FileType of each)
  end
end

local function cancel_pending()
  if timer then
    timer:stop()
    timer:close()
    timer = nil
  end
end

--- A specfill client attached: count its uptime from now.
function M.attached()
  M.started_at = vim.uv.now()
end

--- Neovim's own "Client specfill quit with exit code ..." warning is not shown: it is a prompt
--- in insert mode, and this plugin's notice says the same and what happens next. It goes to
--- :SpecfillLog. Call from a callback scheduled by on_exit: Neovim's warning is queued by then,
--- and is the only message held back.
local function hold_back_quit_warning(name)
  local own = vim.notify
  local prefix = ('Client %s quit with exit code'):format(name)
  local function filter(msg, level, opts)
    if type(msg) == 'string' and vim.startswith(msg, prefix) then
      vim.notify = own
      log.add('WARN', msg)
      return
    end
    return own(msg, level, opts)
  end
  vim.notify = filter
  vim.schedule(function() -- after Neovim's warning
    if vim.notify == filter then
      vim.notify = own
    end
  end)
end

local function start_again(code, signal)
  if M.started_at and vim.uv.now() - M.started_at >= M.STABLE_MS then
    M.exits = 0
  end
  M.exits = M.exits + 1
  local how = (signal or 0) ~= 0 and ('signal %d'):format(signal) or ('code %d'):format(code)
  local delay = M.DELAYS_MS[M.exits]
  if not delay then
    status.gave_up(code, signal)
    notice.show(('specfill: the server exited (%s), %d times in a row: not starting it again '
      .. '(:SpecfillLog shows why, :SpecfillRestart starts it)'):format(how, M.exits), vim.log.levels.ERROR)
    return
  end
  status.restarting(code, signal, M.exits, #M.DELAYS_MS, delay)
  notice.show(('specfill: the server exited (%s); starting it again in %d s (%d of %d)'):format(
    how, delay / 1000, M.exits, #M.DELAYS_MS), vim.log.levels.WARN)
  timer = vim.uv.new_timer()
  timer:start(delay, 0, vim.schedule_wrap(function()
    cancel_pending()
    log.add('INFO', 'starting the server again')
    enable()
  end))
end

--- The server of `client_id` ended (vim.lsp's on_exit, a fast callback: the work is scheduled).
--- `ran`: it had initialized. A server that cannot start is not started again and again: the
--- statusline and :SpecfillLog say why it exited.
function M.on_exit(code, signal, client_id, ran)
  local unexpected = not ((code == 0 and (signal or 0) == 0) or signal == 15 or stopping[client_id])
  stopping[client_id] = nil
  vim.schedule(function()
    local name = state.opts and state.opts.name
    if timer then
      return -- another client of the same server ended with it: one start is on its way
    end
    if not (unexpected and name and vim.v.exiting == vim.NIL) then
      status.exited(code, signal)
      return
    end
    hold_back_quit_warning(name)
    if not ran then
      status.exited(code, signal)
      notice.show(('specfill: the server exited (%s) before it started; :SpecfillLog shows why'):format(
        status.how_exited()), vim.log.levels.ERROR)
      return
    end
    start_again(code, signal)
  end)
end

--- Whether a start is pending or the plugin gave up (the server is not running on purpose).
function M.waiting()
  return timer ~= nil or status.phase == 'gave_up'
end

--- :SpecfillRestart: stop every specfill server, then start one for every buffer again.
function M.now(clients)
  cancel_pending()
  M.exits, M.started_at = 0, nil
  local old = {}
  for _, client in ipairs(clients) do
    stopping[client.id] = true
    old[#old + 1] = client
    client:stop()
  end
  notice.show('specfill: restarting the server', vim.log.levels.INFO)
  local waited = 0
  local function gone()
    for _, client in ipairs(old) do
      if vim.lsp.get_client_by_id(client.id) then
        return false
      end
    end
    return true
  end
  local poll = vim.uv.new_timer()
  poll:start(0, 50, vim.schedule_wrap(function()
    waited = waited + 50
    if not gone() and waited < 5000 then
      if waited == 3000 then
        for _, client in ipairs(old) do
          client:stop(true) -- did not stop in time: end the process
        end
      end
      return
    end
    poll:stop()
    poll:close()
    status.phase, status.exit, status.restart = 'off', nil, nil
    enable()
  end))
end

return M
