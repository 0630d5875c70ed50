"""A tokenizer's vocabulary as the engine reads it (engine/vocab.py's `TokenVocab`): every token
id's bytes, built from the tokenizer's own tables (or read where engine/load/vocab_cache.py kept
them), and a copy of its Rust tokenizer that encodes text as text."""
from __future__ import annotations

import json
import re

from ..vocab import TokenVocab
from .tokenizer import keep_control_tokens_as_text
from .vocab_cache import VocabTables

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")   # a byte-fallback piece, "<0xE4>"


def _byte_level_decoder() -> dict[str, int]:
    # GPT-2's reversible byte <-> printable-unicode table.
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _decoder_kinds(spec: dict) -> set[str]:
    kinds: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if "type" in node:
                kinds.add(node["type"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(spec.get("decoder"))
    return kinds


def plain_tokenizer(tokenizer):
    """A copy of `tokenizer`'s Rust tokenizer that encodes text as text (special-token strings in
    it stay text, as `split_special_tokens=True` makes transformers' encode do), with no
    truncation nor padding; None for a tokenizer without one. Encoding with it directly skips
    transformers' per-call Python, and its own copy leaves the shared tokenizer's flags alone."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    if hasattr(tokenizer, "text_backend"):      # engine.load.tokenizer.FastTokenizer keeps one
        return tokenizer.text_backend()
    from tokenizers import Tokenizer

    plain = Tokenizer.from_str(backend.to_str())
    plain.encode_special_tokens = True  # sentinel text in user code is just text
    keep_control_tokens_as_text(plain)
    plain.no_truncation()
    plain.no_padding()
    return plain


def build_vocab(tokenizer) -> TokenVocab:
    """The vocabulary of `tokenizer`. A tokenizer read from a folder (engine.load.tokenizer.FastTokenizer)
    takes its tables from specfill's cache where they were kept (engine/load/vocab_cache.py), and
    keeps them there once built."""
    kept = getattr(tokenizer, "kept", None)
    if kept is not None and kept.tables is not None:
        return _vocab_of(tokenizer, kept.tables)
    tables = _tables(tokenizer)
    if kept is not None:
        kept.keep(tables)
    return _vocab_of(tokenizer, tables)


def _vocab_of(tokenizer, tables) -> TokenVocab:
    vocab = TokenVocab(tokenizer=tokenizer, token_bytes=tables.token_bytes, special_ids=frozenset(tables.special_ids),
                       bytes_to_id=tables.bytes_to_id, max_token_len=tables.max_token_len,
                       _backend=plain_tokenizer(tokenizer), byte_pieces=tables.byte_pieces,
                       byte_ids={b: i for i, b in tables.byte_pieces.items()})
    vocab.dummy_prefix = vocab.bytes_of(vocab.encode_text("a")) == b" a"
    return vocab


def _tables(tokenizer):
    """Each token's bytes, the special ids, bytes -> lowest id, the byte-fallback pieces."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    # the decoder's own definition (the whole tokenizer's is megabytes of JSON)
    decoder = getattr(backend, "decoder", None)
    kinds = _decoder_kinds({"decoder": json.loads(decoder.__getstate__())} if decoder is not None else {})
    byte_level = "ByteLevel" in kinds
    byte_fallback = "ByteFallback" in kinds or bool(getattr(getattr(backend, "model", None), "byte_fallback", False))
    # a byte-level piece's characters to the bytes they stand for (as latin-1 characters); any
    # other character below 256 to one latin-1 cannot encode, so such a piece is not taken as bytes
    to_bytes = str.maketrans({**{chr(c): "\uffff" for c in range(256)},
                              **{c: chr(b) for c, b in _byte_level_decoder().items()}}) if byte_level else None

    vocab = tokenizer.get_vocab()
    added = {i: t for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    special |= {i for i, t in added.items() if getattr(t, "special", False)}
    size = max(vocab.values()) + 1 if vocab else 0
    table = [b""] * size
    byte_pieces: dict[int, int] = {}
    for piece, i in vocab.items():
        if i in special:
            continue
        if i in added:
            table[i] = str(getattr(added[i], "content", piece)).encode("utf-8")
            continue
        m = _BYTE_TOKEN.match(piece) if byte_fallback else None
        if m:
            table[i] = bytes([int(m.group(1), 16)])
            byte_pieces[i] = int(m.group(1), 16)
            continue
        if to_bytes is not None:
            try:
                table[i] = piece.translate(to_bytes).encode("latin-1")
                continue
            except UnicodeEncodeError:
                pass
        table[i] = piece.replace("▁", " ").encode("utf-8")
    # each text's lowest id, a byte-fallback piece only where no ordinary piece has the bytes
    pieces = [(b, i) for i, b in enumerate(table) if b and i not in special]
    bytes_to_id = {b: i for b, i in reversed(pieces) if i in byte_pieces}
    bytes_to_id.update({b: i for b, i in reversed(pieces) if i not in byte_pieces})
    return VocabTables(token_bytes=table, special_ids=sorted(special), bytes_to_id=bytes_to_id,
                       byte_pieces=byte_pieces, max_token_len=max((len(b) for b in table), default=1))
