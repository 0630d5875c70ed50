-- Next-edit suggestions (the server's `nextEdit` setting): after a change settles and the
-- inline completion at the cursor came back empty, the renderer asks the server where the
-- next edit goes (specfill/nextEdit). The answer is one edit of the document: drawn by
-- next_edit_view.lua, Tab jumps to it, Tab again applies it. Typing, moving the cursor
-- yourself, leaving insert mode or the dismiss key drop it; an inline completion shown at the
-- cursor takes precedence over it.
local api = vim.api
local editing = require('specfill.editing')
local ghost = require('specfill.ghost')
local state = require('specfill.state')
local view = require('specfill.next_edit_view')

local M = {}

M.METHOD = require('specfill.protocol').methods.nextEdit

--- The suggestion on screen, or nil: { buf, tick (b:changedtick it belongs to), edit = { sr,
--- sc, er, ec, text } (0-based rows, byte columns), result (the server's answer as it came),
--- anchor = { row, col } (where the cursor is kept: where it was asked, then where Tab jumped) }.
M.current = nil

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

--- Show the server's answer to the request `req` ({ client, buf, row, col, tick }) when it
--- still belongs to what is on screen: the same text, the cursor where it was, no inline
--- completion shown.
function M.present(req, result)
  M.clear()
  local buf = api.nvim_get_current_buf()
  if result == nil or result == vim.NIL or buf ~= req.buf or not editing.in_insert_mode() then
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
  M.current = { buf = buf, tick = req.tick, edit = edit, result = result, anchor = { row = row, col = col } }
end

--- A suggestion is on screen in the current buffer and no menu covers the keys.
function M.visible()
  local s = M.current
  return s ~= nil and s.buf == api.nvim_get_current_buf() and not ghost.hidden(s.buf)
end

--- After the buffer or the cursor changed: keep the suggestion only while the text is the one
--- it was made for and the cursor is where it was left. Returns true if still kept.
function M.sync()
  local s = M.current
  if not s then
    return false
  end
  local row, col = editing.cursor()
  if api.nvim_get_current_buf() ~= s.buf or api.nvim_buf_get_changedtick(s.buf) ~= s.tick
      or row ~= s.anchor.row or col ~= s.anchor.col or not editing.in_insert_mode() then
    M.clear()
    return false
  end
  return true
end

--- Tab: jump to the edit's start (unless the cursor is there), then apply it, the cursor after
--- the text it wrote.
function M.tab()
  local s = M.current
  if not s then
    return
  end
  local e = s.edit
  if s.anchor.row ~= e.sr or s.anchor.col ~= e.sc then
    s.anchor = { row = e.sr, col = e.sc }
    api.nvim_win_set_cursor(0, { e.sr + 1, e.sc })
    return
  end
  M.clear()
  local lines = vim.split(e.text, '\n', { plain = true })
  api.nvim_buf_set_text(s.buf, e.sr, e.sc, e.er, e.ec, lines)
  local row = e.sr + #lines - 1
  api.nvim_win_set_cursor(0, { row + 1, (#lines == 1 and e.sc or 0) + #lines[#lines] })
end

--- For tests and statuslines: what is drawn in `buf` (next_edit_view.rendered).
M.rendered = view.rendered

return M
