-- specfill's own ghost-text renderer (for Neovim without vim.lsp.inline_completion).
-- One suggestion at a time: the first line inline at the cursor, further lines as
-- virtual lines below it, all in one highlight group. While a completion menu is open (the
-- built-in popup menu, or another plugin sets vim.b.specfill_hidden) the suggestion is kept
-- but not drawn; refresh() draws it again once the menu is gone.
local api = vim.api

local M = {}

M.ns = api.nvim_create_namespace('specfill.ghost')

--- The suggestion on screen, or nil.
--- { buf, row, col (0-based byte column of the anchor = cursor), text (still to insert),
---   replace_len (bytes after the anchor that accepting replaces, e.g. an auto-closed ')'),
---   tick (b:changedtick when it was drawn), mark (the extmark's options), extmark (its id
---   while drawn, nil while hidden), offer (what suggestion.lua reports to the server) }
M.current = nil

--- Whether suggestions must not be drawn in `buf` now: a popup menu is open, or a plugin
--- (e.g. nvim-cmp's or blink.cmp's menu events) set vim.b.specfill_hidden.
function M.hidden(buf)
  return vim.fn.pumvisible() == 1 or not not vim.b[buf].specfill_hidden
end

--- `s` with its tabs as `buf`'s tabstop of spaces (virtual text draws a tab as one cell).
function M.expand_tabs(s, buf)
  if not s:find('\t', 1, true) then
    return s
  end
  return (s:gsub('\t', string.rep(' ', vim.bo[buf].tabstop)))
end

function M.clear()
  local s = M.current
  M.current = nil
  if s and s.extmark and api.nvim_buf_is_valid(s.buf) then
    pcall(api.nvim_buf_del_extmark, s.buf, M.ns, s.extmark)
  end
end

--- Draw the current suggestion or take it off the screen, as M.hidden() says now.
function M.refresh()
  local s = M.current
  if not s or not api.nvim_buf_is_valid(s.buf) then
    return
  end
  if M.hidden(s.buf) then
    if s.extmark then
      pcall(api.nvim_buf_del_extmark, s.buf, M.ns, s.extmark)
      s.extmark = nil
    end
  elseif not s.extmark then
    s.extmark = api.nvim_buf_set_extmark(s.buf, M.ns, s.row, s.col, s.mark)
  end
end

--- Show `text` as ghost text at (row, col) of `buf` (0-based, col in bytes); drawn at once
--- unless a menu hides it. `offer` is carried along for suggestion.lua.
function M.show(buf, row, col, text, hl, replace_len, offer)
  M.clear()
  if text == '' then
    return
  end
  local shown = text
  if (replace_len or 0) > 0 and not text:find('\n', 1, true) then
    -- Accepting replaces e.g. an auto-closed ')' after the cursor: when the suggestion ends
    -- with those same characters, do not draw them twice.
    local line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ''
    local replaced = line:sub(col + 1, col + replace_len)
    if replaced ~= '' and text:sub(-#replaced) == replaced then
      shown = text:sub(1, #text - #replaced)
    end
  end
  if shown == '' then
    return
  end
  local lines = vim.split(shown, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { M.expand_tabs(lines[i], buf), hl } }
  end
  local mark = {
    virt_text = { { M.expand_tabs(lines[1], buf), hl } },
    virt_text_pos = 'inline',
    hl_mode = 'combine',
    priority = 2000,
  }
  if #virt_lines > 0 then
    mark.virt_lines = virt_lines
  end
  M.current = {
    buf = buf,
    row = row,
    col = col,
    text = text,
    replace_len = replace_len or 0,
    tick = api.nvim_buf_get_changedtick(buf),
    line = api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or '', -- the line it belongs to
    mark = mark,
    offer = offer,
  }
  M.refresh()
end

--- A suggestion is kept for the current buffer (drawn or hidden by a menu).
function M.pending()
  local s = M.current
  return s ~= nil and s.buf == api.nvim_get_current_buf()
end

--- A suggestion is on screen in the current buffer: the keys act on it.
function M.visible()
  return M.pending() and M.current.extmark ~= nil
end

--- The ghost text as the buffer shows it: { {row, col, text}, ... } read back from the
--- extmarks (what a test or a statusline would see).
function M.rendered(buf)
  local out = {}
  for _, m in ipairs(api.nvim_buf_get_extmarks(buf or 0, M.ns, 0, -1, { details = true })) do
    local parts = {}
    for _, chunk in ipairs(m[4].virt_text or {}) do
      parts[#parts + 1] = chunk[1]
    end
    for _, line in ipairs(m[4].virt_lines or {}) do
      local l = {}
      for _, chunk in ipairs(line) do
        l[#l + 1] = chunk[1]
      end
      parts[#parts + 1] = '\n' .. table.concat(l)
    end
    out[#out + 1] = { row = m[2], col = m[3], text = table.concat(parts) }
  end
  return out
end

return M
