"""Deterministic Python corpus from what is installed, plus the FIM example builder.

The corpus is the interpreter's standard library and site-packages: available wherever specfill
is installed, so the default pair can be rebuilt offline. Whole packages are held out for
evaluation (never trained on). Test folders, generated-looking files and near-duplicates
(transformers copies many modeling files) are dropped. Everything is ordered by seeded hashes
of relative paths, so the same installation and seed give the same corpus.
"""
from __future__ import annotations

import hashlib
import os
import random
import re
import site
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field

from completion.templates import load_template

# Packages never trained on; the evaluation split is drawn from them.
HELD_OUT_PACKAGES = ("pygls", "lsprotocol", "accelerate", "huggingface_hub", "pytest_lsp")
# Folder names that hold tests or vendored copies, skipped everywhere.
SKIP_DIRS = {"test", "tests", "testing", "idle_test", "__pycache__", "_vendor", "vendor",
             "site-packages", "ensurepip", "lib2to3", "turtledemo", "node_modules"}
MIN_BYTES, MAX_BYTES = 300, 120_000
MAX_LINE_CHARS = 400          # longer lines mean generated data tables, not code
NEAR_DUP_JACCARD = 0.6        # normalised-line-set similarity above which a file is a copy
MINHASH_PERMS, MINHASH_BANDS = 16, 8


@dataclass(frozen=True)
class SourceFile:
    relpath: str   # "<root>/pkg/mod.py", stable across machines with the same versions
    text: str


@dataclass
class Corpus:
    train: list[SourceFile] = field(default_factory=list)
    held_out: list[SourceFile] = field(default_factory=list)
    dropped_duplicates: int = 0

    def train_bytes(self) -> int:
        return sum(len(f.text.encode()) for f in self.train)


def source_roots() -> list[tuple[str, str]]:
    """(label, directory) pairs: stdlib first, then each site-packages dir."""
    roots = [("stdlib", sysconfig.get_paths()["stdlib"])]
    for sp in site.getsitepackages():
        roots.append(("site", sp))
    return roots


def _stable_hash(*parts: str) -> int:
    return int.from_bytes(hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest(), "big")


def _walk_python_files(root: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.endswith((".dist-info", ".egg-info")))
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("test_") and not name.endswith("_test.py"):
                found.append(os.path.join(dirpath, name))
    return found


def looks_like_code(text: str) -> bool:
    n = len(text.encode())
    if not MIN_BYTES <= n <= MAX_BYTES or "\0" in text:
        return False
    lines = text.splitlines()
    return bool(lines) and max(map(len, lines)) <= MAX_LINE_CHARS


def normalised_lines(text: str) -> set[str]:
    """Code lines without whitespace differences, comments or blanks."""
    out = set()
    for line in text.splitlines():
        line = " ".join(line.split())
        if line and not line.startswith("#"):
            out.add(line)
    return out


def minhash(lines: set[str], seed: int) -> tuple[int, ...]:
    hashes = [_stable_hash(str(seed), str(i), "") for i in range(MINHASH_PERMS)]
    mins = [1 << 64] * MINHASH_PERMS
    for line in lines:
        h = _stable_hash(line)
        for i, salt in enumerate(hashes):
            v = (h ^ salt) * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF
            if v < mins[i]:
                mins[i] = v
    return tuple(mins)


class NearDuplicateFilter:
    """MinHash-LSH candidates over normalised line sets, confirmed by exact Jaccard."""

    def __init__(self, seed: int, threshold: float = NEAR_DUP_JACCARD):
        self.seed, self.threshold = seed, threshold
        self.buckets: dict[tuple, list[int]] = {}
        self.kept: list[set[str]] = []

    def is_duplicate(self, text: str) -> bool:
        lines = normalised_lines(text)
        if not lines:
            return True
        sig = minhash(lines, self.seed)
        rows = MINHASH_PERMS // MINHASH_BANDS
        keys = [(b, sig[b * rows:(b + 1) * rows]) for b in range(MINHASH_BANDS)]
        candidates = {i for k in keys for i in self.buckets.get(k, ())}
        for i in candidates:
            other = self.kept[i]
            if len(lines & other) / len(lines | other) >= self.threshold:
                return True
        idx = len(self.kept)
        self.kept.append(lines)
        for k in keys:
            self.buckets.setdefault(k, []).append(idx)
        return False


def _top_package(relpath: str) -> str:
    parts = relpath.split("/")
    return parts[1].removesuffix(".py") if len(parts) > 1 else ""


def build_corpus(seed: int = 0, max_train_bytes: int = 40_000_000,
                 max_held_out_files: int = 400) -> Corpus:
    """Training files up to max_train_bytes (seeded order) and held-out files."""
    candidates: list[tuple[int, str, str]] = []
    seen_roots = set()
    for label, root in source_roots():
        root = os.path.realpath(root)
        if root in seen_roots or not os.path.isdir(root):
            continue
        seen_roots.add(root)
        for path in _walk_python_files(root):
            rel = label + "/" + os.path.relpath(path, root).replace(os.sep, "/")
            candidates.append((_stable_hash(str(seed), rel), rel, path))
    candidates.sort()

    corpus = Corpus()
    dedup = NearDuplicateFilter(seed)
    budget = max_train_bytes
    for _, rel, path in candidates:
        held = _top_package(rel) in HELD_OUT_PACKAGES
        if held and len(corpus.held_out) >= max_held_out_files:
            continue
        if not held and budget <= 0:
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, OSError):
            continue
        if not looks_like_code(text):
            continue
        if held:
            corpus.held_out.append(SourceFile(rel, text))
            continue
        if dedup.is_duplicate(text):
            corpus.dropped_duplicates += 1
            continue
        corpus.train.append(SourceFile(rel, text))
        budget -= len(text.encode())
    return corpus


