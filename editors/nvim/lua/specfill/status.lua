-- What the statusline shows: the server's phase, its model-loading progress, the target's
-- status (a remote server that fails), the round trip of the last answer, and this client's
-- counts (for :SpecfillStats).
local M = {
  phase = 'off', -- off | starting | loading | ready | error | exited
  target = nil, -- the last `specfill/status` while it says error: { kind =, message =, url = }
  exit = nil, -- how the server last ended badly: { code = N, signal = N }
  percentage = nil, -- model loading progress, 0..100
  latency_ms = nil, -- round trip of the last answered request
  shown = 0, -- suggestions shown
  accepted = 0, -- suggestions (fully or partly) accepted
  suffix_skips = 0, -- automatic requests not made: too much code after the cursor (max_line_suffix)
}

function M.attached()
  if M.phase == 'off' or M.phase == 'error' or M.phase == 'exited' then
    M.phase, M.exit, M.target = 'starting', nil, nil
  end
end

function M.detached()
  if M.phase ~= 'exited' then
    M.phase = 'off'
  end
  M.target = nil
end

--- The server's `specfill/status` notification: { backend, url, state = 'ok'|'error', kind,
--- message }. An error stays on the statusline until a status says ok (the remote answers
--- again, or other models loaded).
function M.target_status(params)
  if params and params.state == 'error' then
    M.target = { kind = params.kind or '', message = params.message or '', url = params.url or '' }
  else
    M.target = nil
  end
end

--- vim.lsp handler for `specfill/status`.
function M.on_status(_, params)
  M.target_status(params)
  pcall(vim.cmd.redrawstatus, { bang = true })
end

--- The server process ended (vim.lsp's on_exit). A clean exit (shutdown, :LspStop) is 'off';
--- anything else stays on the statusline until a server attaches again.
function M.exited(code, signal)
  if code == 0 and (signal or 0) == 0 then
    M.phase = 'off'
  else
    M.phase, M.exit = 'exited', { code = code, signal = signal or 0 }
  end
end

--- A `$/progress` value from the server (model loading). Returns true when loading ended.
function M.progress(value)
  if value.kind == 'begin' or value.kind == 'report' then
    M.phase = 'loading'
    M.percentage = value.percentage or M.percentage
  elseif value.kind == 'end' then
    M.phase, M.percentage = 'ready', nil
    return true
  end
  return false
end

--- An answer to a request sent at `started` (vim.uv.hrtime()).
function M.answered(started)
  M.latency_ms = math.floor((vim.uv.hrtime() - started) / 1e6 + 0.5)
  if M.phase ~= 'loading' then
    M.phase = 'ready'
  end
end

function M.failed()
  M.phase = 'error'
end

--- 'specfill: loading 40%' / 'specfill: ready 35ms' / 'specfill: off' / '' (not attached) /
--- 'specfill: remote error: unreachable' / 'specfill: error: server exited (code 1), see :SpecfillLog'.
function M.line(enabled, attached)
  if M.phase == 'exited' then
    local how = M.exit.signal ~= 0 and ('signal %d'):format(M.exit.signal) or ('code %d'):format(M.exit.code)
    return ('specfill: error: server exited (%s), see :SpecfillLog'):format(how)
  end
  if not enabled then
    return 'specfill: off'
  end
  if not attached then
    return M.phase == 'error' and 'specfill: error' or ''
  end
  if M.phase == 'loading' then
    return M.percentage and ('specfill: loading %d%%'):format(M.percentage) or 'specfill: loading'
  elseif M.target then
    return ('specfill: remote error: %s'):format(M.target.kind ~= '' and M.target.kind:gsub('_', ' ') or 'failing')
  elseif M.phase == 'ready' then
    return M.latency_ms and ('specfill: ready %dms'):format(M.latency_ms) or 'specfill: ready'
  end
  return 'specfill: ' .. M.phase
end

return M
