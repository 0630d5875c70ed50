-- specfill's own renderer (renderer = 'specfill', and 'auto' before Neovim 0.12): asks the
-- server while you type (debounced), shows the answer as extmark ghost text, and has
-- typing-through, accept-word and accept-line. With the server's `nextEdit` setting on, it asks
-- for the next edit where the inline answer is empty, and after a change in normal mode
-- (next_edit.lua).
local api = vim.api
local editing = require('specfill.editing')
local ghost = require('specfill.ghost')
local keys = require('specfill.keys')
local next_edit = require('specfill.next_edit')
local server = require('specfill.server')
local state = require('specfill.state')
local status = require('specfill.status')
local suggestion = require('specfill.suggestion')

local M = {}

local INLINE = 'textDocument/inlineCompletion'
local TRIGGER_INVOKED, TRIGGER_AUTOMATIC = 1, 2
local REQUEST_CANCELLED, CONTENT_MODIFIED = -32800, -32801

local timer = nil -- debounce timer
local pending = nil -- { client, id, req, method } of the request in flight

local function stop_timer()
  if timer then
    timer:stop()
  end
end

local function cancel_pending()
  if pending then
    pcall(pending.client.cancel_request, pending.client, pending.id)
    if pending.method == next_edit.METHOD then
      next_edit.unask(pending.req.buf, pending.req.tick) -- never answered: ask again next time
    end
    pending = nil
  end
end

--- Leaving insert mode: the ghost text and what was asked for it go; a next edit shown stays
--- for next_edit.mode_changed() to keep in normal mode.
local function leave_insert()
  stop_timer()
  cancel_pending()
  ghost.clear()
  suggestion.settle()
end

function M.clear()
  leave_insert()
  next_edit.clear()
end

