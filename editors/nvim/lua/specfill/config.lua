-- Every option of the specfill Neovim plugin, with its default, in one place.
-- Pass any subset to require('specfill').setup({...}). An unknown key or a value of the wrong type
-- is one error line (naming the option, and the known one it is closest to); the rest applies.
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
  -- Every server setting with its default (`python -m lsp.settings --markdown` prints the
  -- same as a table):
  -- BEGIN server settings (editors/nvim/scripts/sync_settings.py writes this from lsp/settings.py)
  --   enable = true
  --       Offer completions at all. Allowed: true or false.
  --   targetModel = "default"
  --       The model whose output you get: `default` (the shipped pair), a Hugging Face hub id (must
  --       already be in the local cache), a local directory, or the `http(s)://` URL of a server
  --       that runs it (llama.cpp, vLLM, TGI, Ollama; see `remote`). Allowed: `default`, hub id,
  --       local path or URL.
  --   draftModel = "default"
  --       The small model that proposes tokens for the target to verify: `default`, a hub id, a
  --       local directory, `ngram` (prompt lookup, no model) or `none` (plain decoding). Allowed:
  --       `default`, hub id, local path, `ngram`, `none`.
  --   draftLength = "auto"
  --       Tokens drafted per target call; `auto` picks, each round, the drafter (prompt lookup, the
  --       draft model or none) and the length that give the most tokens per millisecond, from
  --       acceptance and costs it measures as it goes. Allowed: `auto` or an integer 1-16.
  --   maxNewTokens = 64
  --       Most tokens generated for one completion. Allowed: integer 1-1024.
  --   maxLines = 8
  --       Most lines in one multi-line completion. Allowed: integer 1-200.
  --   multiline = "auto"
  --       Multi-line completions: `auto` (one line when code follows the cursor), `always`, or
  --       `never` (stop at the end of the line). Allowed: `auto`, `always`, `never`.
  --   temperature = 0.0
  --       Sampling temperature; 0 is greedy (output equals the target's own greedy output).
  --       Allowed: number 0-2.
  --   candidates = 1
  --       Suggestions to cycle through at one position (Neovim `<M-]>` / `<M-[>`): the first is the
  --       greedy one, the others exact samples from the target (at `temperature`, or 1 when it is
  --       0), without duplicates, made only when you ask to cycle. Allowed: integer 1-5.
  --   device = "auto"
  --       Where the models run (`auto`: CUDA, else MPS, else CPU; `cuda:N` picks one GPU). Allowed:
  --       `auto`, `cpu`, `cuda`, `mps`, `cuda:N`.
  --   dtype = "auto"
  --       Precision the local models compute in. `auto`: on a GPU bfloat16 (else float16); on a CPU
  --       a checkpoint's own 16-bit precision for a real-sized model where the CPU computes it
  --       natively (`specfill --version` says which it does), else float32 (small models, float32
  --       checkpoints). The server's log says what it chose and why. Allowed: `auto`, `float32`,
  --       `bfloat16`, `float16`.
  --   quantize = "none"
  --       The local models' weights in fewer bits (CPU only): `int8` (half the memory of 16 bits,
  --       faster decoding, and verifying several drafted tokens costs little more than one) or
  --       `int4` (a quarter, the fastest decoding, but verifying several tokens costs several times
  --       one); a small cost in quality (`python -m bench.quality`). The output is exactly that of
  --       the quantized target alone. Allowed: `none`, `int8`, `int4`.
  --   fimTemplate = "auto"
  --       Fill-in-the-middle prompt format; `auto` picks it from the target's tokenizer, `plain`
  --       completes from the prefix only. Allowed: `auto`, `codellama`, `starcoder`, `starcoder2`,
  --       `deepseek`, `qwen`, `codegemma`, `codestral`, `plain`.
  --   prefixTokens = 1024
  --       Tokens of text before the cursor put in the prompt. Allowed: integer 16-32768.
  --   suffixTokens = 256
  --       Tokens of text after the cursor put in the prompt. Allowed: integer 0-32768.
  --   extraTokens = 256
  --       Tokens of context taken from other open documents; 0 turns it off. Allowed: integer
  --       0-32768.
  --   timeBudgetMs = 0
  --       Stop decoding after this many milliseconds and show what is ready; 0 = no limit. Allowed:
  --       integer 0-60000.
  --   maxCacheTokens = 8192
  --       KV cache budget, in tokens, of each local model's sessions (one per open document)
  --       together: the longest prompt plus completion, and all that is kept between requests; the
  --       least recently used document's cache goes first. Memory: this many tokens times the
  --       model's KV bytes per token (Qwen2.5-Coder-0.5B in bfloat16: 12 KB; CodeLlama-7B: 512 KB).
  --       Allowed: integer 256-131072.
  --   trustRemoteCode = false
  --       Allow model repositories to run their own Python code when loading. Off unless you trust
  --       the model's source. Allowed: true or false.
  --   prefetch = true
  --       Once a suggestion is shown, compute the next one in the background as if it were
  --       accepted, so accepting shows the following suggestion from the cache. It runs only while
  --       no request needs the models; a request anywhere else stops it at once. Allowed: true or
  --       false.
  --   nextEdit = "off"
  --       Next-edit suggestions: a model that reads your recent edits and the lines around the
  --       cursor and suggests the edit you make next (the editors ask after a change settles).
  --       `off`; `demo` (the shipped demo target, which shows the mechanics but cannot predict
  --       edits); a local model directory (a Zeta or sweep-next-edit checkpoint); or the
  --       `http(s)://` URL of an OpenAI-compatible server that runs one (`/v1/completions`, reached
  --       as `remote` says). Allowed: `off`, `demo`, local path or URL.
  --   nextEditFormat = "auto"
  --       The edit model's prompt format: `zeta` (Zed's Zeta), `sweep` (sweep-next-edit), or `auto`
  --       (from the model's name or path, else zeta; the demo's own copy format for `demo`).
  --       Allowed: `auto`, `zeta`, `sweep`.
  --   remote = {
  --     backend = "auto"
  --         How to talk to a remote `targetModel` (a URL): `llamacpp` (llama.cpp's `/infill`, the
  --         server builds the FIM prompt), `openai` (`/v1/completions` with the prompt built by
  --         specfill, for vLLM, TGI, Ollama) or `auto` (ask the server). Allowed: `auto`,
  --         `llamacpp`, `openai`.
  --     apiKey = ""
  --         API key sent to the remote server (as `Authorization: Bearer`); never logged or shown
  --         in stats. Prefer `apiKeyEnv`. Allowed: a string (empty: none).
  --     apiKeyEnv = ""
  --         Name of an environment variable of the server process that holds the API key (used when
  --         `apiKey` is empty). Allowed: an environment variable name (empty: none).
  --     verifyTls = true
  --         Check a remote `https://` server's certificate; off only for a test server. Allowed:
  --         true or false.
  --     caBundle = ""
  --         A CA bundle file (PEM) to check the remote server's certificate against, for a private
  --         CA. Allowed: a file path (empty: the system's CAs).
  --     connectTimeoutMs = 3000
  --         Longest wait to connect to the remote server. Allowed: integer 100-60000.
  --     readTimeoutMs = 30000
  --         Longest wait for the next part of a remote answer. Allowed: integer 100-600000.
  --   },
  -- END server settings
  settings = {},

  -- Renderer: 'auto' and 'specfill' are specfill's own ghost text (also on Neovim 0.12+);
  -- 'builtin' is Neovim 0.12's vim.lsp.inline_completion, untested by specfill, without
  -- accept-word / accept-line / cycling (see the README).
  renderer = 'auto',

  -- Ask for a suggestion automatically while typing in insert mode (and, with the server's
  -- `nextEdit` on, for a next edit after a change in normal mode).
  -- false = only on the `request` key.
  auto_trigger = true,

  -- Client-side wait after the last keystroke before asking (the server answers at once).
  debounce_ms = 50,

  -- No automatic request when more than this many characters of code follow the cursor on
  -- its line (blanks at the line's end do not count), as llama.vim's max_line_suffix: in the
  -- middle of a line a suggestion is rarely wanted. The `request` key still asks.
  -- false = ask wherever the cursor is. (The built-in renderer asks by itself: not applied.)
  max_line_suffix = 8,

  -- Highlight group of the ghost text. SpecfillGhost is grey italic, with a GUI colour and a
  -- 256-colour fallback (readable with and without 'termguicolors'), unless you or your
  -- colour scheme define it, e.g.:
  --   vim.api.nvim_set_hl(0, 'SpecfillGhost', { fg = '#6e7681', ctermfg = 243, italic = true })
  hl_group = 'SpecfillGhost',

  -- Insert-mode keys, and three normal-mode keys for next-edit suggestions (server setting
  -- `nextEdit`). Each one only acts while a suggestion is visible (the `request` keys always act);
  -- otherwise the key does what it did before setup(): your own global mapping of it in that
  -- mode, if you had one, or its own meaning (in normal mode <Tab> is <C-i>, jump forward).
  -- No suggestion is drawn, and so no key acts, while a popup menu is open or
  -- vim.b.specfill_hidden is set (set it from nvim-cmp's or blink.cmp's menu events).
  -- false = no mapping.
  keys = {
    accept = '<Tab>', -- insert the whole suggestion (a next edit: jump to it, then apply it)
    accept_word = '<C-Right>', -- insert its next word
    accept_line = '<S-Tab>', -- insert the rest of its current line
    dismiss = '<C-]>', -- hide it
    next = '<M-]>', -- the next alternative (server setting `candidates`; asked for on first press)
    prev = '<M-[>', -- the previous alternative
    request = '<M-\\>', -- ask now, without waiting for the debounce
    normal_accept = '<Tab>', -- normal mode: jump to the next edit shown, then apply it
    normal_dismiss = '<Esc>', -- normal mode: hide the next edit shown
    normal_request = '<M-\\>', -- normal mode: ask for the next edit now, without a change
  },

  -- Name of the LSP client (vim.lsp.config / vim.lsp.enable / :checkhealth vim.lsp).
  name = 'specfill',
}

-- Options whose default is nil, so that M.defaults has no key for them.
local NIL_DEFAULTS = { filetypes = 'table' }
-- Types an option may have besides its default's.
local ALSO = { cmd = { ['function'] = true }, max_line_suffix = { boolean = true } }

--- Edit distance between two names (insertions, deletions, substitutions, swaps of neighbours).
local function distance(a, b)
  a, b = a:lower(), b:lower()
  local d = {}
  for i = 0, #a do
    d[i] = { [0] = i }
  end
  for j = 0, #b do
    d[0][j] = j
  end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      d[i][j] = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:sub(i, i) == b:sub(j - 1, j - 1) and a:sub(i - 1, i - 1) == b:sub(j, j) then
        d[i][j] = math.min(d[i][j], d[i - 2][j - 2] + 1)
      end
    end
  end
  return d[#a][#b]
end

--- The known name `name` is most likely a misspelling of, or nil.
function M.closest(name, known)
  local best, best_d = nil, math.huge
  for _, candidate in ipairs(known) do
    local d = distance(name, candidate)
    if d < best_d then
      best, best_d = candidate, d
    end
  end
  return best_d <= math.max(2, math.floor(#name / 3)) and best or nil
end

local function unknown(problems, where, key, allowed)
  local known = vim.tbl_keys(allowed)
  if where == '' then
    vim.list_extend(known, vim.tbl_keys(NIL_DEFAULTS))
  end
  table.sort(known)
  local close = M.closest(tostring(key), known)
  table.insert(problems, ('unknown option %s%s%s'):format(where, tostring(key),
    close and (' (did you mean %s%s?)'):format(where, close) or ''))
end

--- The user's options without the unknown ones and without values of the wrong type, each
--- named in `problems`.
local function checked(opts, allowed, where, problems)
  local out = {}
  for k, v in pairs(opts) do
    local default = allowed[k]
    local expected = default ~= nil and type(default) or (where == '' and NIL_DEFAULTS[k])
    if not expected then
      unknown(problems, where, k, allowed)
    elseif type(v) ~= expected and not (ALSO[k] and ALSO[k][type(v)]) and not (where == 'keys.' and v == false) then
      table.insert(problems, ('option %s%s must be a %s, not a %s'):format(where, k, expected, type(v)))
    else
      out[k] = v
    end
  end
  return out
end

--- Merge user options over the defaults. Returns the options and a list of problems, one line
--- each: an unknown option (with the known one it is closest to) or a bad value is left out,
--- so the default stands for it and the rest of the user's config still runs.
function M.resolve(opts)
  local problems = {}
  if type(opts) ~= 'table' then
    if opts ~= nil then
      table.insert(problems, ('setup() takes a table of options, not a %s'):format(type(opts)))
    end
    opts = {}
  end
  opts = checked(opts, M.defaults, '', problems)
  if opts.keys then
    opts.keys = checked(opts.keys, M.defaults.keys, 'keys.', problems)
  end
  local suffix = opts.max_line_suffix
  if suffix ~= nil and suffix ~= false and (type(suffix) ~= 'number' or suffix < 0 or suffix ~= math.floor(suffix)) then
    table.insert(problems, ('max_line_suffix must be a whole number >= 0 or false, not %s'):format(vim.inspect(suffix)))
    opts.max_line_suffix = nil
  end
  if opts.renderer ~= nil and not vim.tbl_contains({ 'auto', 'builtin', 'specfill' }, opts.renderer) then
    table.insert(problems, ("renderer must be 'auto', 'builtin' or 'specfill', not %s"):format(vim.inspect(opts.renderer)))
    opts.renderer = nil
  end
  local merged = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts)
  -- settings and cmd are values, not defaults to merge into: take the user's as is.
  if opts.settings then
    merged.settings = vim.deepcopy(opts.settings)
  end
  if opts.cmd then
    merged.cmd = vim.deepcopy(opts.cmd)
  end
  return merged, problems
end

return M
