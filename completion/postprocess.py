"""Turn the model's raw middle into ghost text worth showing (or None).

Rules, from what users complain about most:
* never repeat what is already after the cursor (rest of the line, the next lines);
* code to the right of the cursor -> one line; at the end of a line -> several lines, stopped at
  a line that dedents below the cursor's block, at a blank line after a complete block, at a
  line that repeats the code below, when the model repeats a block of lines, or at `max_lines`;
* the cursor after indentation -> the model's own indentation of its first line is not doubled;
The length of an answer is decided in one place, `find_cut`, which the engine also calls while
decoding, so it stops the moment the answer is decided and the final cut cannot disagree;
* rest of line only auto-inserted closers (``)`` ``]`` ``"`` ...) that the completion closes
  itself -> replace them (a range) instead of duplicating them;
* empty or whitespace-only -> None (`clean_answer` says which rule left nothing).
Works on LF text; `with_eol` puts the document's line ending (CRLF) back for the editor.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from completion.context import Cursor, to_lf

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {")": "(", "]": "[", "}": "{"}
QUOTES = "\"'`"
AUTO_CLOSERS = set(CLOSERS) | set(QUOTES)
BLOCK_OPENER_ENDINGS = (":", "{", "(", "[", ",", "\\", "=>", "->", "=")


@dataclass(frozen=True)
class Cleaned:
    text: str            # ghost text, LF line endings
    replace_chars: int   # characters after the cursor (on its line) that the text replaces
    source_chars: int    # characters of the model's middle the text was cut from
    cut_by: str = "end"  # what ended it: a Cut's reason, or control_char (a control character)


@dataclass(frozen=True)
class Cut:
    """Where the shown answer ends in the model's raw middle (LF text)."""
    end: int          # keep text[:end]
    decided_at: int   # how much text it took to know; no later text can change the cut
    reason: str       # the rule that cut: newline, max_lines, dedent, blank_line, suffix_repeat, loop, end


CONTROL_CHAR = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
LOOP_MAX_CYCLE = 4   # lines in the longest repeated block recognised as a loop


def indent_width(line: str, tab_size: int = 4) -> int:
    ws = line[:len(line) - len(line.lstrip(" \t"))]
    return len(ws.expandtabs(tab_size))


def is_closers_only(rest: str) -> bool:
    s = rest.strip()
    return bool(s) and all(ch in AUTO_CLOSERS or ch.isspace() for ch in s)


def is_single_line(cur: Cursor, multiline: str = "auto") -> bool:
    """One line when code (not just auto-closed brackets) stands right of the cursor."""
    rest = cur.rest_of_line
    return multiline == "never" or (multiline == "auto" and bool(rest.strip()) and not is_closers_only(rest))


def find_cut(text: str, cur: Cursor, multiline: str = "auto", max_lines: int = 8, tab_size: int = 4,
             final: bool = True) -> Cut | None:
    """The one place the length of an answer is decided, used while decoding and for the final cut.

    While decoding (`final=False`) the last line of `text` may still grow, so only rules that no
    later text can overturn fire, and None means "not decided yet". With `final=True` the text is
    all there is and a Cut is always returned. A Cut found early is the Cut of every longer text
    that starts with text[:decided_at] (tested as a property)."""
    return AnswerCut(cur, multiline, max_lines, tab_size)(text, final)


