"""Ghost text that continues the item selected in the editor's completion menu.

VS Code sends it as LSP 3.18 `InlineCompletionContext.selectedCompletionInfo` (the item's text
and the range it would replace) while its suggest widget is open, and shows an inline item
beside the widget only when that item starts with the selected text and its range starts where
the selected item's does (it may end later). So the prompt is built as if the selected text
already replaced its range, and the answer is that text followed by the model's continuation,
replacing the same range. The completion cache keys on the prefix, which then holds the
selected text: another selected item is another entry, and accepting the item finds its answer.

Positions here are (line, codepoint column); `lines` keep their line endings, split at \\n,
\\r\\n and \\r only, as the language server's documents are.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class Selected:
    """The completion-menu item: the range it replaces and the text it puts there."""
    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass(frozen=True)
class WithSelected:
    """The document as if the selected item were accepted, and the cursor right after it."""
    text: str
    cursor: tuple[int, int]


def _offset(lines: Sequence[str], line: int, character: int) -> int:
    """Offset in the joined text; the column is clamped to its line's content."""
    before = sum(len(x) for x in lines[:line])
    content = lines[line].rstrip("\r\n") if line < len(lines) else ""
    return before + min(character, len(content))


def apply(lines: Sequence[str], selected: Selected) -> Optional[WithSelected]:
    """The document with `selected.text` in place of its range; None when the range is not
    in the document or ends before it starts."""
    (sl, sc), (el, ec) = selected.start, selected.end
    if min(sl, sc, el, ec) < 0 or (el, ec) < (sl, sc) or el > len(lines):
        return None
    text = "".join(lines)
    start, end = _offset(lines, sl, sc), _offset(lines, el, ec)
    if end < start:   # both on one line, the start's column clamped past the end's
        return None
    breaks = _BREAK.findall(selected.text)
    if breaks:
        last_line = _BREAK.split(selected.text)[-1]
        cursor = (sl + len(breaks), len(last_line))
    else:
        cursor = (sl, (start - _offset(lines, sl, 0)) + len(selected.text))
    return WithSelected(text[:start] + selected.text + text[end:], cursor)


def answer(selected: Selected, continuation: str, replace_chars: int) -> tuple[str, tuple[int, int]]:
    """The item for the real document: its text (the selected text, then what the model wrote
    after it) and the end of the range it replaces, which starts at `selected.start`. The range
    ends at the selected item's end, or past the closers the continuation replaces (the text
    after the selected item is the same in both documents)."""
    line, character = selected.end
    return selected.text + continuation, (line, character + replace_chars)