# ---------------------------------------------------------------------------------------------
# Fill-in-the-middle examples. A span is (prefix, middle, suffix) with prefix+middle+suffix == text.
# Most spans are cut at line boundaries (whole lines, or the rest of a line from a word boundary),
# because that is where editors ask: a middle learned from random cuts starts mid-word.

_WORD_BOUNDARY = re.compile(r"(?<=[^\w])(?=\S)|(?<=\w)(?=[^\w])")


@dataclass(frozen=True)
class FimSpan:
    prefix: str
    middle: str
    suffix: str


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


def choose_fim_span(text: str, rng: random.Random) -> FimSpan:
    """One FIM split of text: 45% whole lines, 40% rest of line(s) from a word boundary,
    15% random characters (robustness). A middle never swallows the newline that ends it."""
    starts = [s for s in _line_starts(text) if s < len(text)]
    kind = rng.random()
    if kind < 0.85 and starts:
        first = rng.randrange(len(starts))
        n_lines = 1 if rng.random() < 0.6 else min(1 + int(rng.expovariate(0.3)), 12)
        last = min(first + n_lines - 1, len(starts) - 1)
        begin = starts[first]
        end = _line_end(text, starts[last])
        if kind >= 0.45:   # cursor inside the first line, at a word boundary
            line = text[begin:_line_end(text, begin)]
            cuts = [m.start() for m in _WORD_BOUNDARY.finditer(line)] or [0]
            begin += rng.choice(cuts)
        if end > begin:
            return FimSpan(text[:begin], text[begin:end], text[end:])
    a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2))
    return FimSpan(text[:a], text[a:b], text[b:])


def split_into_chunks(text: str, max_chars: int) -> list[str]:
    """Cut a file into pieces of at most max_chars, at line boundaries where possible."""
    chunks, pos = [], 0
    while pos < len(text):
        end = min(pos + max_chars, len(text))
        if end < len(text):
            nl = text.rfind("\n", pos, end)
            if nl > pos:
                end = nl + 1
        chunks.append(text[pos:end])
        pos = end
    return chunks


@dataclass(frozen=True)
class FimFormat:
    """How one tokenizer family writes an example (ids of its sentinels)."""
    start: tuple[int, ...]          # before a plain left-to-right document
    end: int                        # after a plain document
    pre: int
    suf: int
    mid: int
    fim_end: int                    # after a FIM middle (CodeLlama: ▁<EOT>; StarCoder: <|endoftext|>)
    fim_start: tuple[int, ...] = ()   # before the PRE sentinel (CodeLlama: <s>)


def fim_format(tok, family: str = "auto") -> FimFormat:
    """The tokenizer's FIM format, read from completion.templates' sentinel tables, so the pair
    is trained on the very ids the editor's prompts use. family: "auto" detects it from the
    vocabulary, as the completion pipeline does."""
    t = load_template(tok, family)
    if t.middle_id is None:   # no FIM tokens (plain) or no middle sentinel (codestral)
        raise ValueError(f"{t.family} tokenizer: training needs prefix, suffix and middle sentinels")
    start = () if t.bos_id is None else (t.bos_id,)
    # A family's own end-of-middle token is the first of its stops.
    return FimFormat(start=start, end=tok.eos_token_id, pre=t.prefix_id, suf=t.suffix_id,
                     mid=t.middle_id, fim_end=t.stop_ids[0], fim_start=start)


def codellama_format(tok) -> FimFormat:
    return fim_format(tok, "codellama")


def codellama_fim_end(tok) -> int:
    return codellama_format(tok).fim_end


def starcoder_format(tok) -> FimFormat:
    return fim_format(tok, "starcoder")


def encoder(tok) -> Callable[[str], list[int]]:
    """The one way training text becomes ids: the fast tokenizer's backend, no BOS/EOS added
    (sentinels are placed as ids by the format)."""
    backend = tok.backend_tokenizer
    return lambda text: backend.encode(text, add_special_tokens=False).ids


def fim_prompt_ids(fmt: FimFormat, enc, prefix: str, suffix: str, spm: bool) -> list[int]:
    """Prompt ids up to and including the MID sentinel (SPM: followed by the prefix)."""
    if spm:
        return [*fmt.fim_start, fmt.pre, fmt.suf, *enc(suffix), fmt.mid, *enc(prefix)]
    return [*fmt.fim_start, fmt.pre, *enc(prefix), fmt.suf, *enc(suffix), fmt.mid]


def example_ids(text: str, fmt: FimFormat, enc, rng: random.Random,
                fim_rate: float = 0.5, spm_rate: float = 0.5) -> list[int]:
    """Token ids of one training example: plain text, or a FIM example in PSM or SPM order."""
    if rng.random() >= fim_rate or len(text) < 2:
        return [*fmt.start, *enc(text), fmt.end]
    span = choose_fim_span(text, rng)
    spm = rng.random() < spm_rate
    return fim_prompt_ids(fmt, enc, span.prefix, span.suffix, spm) + enc(span.middle) + [fmt.fim_end]


def token_stream(texts: list[str], fmt: FimFormat, enc, seed: int,
                 chunk_chars: int, fim_rate: float = 0.5) -> list[int]:
    """All examples concatenated (documents cut into chunks first), ready to cut into blocks."""
    rng = random.Random(seed)
    stream: list[int] = []
    for text in texts:
        for chunk in split_into_chunks(text, chunk_chars):
            stream.extend(example_ids(chunk, fmt, enc, rng, fim_rate))
    return stream
