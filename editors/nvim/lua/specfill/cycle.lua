-- Cycling through alternative suggestions (<M-]> / <M-[>): the first press asks the server for
-- them (specfill/alternatives: the greedy one first, then samples from the target, up to the
-- server's `candidates` setting); they belong to the cursor position they were asked at.
local api = vim.api
local editing = require('specfill.editing')
local ghost = require('specfill.ghost')
local status = require('specfill.status')
local suggestion = require('specfill.suggestion')

local M = {}

M.METHOD = require('specfill.protocol').methods.alternatives

--- { buf, row, col, tick, client, items, index, offer (the one on screen) } or nil.
M.current = nil

local function here()
  local row, col = editing.cursor()
  local buf = api.nvim_get_current_buf()
  return buf, row, col, api.nvim_buf_get_changedtick(buf)
end

--- The alternatives, when they still belong to what is on screen.
local function valid()
  local c = M.current
  if not c or not ghost.current or ghost.current.offer ~= c.offer then
    return nil
  end
  local buf, row, col = here()
  if buf ~= c.buf or row ~= c.row or col ~= c.col then
    return nil
  end
  return c
end

local function show(c, index)
  c.index = (index - 1) % #c.items + 1
  local line = api.nvim_buf_get_lines(c.buf, c.row, c.row + 1, false)[1] or ''
  local req = { client = c.client, buf = c.buf, row = c.row, col = c.col, line = line,
                tick = api.nvim_buf_get_changedtick(c.buf) }
  suggestion.present(req, c.items[c.index])
  c.offer = ghost.current and ghost.current.offer
  vim.cmd.redrawstatus({ bang = true, mods = { emsg_silent = true } })
end

--- Show the next (step 1) or previous (step -1) alternative; the first press asks for them.
function M.step(step, client)
  local c = valid()
  if c then
    return show(c, c.index + step)
  end
  local buf, row, col, tick = here()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  client:request(M.METHOD, params, function(err, result)
    local b, r, cl, t = here()
    if err or not result or b ~= buf or r ~= row or cl ~= col or t ~= tick or not editing.in_insert_mode() then
      if err then
        status.failed()
      end
      return
    end
    local items = result.items or result
    if #items == 0 then
      return
    end
    local fresh = { buf = buf, row = row, col = col, client = client, items = items }
    M.current = fresh
    -- The first item is the greedy one, already on screen: start from it.
    show(fresh, 1 + step)
  end, buf)
end

--- '2/3' while cycling through alternatives of the suggestion on screen, else nil.
function M.position()
  local c = valid()
  return c and ('%d/%d'):format(c.index, #c.items) or nil
end

return M
