-- Where the user works, told to the server as extra context for completions in other buffers
-- (the server's `extraContextFrom` option says what it uses): text yanked (TextYankPost ->
-- specfill/yanked) and the line the cursor was on when leaving a buffer or resting in it
-- (BufLeave, CursorHold -> specfill/visited). Edits need nothing here: the server sees them
-- as didChange. Nothing leaves the machine.
local api = vim.api
local protocol = require('specfill.protocol')
local server = require('specfill.server')
local state = require('specfill.state')

local M = {}

M.YANKED, M.VISITED = protocol.methods.yanked, protocol.methods.visited
M.MAX_YANK_CHARS = 20000 -- a larger yank (a whole file) says little about where the user is

local function notify(buf, method, params)
  if not state.enabled then
    return
  end
  local client = server.client_for(buf)
  if client and not client:is_stopped() then
    client:notify(method, params)
  end
end

--- TextYankPost: `event` is v:event. Only yanks: deletes and changes reach the server as edits.
function M.yanked(buf, event)
  if event.operator ~= 'y' or type(event.regcontents) ~= 'table' then
    return
  end
  local text = table.concat(event.regcontents, '\n')
  if event.regtype == 'V' then
    text = text .. '\n'
  end
  if text:match('^%s*$') or #text > M.MAX_YANK_CHARS then
    return
  end
  notify(buf, M.YANKED, { textDocument = { uri = vim.uri_from_bufnr(buf) }, text = text })
end

--- The cursor's line in `buf` (the current window's buffer); only the line counts.
function M.visited(buf)
  if api.nvim_win_get_buf(0) ~= buf then
    return
  end
  local line = api.nvim_win_get_cursor(0)[1] - 1
  notify(buf, M.VISITED, { textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = line, character = 0 } })
end

function M.create_autocmds(group)
  api.nvim_create_autocmd('TextYankPost', {
    group = group,
    callback = function(ev)
      M.yanked(ev.buf, vim.v.event)
    end,
  })
  api.nvim_create_autocmd({ 'BufLeave', 'CursorHold' }, {
    group = group,
    callback = function(ev)
      M.visited(ev.buf)
    end,
  })
end

return M
