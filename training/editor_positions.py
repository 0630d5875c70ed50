"""Where an editor asks for a completion, cut from real files: the prompts distillation trains
and evaluates on.

Kinds of position (each a (prefix, suffix) pair of text around the cursor):
* ``eol``: the cursor at the end of a code line, the rest of the file after it;
* ``fresh``: the cursor on a freshly indented line, where the next code line was about to be
  written (that line removed, its indentation kept);
* ``mid``: the cursor after a word inside a code line (the rest of the line is the suffix);
* ``l2r``: a fresh indented line at the end of what is written so far (no suffix).

Files are split into training and held-out files by a seeded hash of their path, so the same
folder always gives the same split.
"""
from __future__ import annotations

import hashlib
import os
import random
import re
from dataclasses import dataclass

SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox",
             ".mypy_cache", ".pytest_cache", "build", "dist", "site-packages"}
MIN_BYTES, MAX_BYTES, MAX_LINE_CHARS = 300, 200_000, 400
PREFIX_CHARS = 1500      # evaluation: context before the cursor (cut at a line start), about the
SUFFIX_CHARS = 500       # window the trained default target (512 tokens) reads; after the cursor likewise
TRAIN_WINDOW = (500, 200)  # training prompts: shorter (the target's prefill is most of the data's cost)
KINDS = ("eol", "fresh", "mid", "l2r")


@dataclass(frozen=True)
class SourceText:
    path: str        # relative to the folder it came from
    text: str


@dataclass(frozen=True)
class Position:
    kind: str        # one of KINDS
    path: str
    prefix: str
    suffix: str


def read_sources(folders: list[str], extensions: tuple[str, ...] = (".py",)) -> list[SourceText]:
    """Source files under the folders (sorted; no hidden, vendored, build or cache folders; no
    tiny, huge, binary or minified files)."""
    found = []
    for folder in folders:
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"no such folder: {folder}")
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
            for name in sorted(filenames):
                if not name.endswith(extensions):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read()
                except (OSError, UnicodeDecodeError):
                    continue
                if usable(text):
                    found.append(SourceText(os.path.relpath(path, folder), text.replace("\r\n", "\n")))
    return found


def training_and_held_out(code: list[str], eval_code: list[str] | None, extensions: tuple[str, ...],
                          held_out: float, seed: int) -> tuple[list[SourceText], list[SourceText]]:
    """The training and the held-out files of a command's --code / --eval-code (a seeded split of
    --code when no --eval-code is given; a held-out text is never trained on, wherever it lies).
    ValueError with a one-line message when that leaves nothing to use."""
    try:
        files = read_sources(code, extensions)
        held = read_sources(eval_code, extensions) if eval_code else None
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    if held is None:
        if len(files) < 2:
            raise ValueError(f"need at least 2 usable source files under --code, found {len(files)}")
        train, held = split_files(files, held_out, seed)
    else:
        held_texts = {f.text for f in held}
        train = [f for f in files if f.text not in held_texts]
    if not train or not held:
        raise ValueError("no training or no held-out files")
    return train, held


def usable(text: str) -> bool:
    n = len(text.encode())
    if not MIN_BYTES <= n <= MAX_BYTES or "\0" in text:
        return False
    return max(map(len, text.splitlines() or [""])) <= MAX_LINE_CHARS


def split_files(files: list[SourceText], held_out_share: float, seed: int) -> tuple[list, list]:
    """(training, held-out): a seeded hash of the path decides; at least one file each."""
    def rank(f: SourceText) -> int:
        return int.from_bytes(hashlib.blake2b(f"{seed}\0{f.path}".encode(), digest_size=8).digest(), "big")
    ordered = sorted(files, key=rank)
    n_held = min(max(1, round(len(ordered) * held_out_share)), len(ordered) - 1)
    return ordered[n_held:], ordered[:n_held]


def _window(text: str, cursor: int, end: int, window: tuple[int, int]) -> tuple[str, str]:
    """Prefix before `cursor` and suffix from `end`, cut at line boundaries to the window's chars."""
    prefix_chars, suffix_chars = window
    prefix, suffix = text[:cursor], text[end:]
    if len(prefix) > prefix_chars:
        cut = prefix.find("\n", len(prefix) - prefix_chars)
        prefix = prefix[cut + 1:] if cut >= 0 else prefix[-prefix_chars:]
    if len(suffix) > suffix_chars:
        cut = suffix.rfind("\n", 0, suffix_chars)
        suffix = suffix[:cut + 1] if cut > 0 else suffix[:suffix_chars]
    return prefix, suffix


def code_lines(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of code lines: not blank, not a comment or docstring fence, not line 0."""
    out, start = [], 0
    for i, line in enumerate(text.split("\n")):
        stripped = line.strip()
        if i > 0 and stripped and not stripped.startswith(("#", '"""', "'''")):
            out.append((start, start + len(line)))
        start += len(line) + 1
    return out


def position_at(f: SourceText, kind: str, line: tuple[int, int], rng: random.Random,
                window: tuple[int, int] = (PREFIX_CHARS, SUFFIX_CHARS)) -> Position | None:
    """One position of `kind` at a code line of f (None where that kind does not fit the line)."""
    text, (start, end) = f.text, line
    body = text[start:end]
    indent = body[:len(body) - len(body.lstrip())]
    if kind == "eol":
        prefix, suffix = _window(text, end, end, window)
    elif kind == "fresh":
        prefix, suffix = _window(text, start + len(indent), end, window)
    elif kind == "l2r":
        prefix, suffix = _window(text, start + len(indent), len(text), window)
        suffix = ""
    else:
        words = [m.end() for m in re.finditer(r"\w+", body) if len(indent) < m.end() < len(body)]
        if not words:
            return None
        cut = rng.choice(words)
        prefix, suffix = _window(text, start + cut, start + cut, window)
    return Position(kind, f.path, prefix, suffix)


def spread_positions(f: SourceText, kind: str, n: int) -> list[Position]:
    """n positions of one kind spread evenly over the code lines of f (deterministic)."""
    lines = code_lines(f.text)
    step = max(1, len(lines) // max(n, 1))
    rng = random.Random(f.path)
    out = []
    for line in lines[step // 2::step]:
        p = position_at(f, kind, line, rng)
        if p is not None:
            out.append(p)
        if len(out) == n:
            break
    return out


def random_positions(files: list[SourceText], weights: dict[str, float], seed: int):
    """Endless seeded positions over the files, kinds drawn by weight (training prompts)."""
    rng = random.Random(seed)
    kinds, w = zip(*weights.items())
    lines = {f.path: code_lines(f.text) for f in files}
    files = [f for f in files if lines[f.path]]
    if not files:
        raise ValueError("no code lines in the training files")
    while True:
        f = rng.choice(files)
        p = position_at(f, rng.choices(kinds, w)[0], rng.choice(lines[f.path]), rng, TRAIN_WINDOW)
        if p is not None:
            yield p
