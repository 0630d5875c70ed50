"""A model's tokenizer from its tokenizer.json, without transformers.

Importing transformers and building its tokenizer class costs 1.5-2 s of a command line's start
on a 2-core VM (Qwen's tokenizer: 1.0 s to build, after 0.6-1.0 s of imports), for what the
engine and the completion layer use of it: ids, the vocabulary, the special tokens and their
ids. The `tokenizers` library reads tokenizer.json itself in a fraction of that, and
tokenizer_config.json names the special tokens. `FastTokenizer` offers those parts under the
names transformers' tokenizers use, so the code that takes either needs no branch;
tests/unit/test_engine_tokenizer.py holds it to transformers' answers on the real tokenizers.
One difference: where a text holds an added token's string and `split_special_tokens` is off,
transformers' Llama class puts no SentencePiece space after that token and `tokenizers` does;
the engine keeps such strings as text (`split_special_tokens`, `encode_special_tokens`). And
where transformers' `split_special_tokens` still matches an added token that is not special
(Qwen's FIM sentinels), the engine keeps that string as text too (`keep_control_tokens_as_text`).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

# An added token that reads as a control string: `<|fim_prefix|>`, `<tool_call>`, `▁<PRE>`.
CONTROL_TOKEN = re.compile(r"▁?<[^<>\s]+>")


@dataclass(frozen=True)
class AddedToken:
    content: str
    special: bool


def keep_control_tokens_as_text(backend) -> None:
    """Make `backend` (a `tokenizers.Tokenizer` encoding with `encode_special_tokens`) keep every
    added token that reads as a control string as text where a text spells it. Qwen's tokenizer
    adds its FIM sentinels (`<|fim_prefix|>`, `<|file_sep|>`, ...) as non-special tokens, which
    `encode_special_tokens` alone still matches: a document that spells one would put the real
    sentinel into the prompt. They are marked special here (their ids stay); prompts take
    sentinels by id (completion/templates.py), never from text."""
    from tokenizers import AddedToken as Added

    loose = [t for t in backend.get_added_tokens_decoder().values()
             if not t.special and CONTROL_TOKEN.fullmatch(t.content.strip())]
    if loose:
        backend.add_special_tokens([Added(t.content, single_word=t.single_word, lstrip=t.lstrip, rstrip=t.rstrip,
                                          normalized=t.normalized, special=True) for t in loose])


def _content(value) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class FastTokenizer:
    """tokenizer.json through the `tokenizers` library, with tokenizer_config.json's special
    tokens: the parts of a transformers fast tokenizer the engine and completion layer read.
    Its backend encodes special-token strings as text, as the engine always asks (a second copy
    that reads them as tokens is made only if `encode` is asked to)."""

    is_fast = True

    def __init__(self, backend, config: dict):
        from tokenizers import Tokenizer

        self.backend_tokenizer: Tokenizer = backend
        self._vocab: dict[str, int] | None = None     # get_vocab's, made on first use (0.1 s for 150k pieces)
        self.kept = None      # engine.load.vocab_cache.KeptTokenizer where the load is kept in the cache
        added = {i: AddedToken(t.content, t.special) for i, t in backend.get_added_tokens_decoder().items()}
        for i, token in (config.get("added_tokens_decoder") or {}).items():   # the config's word wins
            added[int(i)] = AddedToken(token["content"], bool(token.get("special")))
        self.added_tokens_decoder = added
        named = {key: _content(config.get(key)) for key in ("bos_token", "eos_token", "unk_token", "pad_token")}
        token_id = backend.token_to_id     # an added token's id too, as get_vocab(with_added_tokens=True)
        self.bos_token_id = token_id(named["bos_token"]) if named["bos_token"] else None
        self.eos_token_id = token_id(named["eos_token"]) if named["eos_token"] else None
        extra = [_content(t) for t in config.get("additional_special_tokens") or config.get("extra_special_tokens") or []]
        special = {token_id(t) for t in list(named.values()) + extra if t is not None and token_id(t) is not None}
        special |= {i for i, t in added.items() if t.special}
        self.all_special_ids = sorted(special)
        self._special = None

    @classmethod
    def from_dir(cls, path: str) -> "FastTokenizer":
        """The folder's tokenizer: from its load kept in specfill's cache where there is one
        (engine/load/vocab_cache.py: a faster form of tokenizer.json, and the vocabulary tables that
        build_vocab then takes), else from tokenizer.json (build_vocab keeps both)."""
        from tokenizers import Tokenizer

        from . import vocab_cache

        config_file = os.path.join(path, "tokenizer_config.json")
        config = {}
        if os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
        cached, key = vocab_cache.read(path)
        kept = None
        if cached is not None:
            backend = Tokenizer.from_str(cached.tokenizer_json)
            kept = vocab_cache.KeptTokenizer(path, key, tables=cached.tables)
            del cached
        else:
            with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
                source = f.read()
            backend = Tokenizer.from_str(source)
            if key is not None:
                kept = vocab_cache.KeptTokenizer(path, key, source=source)
            del source
        backend.encode_special_tokens = True
        backend.no_truncation()
        backend.no_padding()
        tokenizer = cls(backend, config)     # its special tokens as the files name them
        tokenizer.kept = kept
        keep_control_tokens_as_text(backend)
        return tokenizer

    def get_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            self._vocab = self.backend_tokenizer.get_vocab(with_added_tokens=True)
        return dict(self._vocab)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def text_backend(self):
        """The backend as the engine encodes text: special-token strings as text (transformers'
        split_special_tokens), no truncation nor padding. engine.load.vocab_tables.plain_tokenizer takes it."""
        return self.backend_tokenizer

    def _special_backend(self):
        """A copy that reads special-token strings as those tokens (made on first use)."""
        if self._special is None:
            from tokenizers import Tokenizer

            self._special = Tokenizer.from_str(self.backend_tokenizer.to_str())
            self._special.encode_special_tokens = False
        return self._special

    def encode(self, text: str, add_special_tokens: bool = True, split_special_tokens: bool = False) -> list[int]:
        backend = self.backend_tokenizer if split_special_tokens else self._special_backend()
        return backend.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        """{"input_ids": ...} of one text, as calling a transformers tokenizer gives (also as
        an attribute)."""
        return _Encoded(input_ids=self.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids) -> list[str | None]:
        return [self.backend_tokenizer.id_to_token(i) for i in ids]


class _Encoded(dict):
    __getattr__ = dict.__getitem__


def fast_tokenizer(path: str) -> FastTokenizer | None:
    """The tokenizer of the model folder `path` where it has a tokenizer.json, else None."""
    return FastTokenizer.from_dir(path) if os.path.isfile(os.path.join(path, "tokenizer.json")) else None
