-- specfill for Neovim 0.11+: registers the specfill language server and shows its
-- inline completions as ghost text while you type. Options: lua/specfill/config.lua.
local api = vim.api
local config = require('specfill.config')
local ghost = require('specfill.ghost')

local M = {}

local INLINE = 'textDocument/inlineCompletion'
local TRIGGER_INVOKED, TRIGGER_AUTOMATIC = 1, 2
local REQUEST_CANCELLED, CONTENT_MODIFIED = -32800, -32801

local opts = nil -- resolved options, set by setup()
local enabled = true -- :SpecfillToggle
local use_builtin = false -- true when vim.lsp.inline_completion renders
local timer = nil -- debounce timer
local pending = nil -- { client, id } of the request in flight

-- What the statusline shows.
local status = {
  phase = 'off', -- off | starting | loading | ready | error
  percentage = nil, -- model loading progress, 0..100
  message = nil, -- last progress message or error
  latency_ms = nil, -- round trip of the last answered request
  shown = 0, -- suggestions shown
  accepted = 0, -- suggestions (fully or partly) accepted
}

local function client_for(buf)
  if not opts then
    return nil
  end
  return vim.lsp.get_clients({ bufnr = buf, name = opts.name })[1]
end

local function in_insert_mode()
  local mode = api.nvim_get_mode().mode:sub(1, 1)
  return mode == 'i' or mode == 'R'
end

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function cancel_pending()
  if pending then
    pcall(pending.client.cancel_request, pending.client, pending.id)
    pending = nil
  end
end

local function stop_timer()
  if timer then
    timer:stop()
  end
end

function M.clear()
  stop_timer()
  cancel_pending()
  ghost.clear()
end