class AnswerCut:
    """`find_cut` for one cursor, asked again and again while an answer is decoded (after every
    round, of every draft): what the rules need from the cursor is worked out once, and the
    complete lines an earlier call scanned and kept are not scanned again (a draft's text and
    the answer so far share them). Each call answers as `find_cut` would (tested as a property)."""

    def __init__(self, cur: Cursor, multiline: str = "auto", max_lines: int = 8, tab_size: int = 4):
        self.single_line = is_single_line(cur, multiline)
        self.max_lines, self.tab_size = max_lines, tab_size
        self.prefix = prefix = cur.line_prefix
        self.block = indent_width(prefix if prefix.strip() else prefix + "x", tab_size)
        nxt = _next_nonblank(cur)
        self.next_code = nxt.strip() if nxt is not None else None
        # the lines the last call kept that a newline ended (no later text changes them), and
        # the end offset of each in its text
        self._kept: list[str] = []
        self._ends: list[int] = []

    def __call__(self, text: str, final: bool = True) -> Cut | None:
        if self.single_line:
            nl = text.find("\n")
            if nl >= 0:
                return Cut(nl, nl + 1, "newline")
            return Cut(len(text), len(text), "end") if final else None
        lines = text.split("\n")
        cut, kept, ends = self._cut_lines(lines, final)
        ended = min(len(kept), len(lines) - 1)    # (a final text's last line has no newline)
        self._kept, self._ends = kept[:ended], ends[:ended]
        if cut is None and final:
            return Cut(len(text), len(text), "end")
        return cut

    def _cut_lines(self, lines: list[str], final: bool) -> tuple[Cut | None, list[str], list[int]]:
        """Multi-line answers end at the first of: the `max_lines`-th line is complete; a line
        dedents below the cursor's block; a blank line follows a complete block; a line repeats the
        next line of code after the cursor; the model repeats a block of lines (a loop). Returns
        that cut (None: not decided yet, or none before a final text's end), the lines kept and
        their end offsets."""
        complete = len(lines) if final else len(lines) - 1   # the last line may still grow
        if complete == 0:
            return None, [], []
        prefix, nxt, tab_size = self.prefix, self.next_code, self.tab_size
        # the lines the last call kept, where this text has them too, are kept again unscanned
        known, n = self._kept, 0
        while n < len(known) and n < complete and lines[n] == known[n]:
            n += 1
        if n:
            kept, ends = lines[:n], self._ends[:n]
        else:
            first = lines[0]
            if nxt is not None and first.strip() and (prefix + first).strip() == nxt:
                # completing the line into a copy of the next line
                return Cut(0, len(first) + 1, "suffix_repeat"), [], []
            kept, ends, n = [first], [len(first)], 1
        for i in range(n, len(lines)):
            ln = lines[i]
            start = ends[-1] + 1            # offset of this line in text
            line_end = start + len(ln) + (i < len(lines) - 1)
            keep = ends[-1]
            if len(kept) >= self.max_lines:
                return Cut(keep, start, "max_lines"), kept, ends
            body = ln.lstrip(" \t")
            if body and indent_width(ln, tab_size) < self.block:
                # Known as soon as the line's first visible character is: no need to wait for its end.
                return Cut(keep, start + len(ln) - len(body) + 1, "dedent"), kept, ends
            if i >= complete:
                return None, kept, ends
            if not body:
                if _complete_block(prefix, kept):
                    return Cut(keep, line_end, "blank_line"), kept, ends
            elif nxt is not None and body.rstrip() == nxt:
                # the model started repeating the code below
                return Cut(keep, line_end, "suffix_repeat"), kept, ends
            else:
                cycle = _repeated_cycle(kept + [ln])
                if cycle:
                    return Cut(ends[-cycle], line_end, "loop"), kept, ends   # keep one copy of the repeated block
            kept.append(ln)
            ends.append(start + len(ln))
        return None, kept, ends


def clean_completion(middle: str, cur: Cursor, multiline: str = "auto", max_lines: int = 8,
                     tab_size: int = 4) -> Cleaned | None:
    """The ghost text of the model's `middle` at `cur`, or None when nothing is worth showing."""
    cleaned = clean_answer(middle, cur, multiline, max_lines, tab_size)
    return cleaned if cleaned.text else None


def clean_answer(middle: str, cur: Cursor, multiline: str = "auto", max_lines: int = 8,
                 tab_size: int = 4) -> Cleaned:
    """`clean_completion`, also when nothing is left: then the text is empty, and `cut_by` and
    `empty_reason` say why."""
    text = to_lf(middle)
    # A control character (but tab and newline) is never code anyone wants typed in, and editors
    # draw it as ^K and the like: the answer ends before it (a small model sampled at
    # temperature 1 writes one now and then).
    control = CONTROL_CHAR.search(text)
    if control is not None:
        text = text[:control.start()]
    rest = cur.rest_of_line
    closers = is_closers_only(rest)
    code_right = bool(rest.strip()) and not closers
    cut = find_cut(text, cur, multiline, max_lines, tab_size)
    cut_by = "control_char" if control is not None and cut.reason == "end" else cut.reason
    source_chars = cut.end
    text = text[:source_chars]
    if code_right and is_single_line(cur, multiline):
        text = _drop_repeated_rest(text, rest)
    text = _drop_doubled_indent(text, cur.line_prefix)

    replace = 0
    if closers:
        text, replace = _closer_range(text, rest)
    # Trailing blanks are noise at the end of a line, but may be wanted before code on the right.
    text = text.rstrip("\n") if code_right and "\n" not in text else text.rstrip()
    if not text.strip():
        text = ""
    return Cleaned(text=text, replace_chars=replace if text else 0, source_chars=source_chars, cut_by=cut_by)


