"""How a person types a block of a source file, as a list of editor changes with the gaps
between them, and the points where an editor asks for an inline completion.

The replay opens a file with one block of lines missing and types that block back in. Where
the block is, `where`:
  middle  a function in the middle of the file: the code below it is the FIM suffix, and the
          cursor always has code on its right (the next line's code), so answers are one line;
  end     the file's last lines (a whole top-level function or two): new code written at the
          end of a file, nothing after the cursor, so answers may be several lines.
Characters come one at a time; a newline arrives together with the next line's indentation
(the editor's auto-indent). An editor requests a completion once typing pauses for longer than
its debounce: after most newlines, at some word ends, and at the odd mid-word hesitation.
Everything is drawn from a seeded generator, so every configuration replays the same keys.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

# Gaps between keystrokes, in milliseconds (a fluent programmer: ~100 ms per character).
KEY_GAP_MS = (50, 140)          # within a word
WORD_PAUSE_MS = (250, 900)      # a pause after finishing a word...
WORD_PAUSE_P = 0.35             # ...this often
LINE_PAUSE_MS = (300, 1500)     # after a newline: thinking about the next line
HESITATION_MS = (200, 600)      # a mid-word hesitation...
HESITATION_P = 0.03             # ...this often
EDITOR_DEBOUNCE_MS = 150        # an editor requests a completion after this much quiet

MIDDLE, END = "middle", "end"   # where the typed block is (module docstring)
PLACES = (MIDDLE, END)
TOP_LEVEL_STARTS = ("def ", "class ", "async def ", "@", "if __name__")


@dataclass
class Keystroke:
    line: int          # where the text is inserted (0-based line, python codepoint column)
    character: int
    text: str          # one character, or a newline plus the next line's indentation
    gap_ms: float      # quiet time after this keystroke, before the next one
    request: str = ""  # "" (no request) or why the editor asks: newline | word | pause


@dataclass
class TypingScript:
    name: str
    initial_text: str          # the document as opened: the file without the typed block
    keystrokes: list[Keystroke]
    first_line: int            # the typed block's first line in the file
    typed_lines: int


def block_start(lines: list[str], typed_lines: int) -> int:
    """The first `def`/`class` line at or after a third of the file (a function written in
    the middle of existing code), else a third of the way in."""
    start = len(lines) // 3
    limit = max(0, len(lines) - typed_lines)
    for i in range(start, len(lines)):
        if lines[i].lstrip().startswith(("def ", "class ", "async def ")) and i <= limit:
            return i
    return min(start, limit)


def end_block_start(lines: list[str], typed_lines: int) -> int:
    """Where the file's last lines to type begin: the top-level definition (decorators included)
    or `if __name__` block that starts nearest the last `typed_lines` lines, so whole functions
    are typed, as long as that types at most twice `typed_lines`; else just the last lines (a
    long function: typing its tail is still writing at the end of the file)."""
    start = max(0, len(lines) - typed_lines)
    starts = [i for i in range(max(0, len(lines) - 2 * typed_lines), len(lines))
              if lines[i].startswith(TOP_LEVEL_STARTS) and not (i > 0 and lines[i - 1].startswith("@"))]
    return min(starts, key=lambda i: (abs(i - start), i)) if starts else start


def is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def typing_script(name: str, text: str, typed_lines: int = 12, seed: int = 0,
                  editor_debounce_ms: float = EDITOR_DEBOUNCE_MS, where: str = MIDDLE) -> TypingScript:
    if where not in PLACES:
        raise ValueError(f"where: {where!r} is not one of {', '.join(PLACES)}")
    rng = random.Random(f"{seed}:{name}")
    lines = text.splitlines(keepends=True)
    if not lines:
        return TypingScript(name, "", [], 0, 0)
    if where == MIDDLE:
        first = block_start(lines, typed_lines)
        block = lines[first:first + typed_lines]
    else:
        first = end_block_start(lines, typed_lines)
        block = lines[first:]
    initial = "".join(lines[:first] + lines[first + len(block):])

    keys: list[Keystroke] = []
    line, col = first, 0
    typed = "".join(block)
    i = 0
    while i < len(typed):
        c = typed[i]
        if c == "\n":
            # newline + the next line's indentation in one change (the editor's auto-indent)
            j = i + 1
            while j < len(typed) and typed[j] in " \t":
                j += 1
            chunk = typed[i:j]
            keys.append(Keystroke(line, col, chunk, rng.uniform(*LINE_PAUSE_MS)))
            line, col = line + 1, j - i - 1
            i = j
            continue
        gap = rng.uniform(*KEY_GAP_MS)
        word_end = not is_word_char(c) and i > 0 and is_word_char(typed[i - 1])
        if word_end and rng.random() < WORD_PAUSE_P:
            gap = rng.uniform(*WORD_PAUSE_MS)
        elif is_word_char(c) and rng.random() < HESITATION_P:
            gap = rng.uniform(*HESITATION_MS)
        keys.append(Keystroke(line, col, c, gap))
        col += 1
        i += 1
    for k in keys:
        if k.gap_ms >= editor_debounce_ms:
            k.request = "newline" if "\n" in k.text else ("word" if not is_word_char(k.text) else "pause")
    return TypingScript(name, initial, keys, first, len(block))


def apply(lines: list[str], key: Keystroke) -> list[str]:
    """The document's lines (without line ends) after inserting `key.text`."""
    row = lines[key.line]
    new = (row[:key.character] + key.text + row[key.character:]).split("\n")
    return lines[:key.line] + new + lines[key.line + 1:]


def cursor_after(key: Keystroke) -> tuple[int, int]:
    parts = key.text.split("\n")
    if len(parts) == 1:
        return key.line, key.character + len(key.text)
    return key.line + len(parts) - 1, len(parts[-1])


def utf16_column(row: str, character: int) -> int:
    return len(row[:character].encode("utf-16-le")) // 2
