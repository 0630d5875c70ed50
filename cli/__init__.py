"""The `specfill` command line, above every layer: it is the one package that may import
engine, completion, lsp and bench. Importing it loads no torch, so that `specfill serve`
can redirect stdout before anything else writes to it."""
