-- User commands: :SpecfillToggle, :SpecfillStats, :SpecfillReload.
local api = vim.api
local server = require('specfill.server')
local status = require('specfill.status')

local M = {}

local function show_stats()
  server.stats(function(err, stats)
    if err then
      vim.notify(tostring(err), vim.log.levels.ERROR)
      return
    end
    local lines = { 'specfill stats' }
    for _, k in ipairs(vim.tbl_keys(stats or {})) do
      lines[#lines + 1] = ('  %s: %s'):format(k, vim.inspect(stats[k]))
    end
    table.sort(lines, function(a, b)
      return a == 'specfill stats' or (b ~= 'specfill stats' and a < b)
    end)
    lines[#lines + 1] = ('  client: shown %d, accepted %d, last latency %s ms'):format(
      status.shown,
      status.accepted,
      tostring(status.latency_ms)
    )
    vim.notify(table.concat(lines, '\n'), vim.log.levels.INFO)
  end)
end

--- `toggle`: what :SpecfillToggle does (require('specfill').toggle).
function M.setup(toggle)
  api.nvim_create_user_command('SpecfillToggle', toggle, { desc = 'specfill: suggestions on/off' })
  api.nvim_create_user_command('SpecfillStats', show_stats, { desc = 'specfill: server statistics' })
  api.nvim_create_user_command('SpecfillReload', server.reload, { desc = 'specfill: reload the models' })
end

return M
