-- What the server told this Neovim, for :SpecfillLog: its window/logMessage and showMessage
-- lines with their levels, how it exited, and what it wrote to stderr (a crash, or anything
-- before the connection existed), which Neovim keeps only in its lsp.log.
local M = {}

local MAX_ENTRIES = 500
-- LSP MessageType -> name (5 = Debug, LSP 3.18).
local LEVELS = { 'ERROR', 'WARN', 'INFO', 'LOG', 'DEBUG' }

M.entries = {} -- { time, level, text }
M.since = os.date('%F %H:%M:%S') -- lsp.log lines older than this Neovim are not ours

function M.add(level, text)
  M.entries[#M.entries + 1] = { time = os.date('%H:%M:%S'), level = level, text = text }
  if #M.entries > MAX_ENTRIES then
    table.remove(M.entries, 1)
  end
end

--- A window/logMessage or window/showMessage `params` from the server.
function M.add_message(params)
  M.add(LEVELS[params.type] or tostring(params.type), params.message)
end

local ESCAPES = { n = '\n', t = '\t', r = '\r', a = '\a', b = '\b', f = '\f', v = '\v' }

--- The text of a string literal as vim.inspect writes it into lsp.log, or nil when `lit` is
--- not exactly one such literal. (Decoded by hand: the log is data, not code to run.)
local function unquote(lit)
  if lit:sub(1, 1) ~= '"' then
    return nil
  end
  local out, i, n = {}, 2, #lit
  while i <= n do
    local c = lit:sub(i, i)
    if c == '"' then
      return i == n and table.concat(out) or nil
    elseif c == '\\' then
      local digits = lit:match('^%d%d?%d?', i + 1)
      if digits then
        out[#out + 1] = string.char(math.min(255, tonumber(digits)))
        i = i + 1 + #digits
      else
        local e = lit:sub(i + 1, i + 1)
        out[#out + 1] = ESCAPES[e] or e
        i = i + 2
      end
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  return nil
end

--- What the server process `exe` wrote to stderr since this Neovim started, from lsp.log
--- (Neovim logs each stderr chunk there as: [ERROR][date] ...	"rpc"	"exe"	"stderr"	"chunk").
function M.stderr(exe)
  local path = vim.lsp.log.get_filename()
  local file = path and io.open(path, 'r')
  if not file then
    return {}
  end
  local marker = '\t"rpc"\t' .. vim.inspect(exe) .. '\t"stderr"\t'
  local chunks = {}
  for line in file:lines() do
    local date = line:match('^%[%u+%]%[([^%]]+)%]')
    local at = line:find(marker, 1, true)
    if at and date and date >= M.since then
      chunks[#chunks + 1] = unquote(line:sub(at + #marker))
    end
  end
  file:close()
  return vim.split(table.concat(chunks), '\n', { trimempty = true })
end

--- The lines :SpecfillLog shows.
function M.lines(cmd)
  local out = { 'specfill log (server messages, newest last)', '' }
  for _, e in ipairs(M.entries) do
    for i, text in ipairs(vim.split(e.text, '\n', { plain = true })) do
      out[#out + 1] = i == 1 and ('%s %-5s %s'):format(e.time, e.level, text) or ('               ' .. text)
    end
  end
  if #M.entries == 0 then
    out[#out + 1] = '(none)'
  end
  local exe = type(cmd) == 'table' and cmd[1] or nil
  if exe then
    out[#out + 1] = ''
    out[#out + 1] = ('server stderr (%s, from %s):'):format(table.concat(cmd, ' '), vim.lsp.log.get_filename())
    local stderr = M.stderr(exe)
    vim.list_extend(out, #stderr > 0 and stderr or { '(none)' })
  end
  return out
end

--- Open the log in a scratch buffer (a new window).
function M.open(cmd)
  vim.cmd('botright new')
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].swapfile = false
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, M.lines(cmd))
  vim.bo[buf].modifiable = false
  pcall(vim.api.nvim_buf_set_name, buf, 'specfill://log')
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
end

return M
