-- Keys that act on a suggestion and otherwise do what the key did before: the user's own
-- mapping of it in that mode (taken over when specfill maps the key), or the key itself.
-- Insert-mode keys act on the ghost text and the next edit; the normal-mode ones on the next
-- edit only.
local M = {}

--- Keep the global `mode` mapping of `lhs` (if any, and not specfill's own) under the <Plug>
--- name `plug`, with all its options; without one, the <Plug> name is the plain key.
local function keep_previous(lhs, plug, mode)
  local prev = vim.fn.maparg(lhs, mode, false, true)
  local ours = (prev.desc or ''):find('^specfill: ') ~= nil
  if ours and not vim.tbl_isempty(vim.fn.maparg(plug, mode, false, true)) then
    return plug -- setup() again: what the key did before the first one is kept already
  end
  if vim.tbl_isempty(prev) or (prev.buffer or 0) ~= 0 or ours then
    vim.keymap.set(mode, plug, lhs, { noremap = true, desc = 'specfill: ' .. lhs .. ' itself' })
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
  vim.api.nvim_set_keymap(mode, plug, rhs, opts)
  return plug
end

--- Map `lhs` in `mode` ('i' when nil): when `active()` it runs require('specfill')[action](),
--- otherwise it does what `lhs` did before in that mode. `acts_itself`: active() already did
--- the action (Neovim 0.12's vim.lsp.inline_completion.get() accepts when there is something
--- to accept).
function M.map(lhs, action, active, acts_itself, mode)
  if not lhs then
    return
  end
  mode = mode or 'i'
  local name = mode == 'i' and action or (mode .. '-' .. action)
  local fallback = keep_previous(lhs, ('<Plug>(specfill-fallback-%s)'):format(name), mode)
  vim.keymap.set(mode, lhs, function()
    if active() then
      return acts_itself and '' or ('<Cmd>lua require("specfill").%s()<CR>'):format(action)
    end
    return fallback
  end, { expr = true, remap = true, silent = true, desc = 'specfill: ' .. action })
end

return M
