"""Turn the model's raw middle into ghost text worth showing (or None).

Rules, from what users complain about most:
* never repeat what is already after the cursor (rest of the line, the next lines);
* code to the right of the cursor -> one line; at the end of a line -> several lines, stopped at
  a line that dedents below the cursor's block, at a blank line after a complete block, at a
  line the model repeats a third time in a row, or at `max_lines`;
* rest of line only auto-inserted closers (``)`` ``]`` ``"`` ...) that the completion closes
  itself -> replace them (a range) instead of duplicating them;
* empty or whitespace-only -> None.
Works on LF text; `with_eol` puts the document's line ending (CRLF) back for the editor.
"""
from __future__ import annotations

from dataclasses import dataclass

from completion.context import Cursor

OPENERS = {"(": ")", "[": "]", "{": "}"}
CLOSERS = {")": "(", "]": "[", "}": "{"}
QUOTES = "\"'`"
AUTO_CLOSERS = set(CLOSERS) | set(QUOTES)
BLOCK_OPENER_ENDINGS = (":", "{", "(", "[", ",", "\\", "=>", "->", "=")


@dataclass(frozen=True)
class Cleaned:
    text: str            # ghost text, LF line endings
    replace_chars: int   # characters after the cursor (on its line) that the text replaces


def indent_width(line: str, tab_size: int = 4) -> int:
    ws = line[:len(line) - len(line.lstrip(" \t"))]
    return len(ws.expandtabs(tab_size))


def is_closers_only(rest: str) -> bool:
    s = rest.strip()
    return bool(s) and all(ch in AUTO_CLOSERS or ch.isspace() for ch in s)


def clean_completion(middle: str, cur: Cursor, multiline: str = "auto", max_lines: int = 8,
                     tab_size: int = 4) -> Cleaned | None:
    text = middle.replace("\r\n", "\n").replace("\r", "\n")
    rest = cur.rest_of_line
    closers = is_closers_only(rest)
    code_right = bool(rest.strip()) and not closers
    single = multiline == "never" or (multiline == "auto" and code_right)

    if single:
        text = text.split("\n", 1)[0]
        if code_right:
            text = _drop_repeated_rest(text, rest)
    else:
        text = _cut_lines(text, cur, max_lines, tab_size)
        if text is None:
            return None

    replace = 0
    if closers:
        text, replace = _closer_range(text, rest)
    # Trailing blanks are noise at the end of a line, but may be wanted before code on the right.
    text = text.rstrip("\n") if code_right and "\n" not in text else text.rstrip()
    if not text.strip():
        return None
    return Cleaned(text=text, replace_chars=replace)


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


def _next_nonblank(cur: Cursor, skip: int = 0) -> str | None:
    for ln in cur.lines[cur.line + 1:]:
        if ln.strip():
            if skip == 0:
                return ln
            skip -= 1
    return None


def _cut_lines(text: str, cur: Cursor, max_lines: int, tab_size: int) -> str | None:
    lines = text.split("\n")
    prefix = cur.line_prefix
    block = indent_width(prefix if prefix.strip() else prefix + "x", tab_size)
    nxt = _next_nonblank(cur)
    first_full = (prefix + lines[0]).strip()
    if nxt is not None and lines[0].strip() and first_full == nxt.strip():
        return None                     # completing the line into a copy of the next line
    kept = [lines[0]]
    for ln in lines[1:]:
        if len(kept) >= max_lines:
            break
        if not ln.strip():
            if _complete_block(prefix, kept):
                break
            kept.append(ln)
            continue
        if indent_width(ln, tab_size) < block:
            break                       # left the cursor's block
        if nxt is not None and ln.strip() == nxt.strip():
            break                       # the model started repeating the code below
        if len(kept) >= 2 and ln == kept[-1] == kept[-2]:
            kept.pop()                  # a model stuck in a loop: keep one copy of the line
            break
        kept.append(ln)
    return "\n".join(kept)


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
