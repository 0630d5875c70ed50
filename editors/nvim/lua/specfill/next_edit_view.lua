-- How a next-edit suggestion is drawn: the text it deletes struck through (an extmark over
-- that range), and the text it writes beside it: inline virtual text after the deleted part
-- when the edit stays within one line, otherwise the lines the edit makes, as virtual lines
-- (the lines it leaves as they are not repeated).
local api = vim.api

local M = {}

M.ns = api.nvim_create_namespace('specfill.next_edit')
M.DELETE_HL = 'SpecfillNextEditDelete'
M.ADD_HL = 'SpecfillNextEditAdd'

local expand_tabs = require('specfill.ghost').expand_tabs

--- The lines an edit changes, before and after it: the edit replaces bytes [sc, ec) of rows
--- sr..er (0-based) of `old` (those rows' text) with `text`. Lines equal at the start and at the
--- end of both are left out; returns the old rows still changed (first, count) and the new lines.
function M.changed_lines(old, sr, sc, ec, text)
  local made = old[1]:sub(1, sc) .. text .. old[#old]:sub(ec + 1)
  local new = vim.split(made, '\n', { plain = true })
  local lead = 0
  while lead < #old and lead < #new and old[lead + 1] == new[lead + 1] do
    lead = lead + 1
  end
  local trail = 0
  while trail < #old - lead and trail < #new - lead and old[#old - trail] == new[#new - trail] do
    trail = trail + 1
  end
  return sr + lead, #old - lead - trail, vim.list_slice(new, lead + 1, #new - trail)
end

--- Draw edit `e` ({ sr, sc, er, ec: the byte range it replaces, text: what it writes }) in
--- `buf`; returns the ids of its extmarks.
function M.draw(buf, e)
  local marks = {}
  if e.sr ~= e.er or e.sc ~= e.ec then
    marks[#marks + 1] = api.nvim_buf_set_extmark(buf, M.ns, e.sr, e.sc, {
      end_row = e.er,
      end_col = e.ec,
      hl_group = M.DELETE_HL,
      priority = 2000,
    })
  end
  if e.sr == e.er and not e.text:find('\n', 1, true) then
    if e.text ~= '' then
      marks[#marks + 1] = api.nvim_buf_set_extmark(buf, M.ns, e.er, e.ec, {
        virt_text = { { expand_tabs(e.text, buf), M.ADD_HL } },
        virt_text_pos = 'inline',
        hl_mode = 'combine',
        priority = 2000,
      })
    end
    return marks
  end
  local old = api.nvim_buf_get_lines(buf, e.sr, e.er + 1, false)
  local first, count, new = M.changed_lines(old, e.sr, e.sc, e.ec, e.text)
  if #new == 0 then
    return marks -- only whole lines deleted: the strike-through says it all
  end
  local virt_lines = {}
  for i, line in ipairs(new) do
    virt_lines[i] = { { expand_tabs(line, buf), M.ADD_HL } }
  end
  local line_count = api.nvim_buf_line_count(buf)
  local row, above = first + count - 1, false
  if count == 0 then
    -- Lines inserted and none changed: above the line they go before (below the last line
    -- when they go at the end).
    row, above = first, true
    if row >= line_count then
      row, above = line_count - 1, false
    end
  end
  marks[#marks + 1] = api.nvim_buf_set_extmark(buf, M.ns, row, 0, {
    virt_lines = virt_lines,
    virt_lines_above = above,
    priority = 2000,
  })
  return marks
end

--- Take every next-edit mark off `buf`.
function M.clear(buf)
  if api.nvim_buf_is_valid(buf) then
    api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  end
end

--- What is drawn in `buf`, read back from the extmarks (for tests): { deleted = { row, col,
--- end_row, end_col } or nil, inline = { row, col, text } or nil, lines = { row, above, texts }
--- or nil }; an empty table when nothing is drawn.
function M.rendered(buf)
  local out = {}
  for _, m in ipairs(api.nvim_buf_get_extmarks(buf or 0, M.ns, 0, -1, { details = true })) do
    local row, col, d = m[2], m[3], m[4]
    if d.hl_group == M.DELETE_HL then
      out.deleted = { row = row, col = col, end_row = d.end_row, end_col = d.end_col }
    elseif d.virt_text then
      local parts = {}
      for _, chunk in ipairs(d.virt_text) do
        parts[#parts + 1] = chunk[1]
      end
      out.inline = { row = row, col = col, text = table.concat(parts) }
    elseif d.virt_lines then
      local texts = {}
      for i, line in ipairs(d.virt_lines) do
        local l = {}
        for _, chunk in ipairs(line) do
          l[#l + 1] = chunk[1]
        end
        texts[i] = table.concat(l)
      end
      out.lines = { row = row, above = d.virt_lines_above or false, texts = texts }
    end
  end
  return out
end

return M
