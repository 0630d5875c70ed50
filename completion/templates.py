"""Fill-in-the-middle prompt templates of the code-model families users run.

Prompts are built from token ids, never by formatting sentinel strings into text: sentinels are
looked up as ids, the code segments are encoded with special-token matching switched off, so a
``<fim_prefix>`` or ``<PRE>`` typed in the user's file stays plain text.

Formats (layout PSM = prefix, suffix, middle; SPM = suffix first, so typing only appends;
PSM-LINE = PSM whose middle begins with the cursor line's text before the cursor, so typing
within a line only appends too: the prefix ends at the line's start, and the suffix, which PSM
puts after the prefix, is computed once a line rather than once a keystroke):

* codellama  ``<s>▁<PRE>{pre}▁<SUF>{suf}▁<MID>`` / SPM ``<s>▁<PRE>▁<SUF>{suf}▁<MID>{pre}``
  (Meta's ``infilling_prompt_tokens``: the prefix is encoded like any text, so a SentencePiece
  tokenizer with a dummy prefix gives the famous space after ``<PRE>``; the suffix is encoded
  without the dummy space). Ends with ``▁<EOT>``.
* starcoder / starcoder2  ``<fim_prefix>{pre}<fim_suffix>{suf}<fim_middle>`` / SPM
  ``<fim_prefix><fim_suffix>{suf}<fim_middle>{pre}`` (bigcode's SPM variant). No BOS.
  StarCoder2 repo form: ``<repo_name>{repo}<file_sep>{path}\\n{code}...<file_sep>{path}\\n``.
* deepseek  ``<｜begin▁of▁sentence｜><｜fim▁begin｜>{pre}<｜fim▁hole｜>{suf}<｜fim▁end｜>``.
* qwen  ``<|fim_prefix|>{pre}<|fim_suffix|>{suf}<|fim_middle|>``; repo level
  ``<|repo_name|>{repo}\\n<|file_sep|>{path}\\n{code}\\n...<|file_sep|>{path}\\n`` + FIM.
* codegemma  ``<bos><|fim_prefix|>{pre}<|fim_suffix|>{suf}<|fim_middle|>``.
* codestral  ``<s>[SUFFIX]{suf}[PREFIX]{pre}`` (suffix first by design, no middle sentinel).
* plain  ``[bos]{pre}``: left to right, for models without FIM tokens.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

import cachetools

log = logging.getLogger(__name__)

FAMILIES = ("codellama", "starcoder", "starcoder2", "deepseek", "qwen", "codegemma", "codestral", "plain")
LAYOUTS = ("psm", "spm", "psm-line")


@dataclass(frozen=True)
class FamilySpec:
    """Sentinel spellings of one family (each entry: accepted spellings, first found wins)."""
    prefix: tuple[str, ...]
    suffix: tuple[str, ...]
    middle: tuple[str, ...] = ()
    stops: tuple[str, ...] = ()          # end-of-middle tokens besides the tokenizer's EOS
    uses_bos: bool = False
    layouts: tuple[str, ...] = ("psm",)  # layouts the family was trained on, preferred first (PSM
                                         # brings PSM-LINE, preferred to it: the same prompt split
                                         # elsewhere, which typing only appends to)
    repo_name: str | None = None         # repo-level extra-context sentinels
    file_sep: str | None = None


SPECS: dict[str, FamilySpec] = {
    "codellama": FamilySpec(("▁<PRE>", "<PRE>"), ("▁<SUF>", "<SUF>"), ("▁<MID>", "<MID>"),
                            stops=("▁<EOT>", "<EOT>"), uses_bos=True, layouts=("spm", "psm")),
    "starcoder": FamilySpec(("<fim_prefix>",), ("<fim_suffix>",), ("<fim_middle>",),
                            stops=("<|endoftext|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                                   "<fim_pad>", "<file_sep>"),
                            layouts=("spm", "psm")),
    "starcoder2": FamilySpec(("<fim_prefix>",), ("<fim_suffix>",), ("<fim_middle>",),
                             stops=("<|endoftext|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>",
                                    "<fim_pad>", "<file_sep>"),
                             layouts=("spm", "psm"), repo_name="<repo_name>", file_sep="<file_sep>"),
    "deepseek": FamilySpec(("<｜fim▁begin｜>",), ("<｜fim▁hole｜>",), ("<｜fim▁end｜>",),
                           stops=("<｜end▁of▁sentence｜>", "<|EOT|>"), uses_bos=True),
    "qwen": FamilySpec(("<|fim_prefix|>",), ("<|fim_suffix|>",), ("<|fim_middle|>",),
                       stops=("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>",
                              "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|im_end|>"),
                       repo_name="<|repo_name|>", file_sep="<|file_sep|>"),
    "codegemma": FamilySpec(("<|fim_prefix|>",), ("<|fim_suffix|>",), ("<|fim_middle|>",),
                            stops=("<|file_separator|>", "<eos>", "<|fim_prefix|>", "<|fim_suffix|>",
                                   "<|fim_middle|>", "<end_of_turn>"),
                            uses_bos=True),
    "codestral": FamilySpec(("[PREFIX]",), ("[SUFFIX]",), (), stops=("</s>",), uses_bos=True,
                            layouts=("spm",)),
    "plain": FamilySpec((), (), (), layouts=("prefix",)),
}


SEGMENTS_KEPT = 4   # suffixes kept by FimTemplate._segment (a few documents typed in by turns)
LINES_KEPT = 20_000   # texts' ids kept by FimTemplate.infill_ids (lines, and what windows count)
# Text that `breaks_at_newlines` encodes both whole and line by line, to confirm what it read in
# the tokenizer's definition: line breaks among spaces, tabs, blank lines, non-ASCII, markup.
NEWLINE_SAMPLE = ("def f(a, b):  \n\n    return a  +  b\t\n  \n\t x = [1,\n  2]  # é 😀 ▁\n"
                  "<PRE> <s> </s> <|endoftext|>\n\n\n}\n  \n  ")


@dataclass(frozen=True)
class ExtraChunk:
    """A piece of another open document offered as context."""
    path: str
    text: str


@dataclass
class FimTemplate:
    """One family's prompt format resolved to one tokenizer's ids."""
    family: str
    tokenizer: object
    prefix_id: int | None
    suffix_id: int | None
    middle_id: int | None
    bos_id: int | None
    stop_ids: tuple[int, ...]
    layouts: tuple[str, ...]
    repo_name_id: int | None = None
    file_sep_id: int | None = None
    _dummy_prefix: bool = field(default=False, repr=False)
    _warned: set = field(default_factory=set, repr=False)
    # the tokenizer's Rust tokenizer, encoding text as text (engine.load.vocab_tables.plain_tokenizer): the
    # same ids as `tokenizer.encode(..., split_special_tokens=True)` without transformers' Python
    # around each call (a prompt's window counts its lines one by one); None: that encode
    _plain: object = field(default=None, repr=False)
    _marker: list[int] | None = field(default=None, repr=False)   # encode("\n"), for encode_infill
    # the last few prompt segments `build` encoded, by their text: a keystroke changes the prefix,
    # and the suffix (the rest of the line, the lines after) comes back as it was
    _segments: cachetools.LRUCache = field(default_factory=lambda: cachetools.LRUCache(SEGMENTS_KEPT),
                                           repr=False)
    # the tokenizer never joins a line break with anything (`breaks_at_newlines`): a prefix is
    # encoded line by line, each complete line's ids kept by its text (`infill_ids`)
    _line_wise: bool = field(default=False, repr=False)
    _lines: cachetools.LRUCache = field(default_factory=lambda: cachetools.LRUCache(LINES_KEPT), repr=False)

    @property
    def supported_layouts(self) -> tuple[str, ...]:
        """The family's layouts, PSM-LINE first among them where it has PSM (after SPM)."""
        layouts = list(self.layouts)
        if "psm" in layouts:
            layouts.insert(layouts.index("psm"), "psm-line")
        return tuple(layouts)

    @property
    def default_layout(self) -> str:
        return self.supported_layouts[0]

    def resolve_layout(self, wanted: str) -> str:
        """The layout to use for a `fim_layout` setting (auto, or one of LAYOUTS)."""
        if wanted == "auto" or wanted in self.supported_layouts:
            return self.default_layout if wanted == "auto" else wanted
        if wanted not in self._warned:
            self._warned.add(wanted)
            log.warning("%s prompts support %s, not %s; using %s", self.family,
                        "/".join(self.supported_layouts), wanted, self.default_layout)
        return self.default_layout

    # -- encoding --------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Text as the tokenizer encodes it (dummy-prefix space included if it adds one)."""
        if not text:
            return []
        if self._plain is not None:
            return self._plain.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    def encode_infill(self, text: str) -> list[int]:
        """Text without the SentencePiece dummy-prefix space (for segments mid-sequence)."""
        if not text or not self._dummy_prefix:
            return self.encode(text)
        if self._marker is None:
            self._marker = self.encode("\n")
        marker = self._marker
        ids = self.encode("\n" + text)
        if ids[:len(marker)] == marker:
            return ids[len(marker):]
        return ids

    # -- prompts ---------------------------------------------------------------------------
    def build(self, prefix: str, suffix: str, layout: str = "auto",
              extra: tuple[ExtraChunk, ...] | list[ExtraChunk] = (), path: str | None = None,
              repo: str | None = None) -> list[int]:
        """Prompt ids for a fill between prefix and suffix; the model's answer is the middle."""
        layout = self.resolve_layout(layout)
        head: list[int] = [self.bos_id] if self.bos_id is not None else []
        if extra and self.file_sep_id is not None:
            head += self._repo_header(extra, path or "file", repo or "repo")
        elif extra:
            # No file separators: other files go first in the prefix text, where they only
            # change when the chunk set changes (never while typing in this file).
            prefix = "".join(c.text if c.text.endswith("\n") else c.text + "\n" for c in extra) + prefix
        if self.family == "plain":
            return head + self.encode(prefix)
        if self.family == "codestral":
            return head + [self.suffix_id] + self._segment(suffix) + [self.prefix_id] + self._prefix_ids(prefix)
        if layout == "spm":
            return (head + [self.prefix_id, self.suffix_id] + self._segment(suffix)
                    + [self.middle_id] + self._prefix_ids(prefix))
        typed = ""
        if layout == "psm-line":   # the cursor line's start goes into the middle, after the suffix
            cut = prefix.rfind("\n") + 1
            prefix, typed = prefix[:cut], prefix[cut:]
        return (head + [self.prefix_id] + self._prefix_ids(prefix) + [self.suffix_id]
                + self._segment(suffix) + [self.middle_id] + self.encode_infill(typed))

    def _prefix_ids(self, prefix: str) -> list[int]:
        """encode(prefix); line by line (`_by_lines`) where the tokenizer never joins a line break
        with anything, so that a keystroke encodes only the line it changed (`python -m
        bench.server_cost` times both ways)."""
        return self._by_lines(prefix) if self._line_wise else self.encode(prefix)

    def _by_lines(self, text: str) -> list[int]:
        """The first line encoded as text begins, each later one as text after a line break
        (encode_infill), every complete line's ids kept by its text."""
        lines = text.split("\n")
        if len(lines) == 1:
            return self.encode(text)
        first = lines[0] + "\n"                         # as text begins; a list of its own, extended below
        ids = list(_kept(self._lines, (True, first), self.encode, first))
        for line in lines[1:-1]:
            ids += self.infill_ids(line + "\n")
        return ids + self.encode_infill(lines[-1])     # the cursor's line: it changes every keystroke

    def infill_ids(self, text: str) -> list[int]:
        """encode_infill(text), kept by its text (the last LINES_KEPT): a prefix's complete lines,
        and what the pipeline's windows count (the same lines, so each is encoded once). The
        caller must not change the list."""
        return _kept(self._lines, (False, text), self.encode_infill, text)

    def _segment(self, text: str) -> list[int]:
        """encode_infill(text), kept for the last SEGMENTS_KEPT texts (the same text, the same ids:
        exact for any tokenizer). Callers only concatenate the list."""
        return _kept(self._segments, text, self.encode_infill, text)

    def _repo_header(self, extra, path: str, repo: str) -> list[int]:
        if self.family == "qwen":
            ids = [self.repo_name_id] + self.encode_infill(repo + "\n")
            for c in extra:
                body = c.text if c.text.endswith("\n") else c.text + "\n"
                ids += [self.file_sep_id] + self.encode_infill(f"{c.path}\n{body}")
            return ids + [self.file_sep_id] + self.encode_infill(path + "\n")
        ids = [self.repo_name_id] + self.encode_infill(repo)      # starcoder2
        for c in extra:
            ids += [self.file_sep_id] + self.encode_infill(f"{c.path}\n{c.text}")
        return ids + [self.file_sep_id] + self.encode_infill(path + "\n")


