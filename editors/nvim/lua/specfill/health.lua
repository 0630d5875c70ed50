-- :checkhealth specfill
local M = {}

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
  local exe = type(cfg.cmd) == 'table' and cfg.cmd[1] or nil
  if exe and vim.fn.executable(exe) == 1 then
    health.ok('server command: ' .. table.concat(cfg.cmd, ' '))
  else
    health.error('server command not found: ' .. tostring(exe), { "pip install -e . in the specfill checkout, or setup({ cmd = { '/path/to/specfill', 'serve' } })" })
  end
  if require('specfill.renderer.builtin').available() then
    health.info('vim.lsp.inline_completion is available (renderer = "auto" uses it)')
  else
    health.info("no vim.lsp.inline_completion in this Neovim: specfill's own ghost text is used")
  end
  local clients = require('specfill.server').clients()
  if #clients > 0 then
    health.ok(('server running (client %d, name %q): %s'):format(clients[1].id, opts.name, require('specfill').statusline()))
  else
    health.info('server not running (it starts when a file with a filetype opens)')
  end
end

return M
