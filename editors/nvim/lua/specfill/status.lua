-- What the statusline shows: the server's phase (and its restarts), its model-loading progress,
-- the target's status (a remote server that fails), why the current buffer gets no answers, the
-- round trip of the last answer, and this client's counts (for :SpecfillStats).
local M = {
  phase = 'off', -- off | starting | loading | ready | error | exited | restarting | gave_up
  target = nil, -- the last `specfill/status` while it says error: { kind =, message =, url = }
  exit = nil, -- how the server last ended badly: { code = N, signal = N }
  restart = nil, -- while restarting: { attempt = N, of = N, delay_ms = N }
  refused = {}, -- uri -> { kind =, reason = }: documents the server gives no answers (specfill/documentStatus)
  percentage = nil, -- model loading progress, 0..100
  latency_ms = nil, -- round trip of the last answered request
  shown = 0, -- suggestions shown
  accepted = 0, -- suggestions (fully or partly) accepted
  suffix_skips = 0, -- automatic requests not made: too much code after the cursor (max_line_suffix)
}

-- Short words for the statusline, by specfill/documentStatus kind (the reason has the rest).
local REFUSED_WORDS = { too_large = 'file too large' }

function M.attached()
  if M.phase == 'off' or M.phase == 'error' or M.phase == 'exited' or M.phase == 'restarting' or M.phase == 'gave_up' then
    M.phase, M.exit, M.target, M.restart = 'starting', nil, nil, nil
  end
end

function M.detached()
  if M.phase ~= 'exited' and M.phase ~= 'restarting' and M.phase ~= 'gave_up' then
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

--- The server's `specfill/documentStatus`: { textDocument = { uri }, state = 'ok'|'refused',
--- kind, reason }: whether a document gets answers.
function M.document_status(params)
  local uri = params and params.textDocument and params.textDocument.uri
  if type(uri) ~= 'string' then
    return
  end
  if params.state == 'refused' then
    M.refused[uri] = { kind = params.kind or '', reason = params.reason or '' }
  else
    M.refused[uri] = nil
  end
end

--- vim.lsp handler for `specfill/documentStatus`.
function M.on_document_status(_, params)
  M.document_status(params)
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

--- The server exited unexpectedly and starts again after `delay_ms` (attempt `attempt` of `of`).
function M.restarting(code, signal, attempt, of, delay_ms)
  M.phase, M.exit = 'restarting', { code = code, signal = signal or 0 }
  M.restart = { attempt = attempt, of = of, delay_ms = delay_ms }
  M.refused = {} -- the new server tells again
end

--- The server kept exiting: it is not started again until :SpecfillRestart.
function M.gave_up(code, signal)
  M.phase, M.exit, M.restart = 'gave_up', { code = code, signal = signal or 0 }, nil
  M.refused = {}
end

--- 'signal 9' / 'code 1': how the server last ended.
function M.how_exited()
  local e = M.exit or { code = 0, signal = 0 }
  return e.signal ~= 0 and ('signal %d'):format(e.signal) or ('code %d'):format(e.code)
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

--- A request failed (not cancelled). A server that is gone says so itself (on_exit).
function M.failed()
  if M.phase ~= 'restarting' and M.phase ~= 'gave_up' and M.phase ~= 'exited' then
    M.phase = 'error'
  end
end

--- Why `uri` gets no answers, as the server said (nil: it does).
function M.refused_reason(uri)
  return uri and M.refused[uri] or nil
end

--- 'specfill: loading 40%' / 'specfill: ready 35ms' / 'specfill: off' / '' (not attached) /
--- 'specfill: off here: file too large' / 'specfill: restarting (server exited: signal 9)' /
--- 'specfill: remote error: unreachable' / 'specfill: error: server exited (code 1), see :SpecfillLog'.
--- `why_off`: why the current buffer gets no answers, in a few words (nil: it does).
function M.line(enabled, attached, why_off)
  if M.phase == 'restarting' then
    return ('specfill: restarting (server exited: %s)'):format(M.how_exited())
  elseif M.phase == 'gave_up' then
    return ('specfill: error: server exited (%s), not restarted; :SpecfillRestart'):format(M.how_exited())
  elseif M.phase == 'exited' then
    return ('specfill: error: server exited (%s), see :SpecfillLog'):format(M.how_exited())
  end
  if not enabled then
    return 'specfill: off'
  end
  if why_off then
    return 'specfill: off here: ' .. why_off
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

--- A few words for a refused document (specfill/documentStatus kind), for the statusline.
function M.refused_words(refused)
  return REFUSED_WORDS[refused.kind] or 'no answers (:SpecfillStats)'
end

return M