def _first_id(vocab: dict[str, int], spellings: tuple[str, ...]) -> int | None:
    """Id of the first spelling that is one vocabulary entry, else None."""
    for s in spellings:
        if s in vocab:
            return vocab[s]
    return None


def detect_family(tokenizer) -> str:
    """Family from the tokenizer's vocabulary (its FIM sentinels), not from the model name."""
    vocab = tokenizer.get_vocab()
    has = vocab.__contains__
    if has("<｜fim▁begin｜>"):
        return "deepseek"
    if has("[SUFFIX]") and has("[PREFIX]"):
        return "codestral"
    if has("<|fim_prefix|>"):
        return "codegemma" if has("<|file_separator|>") else "qwen"
    if has("<fim_prefix>"):
        return "starcoder2" if has("<file_sep>") else "starcoder"
    if has("▁<PRE>") or has("<PRE>"):
        return "codellama"
    return "plain"


def _has_dummy_prefix(tokenizer) -> bool:
    """SentencePiece-style tokenizers that put a '▁' before the first word of any text."""
    try:
        ids = tokenizer.encode("a", add_special_tokens=False, split_special_tokens=True)
        pieces = tokenizer.convert_ids_to_tokens(ids)
    except Exception:  # noqa: BLE001 - exotic tokenizers: assume the common case
        return False
    return bool(pieces) and pieces[0] in ("▁", "▁a")


