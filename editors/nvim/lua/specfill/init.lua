-- specfill for Neovim 0.11+: registers the specfill language server and shows its
-- inline completions as ghost text while you type. Options: lua/specfill/config.lua.
--
-- setup() resolves the options, picks the renderer (renderer/), then registers the server
-- (server.lua), creates the autocommands (autocmds.lua), maps the keys (the renderer's) and
-- creates the user commands (commands.lua). The functions below are the public interface.
local api = vim.api
local autocmds = require('specfill.autocmds')
local commands = require('specfill.commands')
local config = require('specfill.config')
local ghost = require('specfill.ghost')
local highlight = require('specfill.highlight')
local notice = require('specfill.notice')
local renderers = require('specfill.renderer')
local server = require('specfill.server')
local state = require('specfill.state')
local status = require('specfill.status')

local M = {}

-- The renderer setup() chose; until then the own one, which does nothing without options.
local renderer = require('specfill.renderer.own')

--- Set the plugin up. A mistake in the options (an unknown one, a bad value) is one error line
--- that names it; the plugin is set up with the rest, and the caller's config goes on.
function M.setup(user_opts)
  local opts, problems = config.resolve(user_opts)
  local chosen, problem = renderers.choose(opts.renderer)
  if problem then
    table.insert(problems, problem)
    opts.renderer = 'specfill'
  end
  if #problems > 0 then
    notice.show('specfill: setup: ' .. table.concat(problems, '; '), vim.log.levels.ERROR)
  end
  renderer = chosen
  state.opts = opts
  server.register(opts)
  highlight.setup(autocmds.setup(renderer))
  renderer.map_keys(opts.keys)
  commands.setup(M.toggle)
end

--- Ask the server for a suggestion at the cursor now.
--- trigger_kind: 1 = invoked by the user, 2 = automatic (default).
function M.request(trigger_kind)
  renderer.request(trigger_kind)
end

--- Request after `debounce_ms` of quiet (restarted by every keystroke).
function M.schedule()
  renderer.schedule()
end

--- Whether a suggestion is shown (always false with the built-in renderer).
function M.visible()
  return renderer.visible()
end

--- Accept the whole suggestion.
function M.accept()
  return renderer.accept()
end

--- Accept the suggestion's next word (with the whitespace before it).
function M.accept_word()
  renderer.accept_word()
end

--- Accept the rest of the suggestion's current line (or its next line if at a line end).
function M.accept_line()
  renderer.accept_line()
end

--- Show the next alternative suggestion (the server's `candidates` setting; asked for on the
--- first press).
function M.next()
  renderer.cycle(1)
end

--- Show the previous alternative suggestion.
function M.prev()
  renderer.cycle(-1)
end

function M.clear()
  renderer.clear()
end

function M.dismiss()
  M.clear()
end

function M.toggle()
  state.enabled = not state.enabled
  if not state.enabled then
    M.clear()
  end
  renderer.set_enabled(state.enabled)
  vim.notify('specfill: ' .. (state.enabled and 'on' or 'off'))
end

--- Why buffer `buf` gets no suggestions, in a few words, or nil: the server refuses the
--- document (too large), its filetype is not in `filetypes`, or the server's `enable` is off.
function M.why_off(buf)
  local opts = state.opts
  local refused = status.refused_reason(vim.uri_from_bufnr(buf))
  if refused then
    return status.refused_words(refused)
  end
  local ft = vim.bo[buf].filetype
  if opts.filetypes and ft ~= '' and vim.bo[buf].buftype == '' and not vim.tbl_contains(opts.filetypes, ft) then
    return ('filetype %s is not in filetypes'):format(ft)
  end
  if opts.settings.enable == false then
    return 'the enable setting is false'
  end
  return nil
end

--- Status for a statusline: 'specfill: loading 40%' / 'specfill: ready 35ms' / ...
function M.statusline()
  if not state.opts then
    return ''
  end
  local buf = api.nvim_get_current_buf()
  local line = status.line(state.enabled, server.client_for(buf) ~= nil, M.why_off(buf))
  local cycling = require('specfill.cycle').position()
  return cycling and (line .. ' ' .. cycling) or line
end

--- Stop the server and start it again for every buffer, the settings kept (:SpecfillRestart).
M.restart = server.restart

--- Ask the server for its statistics (`specfill.stats`); cb(err, stats_table).
M.stats = server.stats

--- Change server settings on the fly (sent with workspace/didChangeConfiguration).
M.set_settings = server.set_settings

-- For tests and statuslines: the ghost text currently drawn in `buf`.
M.rendered = ghost.rendered

--- Whether a next-edit suggestion is shown (the server's `nextEdit` setting; own renderer only).
function M.next_edit_visible()
  return require('specfill.next_edit').visible()
end

-- For tests and statuslines: the next edit currently drawn in `buf` (next_edit_view.rendered).
M.rendered_next_edit = require('specfill.next_edit').rendered

return M
