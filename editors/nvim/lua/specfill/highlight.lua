-- The plugin's highlight groups, readable with and without 'termguicolors'. Linking to
-- Comment is not enough: Neovim 0.11's default Comment has only a GUI colour, so without
-- truecolor the ghost text looked exactly like code. A user's or colour scheme's own
-- definition of a group wins (default = true).
local M = {}

M.group = 'SpecfillGhost'
-- Mid grey: readable on dark and light backgrounds; 244 is the same grey in the 256-colour
-- palette. Italic where the terminal can draw it (cterm attributes are ignored otherwise).
M.spec = { fg = '#808080', ctermfg = 244, italic = true, cterm = { italic = true }, default = true }

-- A next edit: the text it deletes struck through in red, the text it writes in green.
M.next_edit = {
  SpecfillNextEditDelete = { fg = '#d16969', ctermfg = 167, strikethrough = true, cterm = { strikethrough = true }, default = true },
  SpecfillNextEditAdd = { fg = '#6a9955', ctermfg = 71, italic = true, cterm = { italic = true }, default = true },
}

function M.define()
  vim.api.nvim_set_hl(0, M.group, M.spec)
  for name, spec in pairs(M.next_edit) do
    vim.api.nvim_set_hl(0, name, spec)
  end
end

--- Define the groups now and again after every :colorscheme (which clears highlights).
function M.setup(augroup)
  M.define()
  vim.api.nvim_create_autocmd('ColorScheme', { group = augroup, callback = M.define })
end

return M