def load_template(tokenizer, setting: str = "auto", plain=None) -> FimTemplate:
    """Template for one tokenizer: detected (`auto`) or named; prefix-only without FIM tokens.
    `plain`: the tokenizer's `engine.load.vocab_tables.plain_tokenizer` where one is made already (a loaded
    model's vocab has it); else one is made here."""
    from engine.load.vocab_tables import plain_tokenizer   # here: the engine package imports torch (not at CLI start)

    if setting not in ("auto", *FAMILIES):
        raise ValueError(f"unknown fim_template {setting!r}; expected auto or one of {', '.join(FAMILIES)}")
    family = detect_family(tokenizer) if setting == "auto" else setting
    spec = SPECS[family]
    vocab = tokenizer.get_vocab()
    pre, suf, mid = (_first_id(vocab, spec.prefix), _first_id(vocab, spec.suffix),
                     _first_id(vocab, spec.middle))
    missing = family != "plain" and (pre is None or suf is None or (spec.middle and mid is None))
    if missing:
        log.warning("tokenizer has no %s FIM tokens; completing from the prefix only", family)
        family, spec, pre, suf, mid = "plain", SPECS["plain"], None, None, None
    elif family == "plain":
        log.warning("tokenizer has no known FIM tokens; completing from the prefix only")
    stops = [vocab[s] for s in spec.stops if s in vocab]
    if tokenizer.eos_token_id is not None:
        stops.append(tokenizer.eos_token_id)
    bos = tokenizer.bos_token_id if (spec.uses_bos or (family == "plain" and _adds_bos(tokenizer))) else None
    repo_id = vocab.get(spec.repo_name) if spec.repo_name else None
    sep_id = vocab.get(spec.file_sep) if spec.file_sep else None
    if repo_id is None or sep_id is None:
        repo_id = sep_id = None          # the repo-level form needs both
    template = FimTemplate(
        family=family, tokenizer=tokenizer, prefix_id=pre, suffix_id=suf, middle_id=mid, bos_id=bos,
        stop_ids=tuple(dict.fromkeys(stops)), layouts=spec.layouts,
        repo_name_id=repo_id, file_sep_id=sep_id, _dummy_prefix=_has_dummy_prefix(tokenizer),
        _plain=plain if plain is not None else plain_tokenizer(tokenizer),
    )
    template._line_wise = breaks_at_newlines(template)
    return template


