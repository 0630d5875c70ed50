-- Insert-mode keys that act on a suggestion and otherwise do what the key did before: the
-- user's own mapping of it (taken over when specfill maps the key), or the key itself.
local M = {}

local function plug_for(name)
  return ('<Plug>(specfill-fallback-%s)'):format(name)
end

--- Keep the global insert-mode mapping of `lhs` (if any, and not specfill's own) under a
--- <Plug> name, with all its options; without one, the <Plug> name is the plain key.
local function keep_previous(lhs, name)
  local plug = plug_for(name)
  local prev = vim.fn.maparg(lhs, 'i', false, true)
  local ours = (prev.desc or ''):find('^specfill: ') ~= nil
  if ours and not vim.tbl_isempty(vim.fn.maparg(plug, 'i', false, true)) then
    return plug -- setup() again: what the key did before the first one is kept already
  end
  if vim.tbl_isempty(prev) or (prev.buffer or 0) ~= 0 or ours then
    vim.keymap.set('i', plug, lhs, { noremap = true, desc = 'specfill: ' .. lhs .. ' itself' })
    return plug
  end
  local opts = {
    noremap = prev.noremap == 1,
    silent = prev.silent == 1,
    nowait = prev.nowait == 1,
    expr = prev.expr == 1,
    callback = prev.callback,
    desc = prev.desc,
  }
  if opts.expr then
    opts.replace_keycodes = prev.replace_keycodes == 1
  end
  local rhs = prev.callback and '' or (prev.rhs or '')
  if prev.sid and prev.sid > 0 then
    -- A Vimscript mapping's <SID> means its own script: spell that out under the new name.
    rhs = rhs:gsub('<SID>', ('<SNR>%d_'):format(prev.sid))
  end
  vim.api.nvim_set_keymap('i', plug, rhs, opts)
  return plug
end

--- Map `lhs` in insert mode: when `active()` it runs require('specfill')[action](), otherwise
--- it does what `lhs` did before. `acts_itself`: active() already did the action (Neovim
--- 0.12's vim.lsp.inline_completion.get() accepts when there is something to accept).
function M.map(lhs, action, active, acts_itself)
  if not lhs then
    return
  end
  local fallback = keep_previous(lhs, action)
  vim.keymap.set('i', lhs, function()
    if active() then
      return acts_itself and '' or ('<Cmd>lua require("specfill").%s()<CR>'):format(action)
    end
    return fallback
  end, { expr = true, remap = true, silent = true, desc = 'specfill: ' .. action })
end

return M
