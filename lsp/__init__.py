"""specfill language server (pygls). Nothing heavy is imported here: `python -m lsp` must be
able to redirect stdout before torch loads."""
