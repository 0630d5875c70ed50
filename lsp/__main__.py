"""`python -m lsp [--tcp HOST:PORT] [--log-level LEVEL] [--option NAME=VALUE ...]`: run the language server."""
from lsp.cli import serve_main

if __name__ == "__main__":
    raise SystemExit(serve_main())