--- Send `method` for `req` (the request's buffer and client), as the one request in flight:
--- the one before it is cancelled, and the next one cancels it. on_answer(result) runs for an
--- answer that is not an error.
local function send(req, method, params, on_answer)
  cancel_pending() -- Neovim never cancels superseded requests by itself
  local ok, id = req.client:request(method, params, function(err, result)
    if pending and pending.id == req.id then
      pending = nil
    end
    if err then
      if err.code ~= REQUEST_CANCELLED and err.code ~= CONTENT_MODIFIED then
        status.failed()
      end
      return
    end
    on_answer(result)
  end, req.buf)
  if ok then
    req.id = id
    pending = { client = req.client, id = id, req = req, method = method }
  end
end

--- Ask the server for a suggestion at the cursor now.
--- trigger_kind: 1 = invoked by the user, 2 = automatic (default).
function M.request(trigger_kind)
  stop_timer()
  local buf, client = server.request_target()
  if not buf then
    return
  end
  local row, col = editing.cursor()
  local position = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local params = vim.tbl_extend('force', position, { context = { triggerKind = trigger_kind or TRIGGER_AUTOMATIC } })
  local req = {
    client = client,
    buf = buf,
    row = row,
    col = col,
    tick = api.nvim_buf_get_changedtick(buf),
    line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or '',
    started = vim.uv.hrtime(),
  }
  send(req, INLINE, params, function(result)
    status.answered(req.started)
    local items = result and (result.items or result) or {}
    local stale = api.nvim_get_current_buf() ~= buf or not editing.in_insert_mode() or not state.enabled
    if stale or (ghost.current and ghost.current.buf == buf) then
      return
    end
    if items[1] then
      next_edit.clear() -- an inline completion at the cursor takes precedence
      suggestion.present(req, items[1])
    elseif next_edit.wanted() and api.nvim_buf_get_changedtick(buf) == req.tick
        and next_edit.should_ask(buf, req.tick, trigger_kind == TRIGGER_INVOKED) then
      -- Nothing to insert here, after a change (or asked): where does the next edit go?
      send(req, next_edit.METHOD, position, function(edit)
        next_edit.present(req, edit)
      end)
    end
  end)
end

--- Ask the server for the next edit at the cursor in normal mode, once per change (`invoked`:
--- the user asked, so ask again, in place of any shown): the answer is shown while the text,
--- the cursor and the mode stay as they are.
local function request_next_edit(invoked)
  stop_timer()
  local buf, client = server.current_target()
  if not (buf and editing.in_normal_mode() and next_edit.wanted()) or (next_edit.current and not invoked) then
    return
  end
  local tick = api.nvim_buf_get_changedtick(buf)
  if not next_edit.should_ask(buf, tick, invoked) then
    return
  end
  next_edit.clear()
  local row, col = editing.cursor()
  local req = { client = client, buf = buf, row = row, col = col, tick = tick, mode = 'n' }
  send(req, next_edit.METHOD, vim.lsp.util.make_position_params(0, client.offset_encoding), function(edit)
    next_edit.present(req, edit)
  end)
end

--- More than `max_line_suffix` characters of code follow the cursor on its line (trailing
--- blanks do not count): no automatic request there, as in llama.vim.
function M.too_much_after_cursor()
  local limit = state.opts.max_line_suffix
  if not limit then
    return false
  end
  local _, col = editing.cursor()
  local after = api.nvim_get_current_line():sub(col + 1):gsub('%s+$', '')
  return vim.fn.strchars(after) > limit
end

--- Request after `debounce_ms` of quiet (restarted by every keystroke).
function M.schedule()
  local opts = state.opts
  if not (opts and state.enabled and opts.auto_trigger) then
    return
  end
  timer = timer or vim.uv.new_timer()
  timer:stop()
  timer:start(
    opts.debounce_ms,
    0,
    vim.schedule_wrap(function()
      if ghost.pending() then
        return
      elseif M.too_much_after_cursor() then
        status.suffix_skips = status.suffix_skips + 1
      else
        M.request(TRIGGER_AUTOMATIC)
      end
    end)
  )
end

--- Ask for the next edit after `debounce_ms` of quiet (a change in normal mode).
function M.schedule_next_edit()
  local opts = state.opts
  if not (opts and state.enabled and opts.auto_trigger and next_edit.wanted()) then
    return
  end
  timer = timer or vim.uv.new_timer()
  timer:stop()
  timer:start(opts.debounce_ms, 0, vim.schedule_wrap(function()
    request_next_edit(false)
  end))
end

M.visible = suggestion.visible

--- Whether Tab acts: a suggestion or a next edit is on screen.
local function tab_acts()
  return M.visible() or next_edit.visible()
end

local function accept(pick)
  if M.visible() then
    cancel_pending()
    suggestion.accept(pick())
  end
end

--- Tab: accept the suggestion, or jump to / apply the next edit.
function M.accept()
  if M.visible() then
    accept(suggestion.all)
  elseif next_edit.visible() then
    stop_timer()
    cancel_pending()
    next_edit.tab()
  end
end

function M.accept_word()
  accept(suggestion.next_word)
end

function M.accept_line()
  accept(suggestion.next_line)
end

--- Next (step 1) or previous (step -1) alternative suggestion (cycle.lua).
function M.cycle(step)
  local _, client = server.request_target()
  if client and M.visible() then
    stop_timer()
    cancel_pending()
    require('specfill.cycle').step(step, client)
  end
end

--- A specfill client attached to `buf`: nothing to set up, requests follow typing.
function M.attach(_) end

--- :SpecfillToggle: when off, requests stop at server.request_target().
function M.set_enabled(_) end

--- The models finished loading: requests made meanwhile got nothing, so ask again.
function M.models_loaded()
  next_edit.forget_asked()
  if editing.in_insert_mode() and not ghost.pending() then
    M.schedule()
  end
end

--- Typing asks (debounced), typing the suggestion's own characters keeps it, anything else
--- hides it. While a popup menu is open the suggestion is only hidden: it is checked against
--- the text again once the menu closes (its items change the text meanwhile).
function M.create_autocmds(group)
  api.nvim_create_autocmd({ 'TextChangedI', 'TextChangedP' }, {
    group = group,
    callback = function()
      next_edit.sync() -- the text it was made for changed: gone
      if vim.fn.pumvisible() == 1 then
        suggestion.refresh()
      elseif not suggestion.sync() then
        M.schedule()
      end
    end,
  })
  api.nvim_create_autocmd('CursorMovedI', {
    group = group,
    callback = function()
      next_edit.sync() -- kept only while the cursor stays where it was left
      if vim.fn.pumvisible() == 1 then
        suggestion.refresh()
      else
        suggestion.sync() -- a typed char that matches keeps it; any other move hides it
      end
    end,
  })
  api.nvim_create_autocmd('CompleteChanged', { group = group, callback = suggestion.refresh })
  api.nvim_create_autocmd('CompleteDone', {
    group = group,
    callback = vim.schedule_wrap(function()
      if editing.in_insert_mode() and vim.fn.pumvisible() == 0 and not suggestion.sync() then
        M.schedule()
      end
    end),
  })
  -- vim.b.specfill_hidden has no event: look again whenever Neovim waits for a key.
  api.nvim_create_autocmd('SafeState', {
    group = group,
    callback = function()
      if ghost.current then
        suggestion.refresh()
      end
    end,
  })
  api.nvim_create_autocmd('InsertEnter', { group = group, callback = M.schedule })
  api.nvim_create_autocmd('InsertLeave', { group = group, callback = leave_insert })
  api.nvim_create_autocmd('BufLeave', { group = group, callback = M.clear })
  -- Normal mode: a change (also the one an insert made, once <Esc> left it) asks for the next
  -- edit, unless the one shown is still for this text; moving the cursor or another mode drops it.
  api.nvim_create_autocmd('TextChanged', {
    group = group,
    callback = function()
      if not next_edit.sync() then
        M.schedule_next_edit()
      end
    end,
  })
  -- (A callback that returns true deletes its autocommand: these return nothing.)
  api.nvim_create_autocmd('CursorMoved', {
    group = group,
    callback = function()
      next_edit.sync()
    end,
  })
  api.nvim_create_autocmd('ModeChanged', {
    group = group,
    callback = function()
      next_edit.mode_changed()
    end,
  })
end

--- Each key acts only while a suggestion is on screen (accept and dismiss also while a next
--- edit is, and the normal-mode ones only while one is); otherwise it does what it did before
--- (keys.lua).
function M.map_keys(lhs)
  keys.map(lhs.accept, 'accept', tab_acts)
  keys.map(lhs.accept_word, 'accept_word', M.visible)
  keys.map(lhs.accept_line, 'accept_line', M.visible)
  keys.map(lhs.dismiss, 'dismiss', tab_acts)
  keys.map(lhs.next, 'next', M.visible)
  keys.map(lhs.prev, 'prev', M.visible)
  keys.map(lhs.normal_accept, 'accept', next_edit.visible, false, 'n')
  keys.map(lhs.normal_dismiss, 'dismiss', next_edit.visible, false, 'n')
  if lhs.request then
    vim.keymap.set('i', lhs.request, function()
      M.request(TRIGGER_INVOKED)
    end, { silent = true, desc = 'specfill: request' })
  end
  if lhs.normal_request then
    vim.keymap.set('n', lhs.normal_request, function()
      request_next_edit(true)
    end, { silent = true, desc = 'specfill: ask for the next edit' })
  end
end

return M
