-- The suggestion specfill's own renderer shows: made from the server's item, kept in step with
-- what the user types, and inserted in whole or in part. Drawing is ghost.lua's job, the
-- user-acceptance reports to the server (telemetry.lua's) are made here.
local api = vim.api
local editing = require('specfill.editing')
local ghost = require('specfill.ghost')
local state = require('specfill.state')
local status = require('specfill.status')
local telemetry = require('specfill.telemetry')

local M = {}

--- The suggestion went away (dismissed, typed over, replaced, accepted): report it once.
function M.settle()
  local offer = telemetry.current
  if offer and not (ghost.current and ghost.current.offer == offer) then
    telemetry.ended(offer)
  end
end

--- The suggestion is drawn now (not hidden by a menu): report it shown, once.
local function note_drawn()
  local s = ghost.current
  if s and s.extmark and s.offer and telemetry.shown(s.offer) then
    status.shown = status.shown + 1
  end
end

--- Draw or hide the kept suggestion as the popup menu and vim.b.specfill_hidden say now.
function M.refresh()
  ghost.refresh()
  note_drawn()
end

--- Re-check the ghost text after the buffer or cursor changed: shrink it when the user
--- typed exactly its next characters, drop it otherwise. Returns true if still kept.
local function sync()
  local s = ghost.current
  if not s then
    return false
  end
  local buf = api.nvim_get_current_buf()
  if buf ~= s.buf or not editing.in_insert_mode() then
    ghost.clear()
    return false
  end
  local row, col = editing.cursor()
  local tick = api.nvim_buf_get_changedtick(buf)
  if row == s.row and col == s.col and tick == s.tick then
    M.refresh()
    return true
  end
  local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
  if row == s.row and col == s.col and line == s.line then
    -- Changed and changed back (a popup menu's item inserted, then <C-e>): still valid.
    s.tick = tick
    M.refresh()
    return true
  end
  if tick ~= s.tick and row == s.row and col > s.col then
    local typed = line:sub(s.col + 1, col)
    if s.text:sub(1, #typed) == typed then
      local rest = s.text:sub(#typed + 1)
      if rest:match('^%s*$') then
        ghost.clear()
        return false
      end
      ghost.show(buf, row, col, rest, state.opts.hl_group, s.replace_len, s.offer)
      note_drawn()
      return true
    end
  end
  ghost.clear()
  return false
end

function M.sync()
  local kept = sync()
  M.settle()
  return kept
end

function M.visible()
  return ghost.visible() and M.sync() and ghost.visible()
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

--- Show the server's `item` as ghost text anchored where request `req` was made
--- ({ client, buf, row, col, tick, line }).
function M.present(req, item)
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
  local now = api.nvim_buf_get_lines(req.buf, req.row, req.row + 1, false)[1]
  if not now or now:sub(1, req.col) ~= req.line:sub(1, req.col) or #now < req.col then
    return -- the text before the request's position changed since (deleted, or another line)
  end
  -- Show it at the request's position, then let sync() account for keys typed since.
  local offer = telemetry.offer(req.client, item)
  ghost.show(req.buf, req.row, req.col, text, state.opts.hl_group, replace_len, offer)
  ghost.current.tick = req.tick
  M.sync()
end

--- Insert `piece` (a prefix of the visible suggestion) and keep the rest on screen.
function M.accept(piece)
  local s = ghost.current
  local whole = piece == s.text
  local lines = vim.split(piece, '\n', { plain = true })
  local line = api.nvim_buf_get_lines(s.buf, s.row, s.row + 1, false)[1] or ''
  local end_col = whole and math.min(#line, s.col + s.replace_len) or s.col
  local rest, replace_len = s.text:sub(#piece + 1), s.replace_len
  ghost.clear()
  api.nvim_buf_set_text(s.buf, s.row, s.col, s.row, end_col, lines)
  local row = s.row + #lines - 1
  local col = (#lines == 1 and s.col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { row + 1, col })
  local left = rest ~= '' and not rest:match('^%s*$')
  if s.offer and telemetry.accepted(s.offer, piece, not left) then
    status.accepted = status.accepted + 1
  end
  if left then
    ghost.show(s.buf, row, col, rest, state.opts.hl_group, replace_len, s.offer)
  end
  M.settle()
end

--- The whole suggestion.
function M.all()
  return ghost.current.text
end

--- The suggestion's next word (with the whitespace before it).
function M.next_word()
  local text = ghost.current.text
  local lead = text:match('^[ \t]*\n?[ \t]*')
  local word = text:sub(#lead + 1):match('^[%w_]+') or text:sub(#lead + 1):match('^[^%w_%s]+') or ''
  return text:sub(1, #lead + #word)
end

--- The rest of the suggestion's current line (or its next line if at a line end).
function M.next_line()
  local text = ghost.current.text
  return text:match('^\n[^\n]*') or text:match('^[^\n]*')
end

return M
