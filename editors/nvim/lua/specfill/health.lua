-- :checkhealth specfill
local M = {}

local VERSION_TIMEOUT_MS = 20000

--- Run the server command with --version: (true, first line of stdout) or (false, why).
function M.server_version(cmd)
  local ok, proc = pcall(vim.system, vim.list_extend(vim.deepcopy(cmd), { '--version' }), { text = true })
  if not ok then
    return false, tostring(proc)
  end
  local done = proc:wait(VERSION_TIMEOUT_MS)
  local out = vim.trim(done.stdout or '')
  if done.code == 0 and out ~= '' then
    return true, vim.split(out, '\n')[1]
  end
  local err = vim.trim((done.stderr or '') .. '\n' .. out)
  if done.signal ~= 0 and done.code ~= 0 then
    err = ('timed out or killed (signal %d)%s'):format(done.signal, err ~= '' and (': ' .. err) or '')
  else
    err = ('exit code %d%s'):format(done.code, err ~= '' and (': ' .. err) or '')
  end
  return false, err
end

--- Which renderer draws the suggestions, and what the built-in one does not do.
function M.renderer(health, option)
  local builtin = require('specfill.renderer.builtin')
  local has = builtin.available() and 'this Neovim has vim.lsp.inline_completion' or 'no vim.lsp.inline_completion'
  if require('specfill.renderer').name(option) == 'builtin' then
    health.warn(("renderer: Neovim's vim.lsp.inline_completion (renderer = %q); it has no %s"):format(option, builtin.MISSING),
      { "renderer = 'specfill' (or 'auto') for all of them" })
  else
    health.ok(("renderer: specfill's own ghost text (renderer = %q; %s)"):format(option, has))
    if builtin.available() then
      health.info("renderer = 'builtin' would use Neovim's, untested by specfill, without " .. builtin.MISSING)
    end
  end
end

function M.check()
  local health = vim.health
  health.start('specfill')
  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()))
  else
    health.error('Neovim 0.11 or newer is needed (vim.lsp.config / vim.lsp.enable)')
  end
  local opts = require('specfill.state').opts
  local cfg = opts and vim.lsp.config[opts.name]
  if not cfg then
    health.warn("require('specfill').setup() has not run")
    return
  end
  local fix = { "pip install -e . in the specfill checkout, or setup({ cmd = { '/path/to/specfill', 'serve' } })" }
  local exe = type(cfg.cmd) == 'table' and cfg.cmd[1] or nil
  if exe and vim.fn.executable(exe) == 1 then
    health.ok('server command: ' .. table.concat(cfg.cmd, ' '))
    local ok, text = M.server_version(cfg.cmd)
    if ok then
      health.ok('server --version: ' .. text)
    else
      health.error(('server command fails (%s --version): %s'):format(table.concat(cfg.cmd, ' '), text), fix)
    end
  else
    health.error('server command not found: ' .. tostring(exe), fix)
  end
  M.renderer(health, opts.renderer)
  local status = require('specfill.status')
  local clients = require('specfill.server').clients()
  if #clients > 0 then
    local line = status.line(require('specfill.state').enabled, true)
    health.ok(('server running (client %d, name %q): %s'):format(clients[1].id, opts.name, line))
  elseif status.phase == 'exited' or status.phase == 'gave_up' then
    health.error(status.line(true, false):gsub('^specfill: error: ', ''), { ':SpecfillLog shows what the server wrote' })
  elseif status.phase == 'restarting' then
    health.warn(status.line(true, false):gsub('^specfill: ', ''), { ':SpecfillLog shows what the server wrote' })
  else
    health.info('server not running (it starts when a file with a filetype opens)')
  end
end

return M
