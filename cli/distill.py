"""`specfill distill`: distill a draft model on its target's own completions of your code.

torch is imported inside `distill_main` (through training.distill), so that importing the
command line loads no torch (see cli/main.py)."""
from __future__ import annotations


def distill_main(argv: list[str]) -> int:
    from training.distill import main

    return main(argv, prog="specfill distill")