CUT_WORDS = {"newline": "the end of its first line (a one-line answer)", "dedent": "a line that leaves the block",
             "blank_line": "a blank line", "suffix_repeat": "a line that repeats the code below",
             "loop": "a repeated block of lines", "max_lines": "maxLines", "control_char": "a control character"}


def empty_reason(middle: str, cleaned: Cleaned) -> str:
    """Why an answer with nothing to show has nothing: one line for `specfill.lastCompletion`,
    `specfill complete --json` and the editors' stats views."""
    kept = to_lf(middle)[:cleaned.source_chars]
    if not kept.strip() and cleaned.cut_by in CUT_WORDS:
        return f"the answer ends at {CUT_WORDS[cleaned.cut_by]} before any text"
    if not middle.strip():
        return "the model wrote no text (it ended the answer at once, or wrote only blanks)"
    return "what was left repeats the text after the cursor, or is only indentation"


def with_eol(text: str, eol: str) -> str:
    """Ghost text in the document's line ending (CRLF files get CRLF)."""
    return text if eol == "\n" else text.replace("\n", eol)


def _drop_repeated_rest(text: str, rest: str) -> str:
    """Mid-line: the model often writes the rest of the line again; keep what comes before it."""
    tail = rest.strip()
    body = text.rstrip()
    if not tail or not body.endswith(tail):
        return text
    body = body[:-len(tail)]
    lead = rest[:len(rest) - len(rest.lstrip())]     # the document keeps its own spacing
    return body[:-len(lead)] if lead and body.endswith(lead) else body


def _drop_doubled_indent(text: str, prefix: str) -> str:
    """Cursor after indentation, and the model indents its first line again: the ghost text
    starts at the cursor, so that indentation would be doubled. Keep only what goes deeper
    than the cursor; indentation of another kind (tabs against spaces) is dropped."""
    if not prefix or prefix.strip():
        return text
    body = text.lstrip(" \t")
    own = text[:len(text) - len(body)]
    if not own:
        return text
    return own[len(prefix):] + body if own.startswith(prefix) else body


def _next_nonblank(cur: Cursor, skip: int = 0) -> str | None:
    for ln in cur.lines[cur.line + 1:]:
        if ln.strip():
            if skip == 0:
                return ln
            skip -= 1
    return None


def _repeated_cycle(lines: list[str]) -> int:
    """n when the last n lines repeat the n before them (n <= LOOP_MAX_CYCLE, not all blank):
    a model stuck in a loop. 0 when there is none."""
    for n in range(1, min(LOOP_MAX_CYCLE, len(lines) // 2) + 1):
        tail = lines[-n:]
        if tail == lines[-2 * n:-n] and any(ln.strip() for ln in tail):
            return n
    return 0


def _complete_block(prefix: str, kept: list[str]) -> bool:
    """True once the model wrote at least one full line and left no bracket open."""
    wrote_first = bool(kept[0].strip()) and not prefix.strip()   # the model wrote a whole line
    if not (wrote_first or any(k.strip() for k in kept[1:])):
        return False
    depth = 0
    for ch in prefix + "\n".join(kept):
        if ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            depth -= 1
    last = next(k for k in reversed(kept) if k.strip()).rstrip()
    return depth <= 0 and not last.endswith(BLOCK_OPENER_ENDINGS)


def _closer_range(text: str, rest: str) -> tuple[str, int]:
    """Match the brackets/quotes the completion closes but did not open against the
    auto-inserted closers after the cursor; those get replaced instead of duplicated."""
    expected = [(i, ch) for i, ch in enumerate(rest) if not ch.isspace()]
    j = 0
    stack: list[str] = []
    in_str = expected[0][1] if expected[0][1] in QUOTES else None
    outer_str = in_str is not None
    i = 0
    while i < len(text):
        ch = text[i]
        if in_str:
            if ch == "\\":
                i += 2
                continue
            if ch == "\n":
                in_str, outer_str = None, False
            elif ch == in_str:
                if outer_str:
                    if j < len(expected) and expected[j][1] == ch:
                        j += 1
                    else:
                        return text[:i], _end_of(expected, j)
                in_str, outer_str = None, False
        elif ch in QUOTES:
            in_str, outer_str = ch, False
        elif ch in OPENERS:
            stack.append(ch)
        elif ch in CLOSERS:
            if stack and stack[-1] == CLOSERS[ch]:
                stack.pop()
            elif j < len(expected) and expected[j][1] == ch:
                j += 1
            else:
                return text[:i], _end_of(expected, j)   # closes something that is not there
        i += 1
    return text, _end_of(expected, j)


def _end_of(expected: list[tuple[int, str]], j: int) -> int:
    return expected[j - 1][0] + 1 if j else 0
