-- Notices for the user that never stop them: one line on the message line, cut to fit (the
-- whole text goes to :SpecfillLog), so no "Press ENTER" prompt appears, in insert mode least
-- of all. A notification plugin (nvim-notify, noice, ...) that replaced vim.notify gets the
-- whole text instead: it shows notices in windows of its own, without prompts.
local log = require('specfill.log')

local M = {}

local HIGHLIGHT = { [vim.log.levels.ERROR] = 'ErrorMsg', [vim.log.levels.WARN] = 'WarningMsg' }
local LEVEL_NAME = { [vim.log.levels.ERROR] = 'ERROR', [vim.log.levels.WARN] = 'WARN' }

--- Whether vim.notify is still Neovim's own (which echoes, and prompts for long text).
local function own_notify()
  local info = debug.getinfo(vim.notify, 'S')
  return info ~= nil and info.source:find('vim/_editor.lua', 1, true) ~= nil
end

--- `text` cut to `width` display cells (an ellipsis marks the cut).
function M.fit(text, width)
  text = text:gsub('%s*\n%s*', ' ')
  if vim.fn.strdisplaywidth(text) <= width then
    return text
  end
  local cut = vim.fn.strcharpart(text, 0, width - 1)
  while vim.fn.strdisplaywidth(cut) > width - 1 and #cut > 0 do -- (wide characters)
    cut = vim.fn.strcharpart(cut, 0, vim.fn.strchars(cut) - 1)
  end
  return cut .. '…'
end

--- The last notices shown, newest last (for tests and :SpecfillLog readers).
M.shown = {}

--- Show `text` ('specfill: ...') at `level` (vim.log.levels), once, without a prompt; it is
--- also kept in :SpecfillLog unless `logged` says it is there already.
function M.show(text, level, logged)
  level = level or vim.log.levels.INFO
  if not logged then
    log.add(LEVEL_NAME[level] or 'INFO', text)
  end
  table.insert(M.shown, text)
  if #M.shown > 20 then
    table.remove(M.shown, 1)
  end
  vim.schedule(function()
    if not own_notify() then
      vim.notify(text, level, { title = 'specfill' })
      return
    end
    -- v:echospace: the cells the message line has without scrolling (and so without a prompt).
    local line = M.fit(text, math.max(vim.v.echospace - 1, 10))
    vim.cmd.redraw() -- a notice replaces the one before it instead of scrolling below it
    vim.api.nvim_echo({ { line, HIGHLIGHT[level] } }, true, {})
  end)
end

return M