--- Re-check the ghost text after the buffer or cursor changed: shrink it when the user
--- typed exactly its next characters, hide it otherwise. Returns true if still visible.
local function sync()
  local s = ghost.current
  if not s then
    return false
  end
  local buf = api.nvim_get_current_buf()
  if buf ~= s.buf or not in_insert_mode() then
    ghost.clear()
    return false
  end
  local row, col = cursor()
  local tick = api.nvim_buf_get_changedtick(buf)
  if row == s.row and col == s.col and tick == s.tick then
    return true
  end
  if tick ~= s.tick and row == s.row and col > s.col then
    local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
    local typed = line:sub(s.col + 1, col)
    if s.text:sub(1, #typed) == typed then
      local rest = s.text:sub(#typed + 1)
      if rest:match('^%s*$') then
        ghost.clear()
        return false
      end
      ghost.show(buf, row, col, rest, opts.hl_group, s.replace_len)
      return true
    end
  end
  ghost.clear()
  return false
end

local function insert_text(item)
  if type(item.insertText) == 'table' then
    -- A snippet: show its plain text (placeholders become their defaults).
    local ok, parsed = pcall(function()
      return tostring(require('vim.lsp._snippet_grammar').parse(item.insertText.value))
    end)
    return ok and parsed or item.insertText.value
  end
  return item.insertText or ''
end

--- Turn the server's first item into ghost text anchored where the request was made.
local function present(req, item)
  local text = insert_text(item)
  local replace_len = 0
  if item.range then
    local enc = req.client.offset_encoding
    local ok_s, start = pcall(vim.str_byteindex, req.line, enc, item.range.start.character, false)
    local ok_e, finish = pcall(vim.str_byteindex, req.line, enc, item.range['end'].character, false)
    if not (ok_s and ok_e) or item.range.start.line ~= req.row or item.range['end'].line ~= req.row then
      return
    end
    if start < req.col then
      -- The item repeats what is already typed before the cursor: drop that part.
      local typed = req.line:sub(start + 1, req.col)
      if text:sub(1, #typed) ~= typed then
        return
      end
      text = text:sub(#typed + 1)
    end
    replace_len = math.max(0, finish - req.col)
  end
  if text:match('^%s*$') then
    return
  end
  -- Show it at the request's position, then let sync() account for keys typed since.
  ghost.show(req.buf, req.row, req.col, text, opts.hl_group, replace_len)
  ghost.current.tick = req.tick
  if sync() then
    status.shown = status.shown + 1
  end
end

--- Ask the server for a suggestion at the cursor now.
--- trigger_kind: 1 = invoked by the user, 2 = automatic (default).
function M.request(trigger_kind)
  stop_timer()
  if not (opts and enabled and in_insert_mode()) then
    return
  end
  local buf = api.nvim_get_current_buf()
  local client = client_for(buf)
  if not client then
    return
  end
  if use_builtin then
    vim.lsp.inline_completion.get({ bufnr = buf })
    return
  end
  cancel_pending() -- Neovim never cancels superseded requests by itself
  local row, col = cursor()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = trigger_kind or TRIGGER_AUTOMATIC }
  local req = {
    client = client,
    buf = buf,
    row = row,
    col = col,
    tick = api.nvim_buf_get_changedtick(buf),
    line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or '',
    started = vim.uv.hrtime(),
  }
  local ok, id = client:request(INLINE, params, function(err, result)
    if pending and pending.id == req.id then
      pending = nil
    end
    if err then
      if err.code ~= REQUEST_CANCELLED and err.code ~= CONTENT_MODIFIED then
        status.phase, status.message = 'error', err.message
      end
      return
    end
    status.latency_ms = math.floor((vim.uv.hrtime() - req.started) / 1e6 + 0.5)
    if status.phase ~= 'loading' then
      status.phase = 'ready'
    end
    local items = result and (result.items or result) or {}
    local stale = api.nvim_get_current_buf() ~= buf or not in_insert_mode() or not enabled
    if items[1] and not stale and not (ghost.current and ghost.current.buf == buf) then
      present(req, items[1])
    end
  end, buf)
  if ok then
    req.id = id
    pending = { client = client, id = id }
  end
end

--- Request after `debounce_ms` of quiet (restarted by every keystroke).
function M.schedule()
  if not (opts and enabled and opts.auto_trigger) or use_builtin then
    return
  end
  timer = timer or vim.uv.new_timer()
  timer:stop()
  timer:start(
    opts.debounce_ms,
    0,
    vim.schedule_wrap(function()
      if not ghost.visible() then
        M.request(TRIGGER_AUTOMATIC)
      end
    end)
  )
end

function M.visible()
  if use_builtin then
    return false
  end
  return ghost.visible() and sync()
end

--- Insert `piece` (a prefix of the suggestion) and keep the rest on screen.
local function accept_piece(piece)
  local s = ghost.current
  local whole = piece == s.text
  local lines = vim.split(piece, '\n', { plain = true })
  local line = api.nvim_buf_get_lines(s.buf, s.row, s.row + 1, false)[1] or ''
  local end_col = whole and math.min(#line, s.col + s.replace_len) or s.col
  local rest, replace_len = s.text:sub(#piece + 1), s.replace_len
  ghost.clear()
  cancel_pending()
  api.nvim_buf_set_text(s.buf, s.row, s.col, s.row, end_col, lines)
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { row + 1, col })
  status.accepted = status.accepted + 1
  if rest ~= '' and not rest:match('^%s*$') then
    ghost.show(s.buf, row, col, rest, opts.hl_group, replace_len)
  end
end

--- Accept the whole suggestion.
function M.accept()
  if use_builtin then
    return vim.lsp.inline_completion.get()
  end
  if M.visible() then
    accept_piece(ghost.current.text)
  end
end

--- Accept the suggestion's next word (with the whitespace before it).
function M.accept_word()
  if not M.visible() then
    return
  end
  local text = ghost.current.text
  local lead = text:match('^[ \t]*\n?[ \t]*')
  local word = text:sub(#lead + 1):match('^[%w_]+') or text:sub(#lead + 1):match('^[^%w_%s]+') or ''
  accept_piece(text:sub(1, #lead + #word))
end

--- Accept the rest of the suggestion's current line (or its next line if at a line end).
function M.accept_line()
  if not M.visible() then
    return
  end
  local text = ghost.current.text
  local piece = text:match('^\n[^\n]*') or text:match('^[^\n]*')
  accept_piece(piece)
end

function M.dismiss()
  M.clear()
end

--- Status for a statusline: 'specfill: loading 40%' / 'specfill: ready 35ms' / ...
function M.statusline()
  if not opts then
    return ''
  end
  if not enabled then
    return 'specfill: off'
  end
  if not client_for(api.nvim_get_current_buf()) then
    return status.phase == 'error' and 'specfill: error' or ''
  end
  if status.phase == 'loading' then
    return status.percentage and ('specfill: loading %d%%'):format(status.percentage) or 'specfill: loading'
  elseif status.phase == 'ready' then
    return status.latency_ms and ('specfill: ready %dms'):format(status.latency_ms) or 'specfill: ready'
  end
  return 'specfill: ' .. status.phase
end

--- A copy of the client-side status table (phase, percentage, latency_ms, shown, accepted...).
function M.status()
  return vim.deepcopy(status)
end

--- Ask the server for its statistics (`specfill.stats`); cb(err, stats_table).
function M.stats(cb)
  local client = client_for(api.nvim_get_current_buf()) or (opts and vim.lsp.get_clients({ name = opts.name })[1])
  if not client then
    return cb('specfill: the server is not running', nil)
  end
  client:request('workspace/executeCommand', { command = 'specfill.stats', arguments = {} }, function(err, result)
    cb(err and err.message or nil, result)
  end)
end

local function show_stats()
  M.stats(function(err, stats)
    if err then
      vim.notify(tostring(err), vim.log.levels.ERROR)
      return
    end
    local lines = { 'specfill stats' }
    for _, k in ipairs(vim.tbl_keys(stats or {})) do
      lines[#lines + 1] = ('  %s: %s'):format(k, vim.inspect(stats[k]))
    end
    table.sort(lines, function(a, b)
      return a == 'specfill stats' or (b ~= 'specfill stats' and a < b)
    end)
    lines[#lines + 1] = ('  client: shown %d, accepted %d, last latency %s ms'):format(
      status.shown,
      status.accepted,
      tostring(status.latency_ms)
    )
    vim.notify(table.concat(lines, '\n'), vim.log.levels.INFO)
  end)
end

local function json_object(tbl)
  -- An empty Lua table would go over the wire as [] instead of {}.
  return next(tbl) == nil and vim.empty_dict() or tbl
end

--- Change server settings on the fly (sent with workspace/didChangeConfiguration).
function M.set_settings(changes)
  opts.settings = vim.tbl_extend('force', opts.settings, changes)
  for _, client in ipairs(vim.lsp.get_clients({ name = opts.name })) do
    client.settings = { specfill = json_object(opts.settings) }
    client:notify('workspace/didChangeConfiguration', { settings = client.settings })
  end
end

function M.toggle()
  enabled = not enabled
  if not enabled then
    M.clear()
  end
  if use_builtin then
    vim.lsp.inline_completion.enable(enabled)
  end
  vim.notify('specfill: ' .. (enabled and 'on' or 'off'))
end

--- A key that acts only while a suggestion is visible and is itself otherwise.
local function map_key(lhs, action, always)
  if not lhs then
    return
  end
  vim.keymap.set('i', lhs, function()
    if always or M.visible() then
      return ('<Cmd>lua require("specfill").%s()<CR>'):format(action)
    end
    return lhs
  end, { expr = true, replace_keycodes = true, silent = true, desc = 'specfill: ' .. action })
end

local function map_builtin_keys(keys)
  if keys.accept then
    vim.keymap.set('i', keys.accept, function()
      if not vim.lsp.inline_completion.get() then
        return keys.accept
      end
    end, { expr = true, replace_keycodes = true, desc = 'specfill: accept' })
  end
end

local function on_progress(ev)
  local client = vim.lsp.get_client_by_id(ev.data.client_id)
  if not (client and client.name == opts.name) then
    return
  end
  local value = ev.data.params and ev.data.params.value or {}
  if value.kind == 'begin' or value.kind == 'report' then
    status.phase = 'loading'
    status.percentage = value.percentage or status.percentage
    status.message = value.message or value.title or status.message
  elseif value.kind == 'end' then
    status.phase, status.percentage, status.message = 'ready', nil, value.message
    -- Requests made while loading got nothing: ask again now that the models are in.
    if in_insert_mode() and not ghost.visible() then
      M.schedule()
    end
  end
  vim.cmd.redrawstatus({ bang = true, mods = { emsg_silent = true } })
end

function M.setup(user_opts)
  opts = config.resolve(user_opts)
  local has_builtin = vim.lsp.inline_completion ~= nil and vim.lsp.inline_completion.enable ~= nil
  use_builtin = (opts.renderer == 'builtin' or (opts.renderer == 'auto' and has_builtin))
  if use_builtin and not has_builtin then
    error('specfill: this Neovim has no vim.lsp.inline_completion; use renderer = "specfill"')
  end

  api.nvim_set_hl(0, 'SpecfillGhost', { link = 'Comment', default = true })

  vim.lsp.config(opts.name, {
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

  local group = api.nvim_create_augroup('specfill', { clear = true })
  api.nvim_create_autocmd('LspAttach', {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == opts.name then
        if status.phase == 'off' or status.phase == 'error' then
          status.phase = 'starting'
        end
        if use_builtin then
          vim.lsp.inline_completion.enable(enabled, { bufnr = ev.buf })
        end
      end
    end,
  })
  api.nvim_create_autocmd('LspProgress', { group = group, callback = on_progress })
  api.nvim_create_autocmd('LspDetach', {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == opts.name then
        M.clear()
        status.phase = 'off'
      end
    end,
  })

  if not use_builtin then
    api.nvim_create_autocmd({ 'TextChangedI', 'TextChangedP' }, {
      group = group,
      callback = function()
        if not sync() then
          M.schedule()
        end
      end,
    })
    api.nvim_create_autocmd('CursorMovedI', {
      group = group,
      callback = function()
        sync() -- a typed char that matches keeps it; any other move hides it
      end,
    })
    api.nvim_create_autocmd('InsertEnter', {
      group = group,
      callback = function()
        M.schedule()
      end,
    })
    api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
      group = group,
      callback = function()
        M.clear()
      end,
    })
    map_key(opts.keys.accept, 'accept')
    map_key(opts.keys.accept_word, 'accept_word')
    map_key(opts.keys.accept_line, 'accept_line')
    map_key(opts.keys.dismiss, 'dismiss')
    if opts.keys.request then
      vim.keymap.set('i', opts.keys.request, function()
        M.request(TRIGGER_INVOKED)
      end, { silent = true, desc = 'specfill: request' })
    end
  else
    map_builtin_keys(opts.keys)
  end

  api.nvim_create_user_command('SpecfillToggle', M.toggle, { desc = 'specfill: suggestions on/off' })
  api.nvim_create_user_command('SpecfillStats', show_stats, { desc = 'specfill: server statistics' })
  api.nvim_create_user_command('SpecfillReload', function()
    local client = vim.lsp.get_clients({ name = opts.name })[1]
    if client then
      client:request('workspace/executeCommand', { command = 'specfill.reload', arguments = {} }, function() end)
    end
  end, { desc = 'specfill: reload the models' })
end

-- For tests and statuslines: the ghost text currently drawn in `buf`.
M.rendered = ghost.rendered

return M
