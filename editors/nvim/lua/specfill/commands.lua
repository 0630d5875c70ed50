-- User commands: :SpecfillToggle, :SpecfillStats[!], :SpecfillReload, :SpecfillRestart, :SpecfillLog.
local api = vim.api
local log = require('specfill.log')
local notice = require('specfill.notice')
local server = require('specfill.server')
local state = require('specfill.state')
local status = require('specfill.status')

local M = {}

local function pct(x)
  return type(x) == 'number' and ('%d%%'):format(math.floor(x * 100 + 0.5)) or '-'
end

local function ms(x)
  return type(x) == 'number' and ('%d ms'):format(math.floor(x + 0.5)) or '-'
end

local function num(x)
  return type(x) == 'number' and ('%.2f'):format(x) or '-'
end

--- The short summary :SpecfillStats shows: the figures a user asks about, one topic a line.
function M.summary(stats)
  local p = type(stats.pipeline) == 'table' and stats.pipeline or {}
  local latency = type(p.latency_ms) == 'table' and p.latency_ms or {}
  local models = stats.models or {}
  -- What you did with the suggestions (the server counts this Neovim's reports), not the
  -- draft model's token acceptance below.
  local user = type(stats.userAcceptance) == 'table' and stats.userAcceptance or {}
  local lines = {
    ('specfill: %s + draft %s%s'):format(
      tostring(models.targetModel),
      tostring(models.draftModel),
      models.loading and ' (loading)' or (models.loaded == false and ' (not loaded)' or '')
    ),
    ('  latency          p50 %s, p95 %s (server, %d requests)'):format(ms(latency.p50), ms(latency.p95), p.requests or 0),
    ('  you accepted     %s of %d suggestions shown (%d whole, %d in part, %d dismissed)'):format(
      pct(user.userAcceptanceRate),
      user.displayed or 0,
      user.acceptedFully or 0,
      user.acceptedPartly or 0,
      user.dismissed or 0
    ),
    ('  draft accepted   %s of drafted tokens'):format(pct(p.acceptance_rate)),
    ('  tokens/target    %s per target call'):format(num(p.tokens_per_target_call)),
    ('  decoded/shown    %s tokens decoded per token shown'):format(num(p.decoded_per_shown_token)),
    ('  KV reuse         %s (draft %s)'):format(pct(p.kv_reuse), pct(p.draft_kv_reuse)),
    ('  cache hits       %s (%d)'):format(pct(p.cache_hit_rate), p.cache_hits or 0),
    M.last_request_line(stats.lastRequest),
    ':SpecfillStats! shows every figure',
  }
  local cycling = require('specfill.cycle').position()
  if cycling then
    table.insert(lines, #lines, ('  alternative      %s on screen (<M-]> / <M-[> cycle)'):format(cycling))
  end
  return lines
end

--- The latest request: answered, or why not (the server's `lastRequest`).
function M.last_request_line(last)
  if type(last) ~= 'table' or last.uri == nil then
    return '  last request     -'
  end
  if last.answered then
    return '  last request     answered'
  end
  if last.pending then
    return '  last request     running'
  end
  return '  last request     no answer: ' .. tostring(last.reason or '')
end

--- Every figure, as nested tables, in a scratch buffer.
local function show_full(stats)
  local lines = vim.split(vim.inspect(stats), '\n', { plain = true })
  local why_off = require('specfill').why_off(api.nvim_get_current_buf())
  table.insert(lines, 1, '-- this buffer: ' .. (why_off and ('no suggestions: ' .. why_off) or 'suggestions on'))
  table.insert(
    lines,
    1,
    ('-- specfill stats (client: shown %d, accepted %d, last latency %s ms, %d automatic requests skipped by max_line_suffix)'):format(
      status.shown,
      status.accepted,
      tostring(status.latency_ms),
      status.suffix_skips
    )
  )
  vim.cmd('botright new')
  local buf = api.nvim_get_current_buf()
  vim.bo[buf].buftype, vim.bo[buf].bufhidden, vim.bo[buf].swapfile = 'nofile', 'wipe', false
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].filetype = 'lua'
  vim.bo[buf].modifiable = false
  pcall(api.nvim_buf_set_name, buf, 'specfill://stats')
end

local function show_stats(cmd)
  server.stats(function(err, stats)
    if err then
      notice.show(tostring(err), vim.log.levels.ERROR)
    elseif cmd.bang then
      -- with the latest model run's figures: also those of an answer that showed nothing
      server.last_completion(function(_, last)
        show_full(vim.tbl_extend('force', stats or {}, { lastCompletion = last or vim.NIL }))
      end)
    else
      vim.notify(table.concat(M.summary(stats or {}), '\n'), vim.log.levels.INFO)
    end
  end)
end

--- `toggle`: what :SpecfillToggle does (require('specfill').toggle).
function M.setup(toggle)
  api.nvim_create_user_command('SpecfillToggle', toggle, { desc = 'specfill: suggestions on/off' })
  api.nvim_create_user_command('SpecfillStats', show_stats, {
    bang = true,
    desc = 'specfill: statistics summary (! for every figure)',
  })
  api.nvim_create_user_command('SpecfillReload', server.reload, {
    desc = 'specfill: reload the models (start the server if it is not running)',
  })
  api.nvim_create_user_command('SpecfillRestart', server.restart, {
    desc = 'specfill: stop the server and start it again for every buffer, settings kept',
  })
  api.nvim_create_user_command('SpecfillLog', function()
    log.open(state.opts.cmd)
  end, { desc = "specfill: the server's messages, exit and stderr" })
end

return M
