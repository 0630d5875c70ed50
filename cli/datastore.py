"""`specfill datastore`: a datastore of a target's own answers on your code, for prompt lookup.

torch is imported inside `datastore_main` (through training.datastore), so that importing the
command line loads no torch (see cli/main.py)."""
from __future__ import annotations


def datastore_main(argv: list[str]) -> int:
    from training.datastore import main

    return main(argv, prog="specfill datastore")
