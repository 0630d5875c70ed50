-- Next-edit suggestions (the server's `nextEdit` setting). The renderer asks the server where
-- the next edit goes (specfill/nextEdit) after a change settles: in insert mode when the inline
-- completion at the cursor came back empty (one shown takes precedence), in normal mode after
-- any change (`dd`, `x`, `p`, `.`, undo, `cw...<Esc>`). The answer is one edit of the document:
-- drawn by next_edit_view.lua, Tab jumps to it, Tab again applies it. Another change, moving the
-- cursor yourself or the dismiss key drop it, and so does leaving the mode it was shown in,
-- but for one case: leaving insert mode for normal mode keeps it, as if asked there.
local api = vim.api
local editing = require('specfill.editing')
local ghost = require('specfill.ghost')
local state = require('specfill.state')
local view = require('specfill.next_edit_view')

local M = {}

M.METHOD = require('specfill.protocol').methods.nextEdit

--- The suggestion on screen, or nil: { buf, tick (b:changedtick it belongs to), mode ('i' or
--- 'n': insert or normal mode, where it is kept), edit = { sr, sc, er, ec, text } (0-based rows,
--- byte columns), result (the server's answer as it came), anchor = { row, col } (where the
--- cursor is kept: where it was asked, then where Tab jumped) }.
M.current = nil

--- Whether the editor is in `mode` ('i': insert or replace mode; 'n': normal mode, an operator
--- pending included).
local function in_mode(mode)
  if mode == 'n' then
    return editing.in_normal_mode()
  end
  return editing.in_insert_mode()
end

--- Whether to ask at all: the server's `nextEdit` setting is on (anything but 'off').
function M.wanted()
  local setting = state.opts and state.opts.settings.nextEdit
  return M.METHOD ~= nil and type(setting) == 'string' and setting ~= 'off'
end

-- buf -> the b:changedtick last asked about.
local asked = {}

--- Whether to ask for `buf` at changedtick `tick` now: once after each change (entering insert
--- mode asks for an inline completion too, with nothing changed), or whenever the user asks.
--- Records it when so.
function M.should_ask(buf, tick, invoked)
  if not invoked and asked[buf] == tick then
    return false
  end
  asked[buf] = tick
  return true
end

--- Ask again without a change (the models finished loading: what was asked meanwhile got
--- nothing).
function M.forget_asked()
  asked = {}
end

--- The request for `buf` at `tick` was cancelled before its answer: the next chance asks again.
function M.unask(buf, tick)
  if asked[buf] == tick then
    asked[buf] = nil
  end
end

function M.clear()
  local s = M.current
  M.current = nil
  if s then
    view.clear(s.buf)
  end
end

--- The byte position of LSP position `pos` in `lines` (the buffer's), and whether it lies past
--- the last line's end of line; nil when it is outside the document.
local function byte_position(lines, pos, enc)
  if type(pos) ~= 'table' or type(pos.line) ~= 'number' or type(pos.character) ~= 'number' then
    return nil
  end
  if pos.line == #lines and pos.character == 0 then
    return #lines - 1, #lines[#lines], true
  end
  local line = lines[pos.line + 1]
  if not line then
    return nil
  end
  local ok, col = pcall(vim.str_byteindex, line, enc, pos.character, false)
  if not ok then
    return nil
  end
  return pos.line, col, false
end

--- The server's `result` as an edit of `buf` ({ sr, sc, er, ec, text }), or nil when it is
--- not one of this document.
function M.edit_of(buf, result, enc)
  if type(result) ~= 'table' or type(result.range) ~= 'table' or type(result.newText) ~= 'string' then
    return nil
  end
  local lines = api.nvim_buf_get_lines(buf, 0, -1, false)
  local sr, sc, start_past = byte_position(lines, result.range.start, enc)
  local er, ec, end_past = byte_position(lines, result.range['end'], enc)
  if not (sr and er) or er < sr or (er == sr and ec < sc) then
    return nil
  end
  local text = result.newText:gsub('\r\n', '\n')
  if end_past then
    -- The buffer has no line after its last end of line: the edit's last one is that one (and
    -- an edit that would drop it keeps it: the buffer's 'eol' writes it).
    if start_past then
      text = '\n' .. text
    end
    text = text:gsub('\n$', '')
  end
  return { sr = sr, sc = sc, er = er, ec = ec, text = text }
end

--- Show the server's answer to the request `req` ({ client, buf, row, col, tick, mode ('i'
--- when nil) }) when it still belongs to what is on screen: the same text and mode, the cursor
--- where it was, no inline completion shown.
function M.present(req, result)
  M.clear()
  local buf = api.nvim_get_current_buf()
  local mode = req.mode or 'i'
  if result == nil or result == vim.NIL or buf ~= req.buf or not in_mode(mode) then
    return
  end
  local row, col = editing.cursor()
  if api.nvim_buf_get_changedtick(buf) ~= req.tick or row ~= req.row or col ~= req.col or ghost.current then
    return
  end
  local edit = M.edit_of(buf, result, req.client.offset_encoding)
  if not edit or (edit.text == '' and edit.sr == edit.er and edit.sc == edit.ec) then
    return
  end
  view.draw(buf, edit)
  M.current = { buf = buf, tick = req.tick, mode = mode, edit = edit, result = result, anchor = { row = row, col = col } }