def _kept(cache: cachetools.LRUCache, key, encode, text: str) -> list[int]:
    """The ids `cache` keeps under `key`; encode(text), kept there, where it keeps none."""
    ids = cache.get(key)
    if ids is None:
        ids = cache[key] = encode(text)
    return ids


def _adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    ids = tokenizer.encode("a", split_special_tokens=True)    # ("a" holds no special token's text)
    return bool(ids) and ids[0] == bos


# Normalizers that change characters one at a time (a Prepend only at the text's start, which
# `encode` and `encode_infill` already tell apart) and pre-tokenizers that only cut text.
_LOCAL_NORMALIZERS = {"Prepend", "Replace", "NFC", "NFD", "NFKC", "NFKD", "Lowercase"}
_CUTTING_PRE_TOKENIZERS = {"Metaspace", "Split", "Digits", "Punctuation", "WhitespaceSplit"}


def breaks_at_newlines(template: FimTemplate) -> bool:
    """Whether a text's ids are its lines' ids one after another (`FimTemplate._by_lines`): read
    in the tokenizer's definition, where the model is BPE or unigram, no piece of the vocabulary
    and no added token holds a line break with anything else (so no merge and no unigram piece
    spans one), the normalizer changes characters one by one and the pre-tokenizer only cuts
    text; then confirmed on NEWLINE_SAMPLE, cut at every line break and the characters beside
    it. Byte-level tokenizers (GPT-2, StarCoder, Qwen: pieces like "\n   ") are encoded whole."""
    plain = template._plain
    if plain is None or type(plain.model).__name__ not in ("BPE", "Unigram"):
        return False
    try:
        normalizer = json.loads(plain.normalizer.__getstate__()) if plain.normalizer is not None else None
        pre_tokenizer = json.loads(plain.pre_tokenizer.__getstate__()) if plain.pre_tokenizer is not None else None
    except (ValueError, AttributeError, TypeError):
        return False
    if not (_only(normalizer, "normalizers", _LOCAL_NORMALIZERS)
            and _only(pre_tokenizer, "pretokenizers", _CUTTING_PRE_TOKENIZERS)):
        return False
    if any("\n" in piece and piece != "\n" for piece in plain.get_vocab(with_added_tokens=True)):
        return False
    breaks = [i for i, ch in enumerate(NEWLINE_SAMPLE) if ch == "\n"]
    cuts = sorted({n for i in breaks for n in (i - 1, i, i + 1, i + 2) if 0 <= n <= len(NEWLINE_SAMPLE)}
                  | {len(NEWLINE_SAMPLE)})
    try:
        return all(template._by_lines(NEWLINE_SAMPLE[:n]) == template.encode(NEWLINE_SAMPLE[:n]) for n in cuts)
    finally:
        template._lines.clear()


def _only(component: dict | None, children: str, allowed: set) -> bool:
    """A tokenizer.json normalizer or pre-tokenizer (or a Sequence of them) of the allowed types;
    a Replace or Split whose pattern is a line break (or a regex: not read here) is not."""
    if component is None:
        return True
    kind = component.get("type")
    if kind == "Sequence":
        return all(_only(c, children, allowed) for c in component.get(children) or [])
    if kind not in allowed:
        return False
    if kind == "Replace":
        pattern = component.get("pattern") or {}
        return "String" in pattern and "\n" not in pattern["String"] and "\n" not in component.get("content", "")
    if kind == "Split":
        return component.get("behavior") != "Removed"
    return True
