"""Lines as LSP clients count them: they end at \\n, \\r\\n or \\r only (str.splitlines also
splits at \\x0c, \\x1c, \\u2028 and friends, which editors do not count as line breaks). No
pygls here: `specfill complete` checks a FILE:LINE:COL with it before anything slow loads."""
from __future__ import annotations

import re

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> tuple[str, ...]:
    """Lines with their line endings kept; no entry for the empty text after a final newline."""
    return tuple(_LINE.findall(text))
