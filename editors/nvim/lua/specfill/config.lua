-- Every option of the specfill Neovim plugin, with its default, in one place.
-- Pass any subset to require('specfill').setup({...}); unknown keys are an error.
local M = {}

M.defaults = {
  -- Command that starts the language server (LSP over stdio).
  -- e.g. { 'python', '-m', 'lsp' } or { '/path/to/venv/bin/specfill', 'serve' }.
  cmd = { 'specfill', 'serve' },

  -- Filetypes to attach to. nil = every buffer that has a filetype.
  filetypes = nil,

  -- Files that mark a project root (passed to vim.lsp.config's root_markers).
  -- Without a match the server still attaches, in single-file mode.
  root_markers = { '.git' },

  -- Server settings, sent as the `specfill` settings section (initializationOptions,
  -- workspace/configuration and workspace/didChangeConfiguration). Anything left out
  -- keeps the server's default. The server validates them and reports bad values
  -- with a message; require('specfill').set_settings({...}) changes them live.
  --   targetModel      "default" (shipped pair), a hub id or a local directory
  --   draftModel       "default", hub id, local dir, "ngram" or "none"
  --   draftLength      "auto" or 1..16: tokens the draft proposes per target pass
  --   maxNewTokens     longest completion, in target tokens
  --   temperature      0 = greedy (exactly what the target alone would write)
  --   device           "auto", "cpu", "cuda", "mps", ...
  --   dtype            "auto", "float32", "float16", "bfloat16"
  --   fimTemplate      "auto" (from the tokenizer) or a named FIM format
  --   prefixTokens     context budget before the cursor, in target tokens
  --   suffixTokens     context budget after the cursor, in target tokens
  --   multiline        "auto", "always" or "never"
  --   debounceMs       server-side wait before decoding a request
  --   timeBudgetMs     stop decoding after this long (0 or nil = no limit)
  --   enable           false = the server answers nothing
  --   trustRemoteCode  allow model repositories to run their own code (off by default)
  settings = {},

  -- Renderer: 'auto' uses Neovim's built-in vim.lsp.inline_completion when it exists
  -- (0.12+) and specfill's own ghost text otherwise; 'builtin' or 'specfill' force one.
  renderer = 'auto',

  -- Ask for a suggestion automatically while typing in insert mode.
  -- false = only on the `request` key.
  auto_trigger = true,

  -- Client-side wait after the last keystroke before asking (the server debounces too).
  debounce_ms = 50,

  -- Highlight group of the ghost text. Linked to Comment unless you define it:
  --   vim.api.nvim_set_hl(0, 'SpecfillGhost', { fg = '#6e7681', italic = true })
  hl_group = 'SpecfillGhost',

  -- Insert-mode keys. Each one only acts while a suggestion is visible (`request`
  -- always acts); otherwise the key does what it normally does. false = no mapping.
  keys = {
    accept = '<Tab>', -- insert the whole suggestion
    accept_word = '<C-Right>', -- insert its next word
    accept_line = '<S-Tab>', -- insert the rest of its current line
    dismiss = '<C-]>', -- hide it
    request = '<M-\\>', -- ask now, without waiting for the debounce
  },

  -- Name of the LSP client (vim.lsp.config / vim.lsp.enable / :checkhealth vim.lsp).
  name = 'specfill',
}

-- Options whose default is nil, so that M.defaults has no key for them.
local NIL_DEFAULTS = { filetypes = true }

local function check_keys(tbl, allowed, where)
  for k in pairs(tbl) do
    if allowed[k] == nil and not (where == '' and NIL_DEFAULTS[k]) then
      error(('specfill: unknown option %s%s'):format(where, k), 3)
    end
  end
end

--- Merge user options over the defaults, rejecting unknown keys (typos fail loudly).
function M.resolve(opts)
  opts = opts or {}
  check_keys(opts, M.defaults, '')
  check_keys(opts.keys or {}, M.defaults.keys, 'keys.')
  local merged = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts)
  -- settings and cmd are values, not defaults to merge into: take the user's as is.
  if opts.settings then
    merged.settings = vim.deepcopy(opts.settings)
  end
  if opts.cmd then
    merged.cmd = vim.deepcopy(opts.cmd)
  end
  if not vim.tbl_contains({ 'auto', 'builtin', 'specfill' }, merged.renderer) then
    error("specfill: renderer must be 'auto', 'builtin' or 'specfill'", 2)
  end
  return merged
end

return M