end

--- A suggestion is on screen in the current buffer, in the mode it was shown in, and no menu
--- covers the keys.
function M.visible()
  local s = M.current
  return s ~= nil and s.buf == api.nvim_get_current_buf() and in_mode(s.mode) and not ghost.hidden(s.buf)
end

--- After the buffer, the cursor or the mode changed: keep the suggestion only while the text is
--- the one it was made for, the cursor is where it was left and the mode the one it was shown
--- in. Returns true if still kept.
function M.sync()
  local s = M.current
  if not s then
    return false
  end
  local row, col = editing.cursor()
  if api.nvim_get_current_buf() ~= s.buf or api.nvim_buf_get_changedtick(s.buf) ~= s.tick
      or row ~= s.anchor.row or col ~= s.anchor.col or not in_mode(s.mode) then
    M.clear()
    return false
  end
  return true
end

--- The mode changed (ModeChanged): leaving insert mode for normal mode keeps the suggestion
--- (the text is the one it was made for), now a normal-mode one kept where <Esc> put the
--- cursor; any other change of mode drops it.
function M.mode_changed()
  local s = M.current
  if s and s.mode == 'i' and api.nvim_get_mode().mode == 'n' and api.nvim_get_current_buf() == s.buf
      and api.nvim_buf_get_changedtick(s.buf) == s.tick then
    local row, col = editing.cursor()
    s.mode, s.anchor = 'n', { row = row, col = col }
    return
  end
  M.sync()
end

--- The byte column of the character that holds byte `col` of `line` in normal mode, where the
--- cursor stays on a character: the line's last one at most.
local function normal_col(line, col)
  if #line == 0 then
    return 0
  end
  col = math.min(col, #line - 1)
  return col + vim.str_utf_start(line, col + 1)
end

--- Where the cursor stands at the edit's start: its first byte, or in normal mode the character
--- there (the line's last one when the edit starts at the line's end).
local function start_of(s)
  local e = s.edit
  if s.mode ~= 'n' then
    return e.sr, e.sc
  end
  return e.sr, normal_col(api.nvim_buf_get_lines(s.buf, e.sr, e.sr + 1, false)[1] or '', e.sc)
end

--- Tab: jump to the edit's start (unless the cursor is there), then apply it; the cursor goes
--- after the text it wrote in insert mode, on the last character it wrote in normal mode (where
--- it deleted only, on the character after the deleted text, as `x` leaves it).
function M.tab()
  local s = M.current
  if not s then
    return
  end
  local e = s.edit
  local row, col = editing.cursor()
  local start_row, start_col = start_of(s)
  if row ~= start_row or col ~= start_col then
    s.anchor = { row = start_row, col = start_col }
    api.nvim_win_set_cursor(0, { start_row + 1, start_col })
    return
  end
  M.clear()
  local lines = vim.split(e.text, '\n', { plain = true })
  api.nvim_buf_set_text(s.buf, e.sr, e.sc, e.er, e.ec, lines)
  row = e.sr + #lines - 1
  col = (#lines == 1 and e.sc or 0) + #lines[#lines]
  if s.mode == 'n' then
    local line = api.nvim_buf_get_lines(s.buf, row, row + 1, false)[1] or ''
    col = normal_col(line, #lines[#lines] > 0 and col - 1 or col)
  end
  api.nvim_win_set_cursor(0, { row + 1, col })
end

--- For tests and statuslines: what is drawn in `buf` (next_edit_view.rendered).
M.rendered = view.rendered

return M
