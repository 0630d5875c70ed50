"""The user's recent edits, as the edit model's prompt shows them (completion/next_edit.py).

The server records every didChange as it arrives, on its event loop, so recording costs a few
comparisons and no copy of any text: a group of edits keeps the document's text before its first
change and after its latest (Python strings are immutable: two references). Changes within
GROUP_GAP_LINES lines of a group's lines extend it; a change elsewhere, or in another document,
starts the next group. The lines that changed are found only when a prompt is built, on the
worker thread (`line_edit`): the common head and tail lines of the two texts are trimmed and what
is left is the edit.
"""
from __future__ import annotations

from dataclasses import dataclass

from completion.context import to_lf

MAX_GROUPS = 8          # groups kept, over all documents (the oldest goes first)
GROUP_GAP_LINES = 8     # a change this many lines away from a group's lines starts a new group
CONTEXT_LINES = 3       # unchanged lines shown around an edit in a unified diff
MAX_EDIT_LINES = 40     # lines shown of each side of one edit (a paste is cut)


@dataclass
class EditGroup:
    """Changes of one document close to each other, in a row."""
    key: str           # the document (lsp.documents.document_key)
    path: str          # as the prompt names it
    before: str        # the text before the group's first change
    after: str         # the text after its latest change
    first: int         # the lines its changes touched, in `after`'s lines
    last: int


@dataclass(frozen=True)
class Edit:
    """One group as the lines it changed: `old` lines from `line` on became `new` (LF, no line
    ends), with up to CONTEXT_LINES unchanged lines on each side."""
    path: str
    line: int                      # 0-based, the same in the text before and after
    old: tuple[str, ...]
    new: tuple[str, ...]
    above: tuple[str, ...] = ()
    below: tuple[str, ...] = ()

    def unified_diff(self) -> str:
        """The edit as one unified-diff hunk (`@@ -a,b +c,d @@`, then the lines), each line
        ending in a line break; long sides are cut at MAX_EDIT_LINES lines."""
        old, new = self.old[:MAX_EDIT_LINES], self.new[:MAX_EDIT_LINES]
        start = self.line - len(self.above) + 1
        n_old = len(self.above) + len(old) + len(self.below)
        n_new = len(self.above) + len(new) + len(self.below)
        head = f"@@ -{_span(start, n_old)} +{_span(start, n_new)} @@\n"
        body = ([f" {x}" for x in self.above] + [f"-{x}" for x in old] + [f"+{x}" for x in new]
                + [f" {x}" for x in self.below])
        return head + "".join(x + "\n" for x in body)


def _span(start: int, count: int) -> str:
    """A hunk side's `start,count` (an empty side starts at the line before it, as diff writes it)."""
    return f"{start if count else start - 1},{count}"


def common_ends(a, b) -> tuple[int, int]:
    """How many leading items and, of the rest, trailing items the sequences `a` and `b` (lines,
    or characters) share."""
    head, limit = 0, min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def line_edit(path: str, before: str, after: str, context: int = CONTEXT_LINES) -> Edit | None:
    """The lines that differ between `before` and `after` (their common head and tail lines
    trimmed), or None when the texts have the same lines."""
    a, b = _lines(before), _lines(after)
    if a == b:
        return None
    head, tail = common_ends(a, b)
    return Edit(path, head, tuple(a[head:len(a) - tail]), tuple(b[head:len(b) - tail]),
                tuple(a[max(0, head - context):head]), tuple(a[len(a) - tail:len(a) - tail + context]))


def _lines(text: str) -> list[str]:
    """The text's lines (LF; no empty line after a final line break)."""
    lines = to_lf(text).split("\n")
    return lines[:-1] if lines[-1] == "" else lines


class EditHistory:
    """The last MAX_GROUPS groups of edits, oldest first."""

    def __init__(self, max_groups: int = MAX_GROUPS, gap_lines: int = GROUP_GAP_LINES):
        self.groups: list[EditGroup] = []
        self.max_groups, self.gap_lines = max_groups, gap_lines

    def changed(self, key: str, path: str, before: str, after: str, lines: tuple[int, int, int] | None) -> None:
        """Document `key` went from `before` to `after`. `lines`: (first line, last line) the
        change replaced in `before` and the last line of its new text in `after`; None for a
        whole-text change."""
        if before is after:
            return
        last = self.groups[-1] if self.groups else None
        if last is not None and last.key == key and last.after is before and self._near(last, lines):
            last.after = after
            if lines is not None:
                start, end, new_end = lines
                shift = new_end - end
                last.first = min(last.first, start)
                last.last = max(last.last + shift if last.last >= end else last.last, new_end)
            return
        first, end = (lines[0], lines[2]) if lines is not None else (0, 0)
        self.groups.append(EditGroup(key, path, before, after, first, end))
        del self.groups[:-self.max_groups]

    def _near(self, group: EditGroup, lines: tuple[int, int, int] | None) -> bool:
        if lines is None:
            return True
        start, end, _ = lines
        return start <= group.last + self.gap_lines and end >= group.first - self.gap_lines

    def forget(self, key: str) -> None:
        """The document closed: its edits go."""
        self.groups = [g for g in self.groups if g.key != key]

    def edits(self, limit: int | None = None) -> list[Edit]:
        """The groups' edits, newest last (the newest `limit`); groups undone to their start are
        left out."""
        out = []
        for group in reversed(self.groups):
            edit = line_edit(group.path, group.before, group.after)
            if edit is not None:
                out.append(edit)
            if limit is not None and len(out) >= limit:
                break
        return out[::-1]

    def latest(self, key: str) -> EditGroup | None:
        """The newest group of document `key` (None: it has none)."""
        return next((g for g in reversed(self.groups) if g.key == key), None)

    def __len__(self) -> int:
        return len(self.groups)
