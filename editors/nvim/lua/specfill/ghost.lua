-- specfill's own ghost-text renderer (for Neovim without vim.lsp.inline_completion).
-- One suggestion at a time: the first line inline at the cursor, further lines as
-- virtual lines below it, all in one highlight group.
local api = vim.api

local M = {}

M.ns = api.nvim_create_namespace('specfill.ghost')

--- The suggestion on screen, or nil.
--- { buf, row, col (0-based byte column of the anchor = cursor), text (still to insert),
---   replace_len (bytes after the anchor that accepting replaces, e.g. an auto-closed ')'),
---   tick (b:changedtick when it was drawn), extmark }
M.current = nil

local function expand_tabs(s, buf)
  if not s:find('\t', 1, true) then
    return s
  end
  return (s:gsub('\t', string.rep(' ', vim.bo[buf].tabstop)))
end

function M.clear()
  local s = M.current
  M.current = nil
  if s and api.nvim_buf_is_valid(s.buf) then
    pcall(api.nvim_buf_del_extmark, s.buf, M.ns, s.extmark)
  end
end

--- Draw `text` as ghost text at (row, col) of `buf` (0-based, col in bytes).
function M.show(buf, row, col, text, hl, replace_len)
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
    virt_lines[#virt_lines + 1] = { { expand_tabs(lines[i], buf), hl } }
  end
  local mark = {
    virt_text = { { expand_tabs(lines[1], buf), hl } },
    virt_text_pos = 'inline',
    hl_mode = 'combine',
    priority = 2000,
  }
  if #virt_lines > 0 then
    mark.virt_lines = virt_lines
  end
  local id = api.nvim_buf_set_extmark(buf, M.ns, row, col, mark)
  M.current = {
    buf = buf,
    row = row,
    col = col,
    text = text,
    replace_len = replace_len or 0,
    tick = api.nvim_buf_get_changedtick(buf),
    extmark = id,
  }
end

function M.visible()
  local s = M.current
  return s ~= nil and s.buf == api.nvim_get_current_buf()
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
