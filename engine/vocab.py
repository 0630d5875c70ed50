"""What each token id means as raw bytes, and text <-> ids for a continuation.

The engine shares text between models with different tokenizers, so it needs, for every
token, the exact bytes it adds when it continues a sequence: "▁foo" adds b" foo", byte-level
"Ġfoo" adds b" foo", byte-fallback "<0xE4>" adds one byte of a UTF-8 character. Special
tokens add nothing (they are never text). Working in bytes, not str, keeps half-characters
and leading spaces exact where tokenizer.decode would strip or replace them. The tables are built
from the tokenizer by engine/load/vocab_tables.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

LOOKBEHIND_TOKENS = 8   # context tokens re-encoded in front of a continuation (at most)


@dataclass
class TokenVocab:
    """Byte content of every token id of one tokenizer, plus fast text encoding."""
    tokenizer: object
    token_bytes: list[bytes]
    special_ids: frozenset[int]
    bytes_to_id: dict[bytes, int]
    max_token_len: int
    _backend: object = field(repr=False, default=None)
    dummy_prefix: bool = False    # encoding text puts a space in front (SentencePiece "▁")
    byte_pieces: dict[int, int] = field(default_factory=dict)   # byte-fallback "<0xNN>" id -> NN
    byte_ids: dict[int, int] = field(default_factory=dict)      # NN -> its byte-fallback id

    def same_token(self, other: "TokenVocab", tid: int) -> int | None:
        """The id in this vocabulary of the token `tid` of `other`: same bytes, and a byte-fallback
        piece for a byte-fallback piece; None when there is none."""
        if tid in other.byte_pieces and self.byte_pieces:
            return self.byte_ids.get(other.byte_pieces[tid])
        return self.bytes_to_id.get(other.token_bytes[tid])

    def tokens_covering(self, ids, n_bytes: int) -> int:
        """How many of `ids`, from the start, it takes to write their first `n_bytes` bytes."""
        tb, have = self.token_bytes, 0
        for n, i in enumerate(ids):
            if have >= n_bytes:
                return n
            have += len(tb[i]) if 0 <= i < len(tb) else 0
        return len(ids)

    def bytes_of(self, ids) -> bytes:
        tb = self.token_bytes
        return b"".join(tb[i] if 0 <= i < len(tb) else b"" for i in ids)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: special-token strings inside it stay text."""
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    @property
    def plain(self):
        """The tokenizer's `plain_tokenizer` copy (engine/load/vocab_tables.py; None for one without
        a Rust tokenizer)."""
        return self._backend

    def encode_texts(self, texts: list[str]) -> list[list[int]]:
        """encode_text of each of `texts`, in one call to the tokenizer where it has a batch
        call without character offsets (nobody here reads them)."""
        return encode_plain_batch(self._backend, texts) if self._backend is not None \
            else [self.encode_text(t) for t in texts]

    def longest_match(self, data: bytes) -> list[int]:
        """Greedy longest-prefix tokenization of raw bytes (used for short leftover pieces)."""
        ids, i = [], 0
        while i < len(data):
            for n in range(min(self.max_token_len, len(data) - i), 0, -1):
                tid = self.bytes_to_id.get(data[i:i + n])
                if tid is not None:
                    ids.append(tid)
                    i += n
                    break
            else:
                return ids  # a byte no token covers: stop here
        return ids

    def encode_continuation(self, context_ids: list[int], new: bytes) -> tuple[list[int], bytes]:
        """Ids that continue `context_ids` with the bytes `new`, tokenized as the tokenizer
        would tokenize them in context (a few context tokens are re-encoded in front as a
        lookbehind so merges and leading spaces come out right). Returns (ids, leftover)
        where leftover is a trailing incomplete UTF-8 character that was not encoded."""
        tb = self.token_bytes
        lb_ids: list[int] = []
        for tid in reversed(context_ids[-LOOKBEHIND_TOKENS:]):
            if tid in self.special_ids:
                break
            lb_ids.insert(0, tid)
            if len(lb_ids) >= 4 and not _is_continuation_byte(tb[lb_ids[0]][:1]):
                break
        lb = self.bytes_of(lb_ids)
        while lb and _is_continuation_byte(lb[:1]):
            lb = lb[1:]
        full = lb + new
        valid = _text_prefix_len(full[:_complete_utf8_len(full)])
        if valid < len(lb):   # the context ends in bytes that are not text: look behind up to them
            lb = lb[:valid]
        if not lb and self.dummy_prefix:
            # After a special token (or at the start) the text is written without the
            # SentencePiece dummy space: encode behind a newline, which no piece merges with.
            lb = b"\n"
        full = lb + new
        cut = _complete_utf8_len(full)
        if cut <= len(lb):
            return [], new
        try:
            text = full[:cut].decode("utf-8")
        except UnicodeDecodeError:
            return [], new  # invalid bytes: continuation_ids writes them with byte tokens
        ids = self.encode_text(text)
        got = self.bytes_of(ids)
        extra = len(got) - cut  # some tokenizers prepend a space (SentencePiece dummy prefix)
        if extra not in (0, 1) or got[extra:] != full[:cut]:
            return [], new
        boundary = extra + len(lb)
        pos = 0
        for j, tid in enumerate(ids):
            end = pos + len(tb[tid])
            if end > boundary:
                head = [] if pos >= boundary else self.longest_match(got[boundary:end])
                if pos < boundary and self.bytes_of(head) != got[boundary:end]:
                    return [], new
                return head + ids[j + 1:] if pos < boundary else ids[j:], full[cut:]
            pos = end
        return [], full[cut:]

    def continuation_ids(self, context_ids: list[int], new: bytes) -> list[int]:
        """Ids that write exactly the bytes `new` after `context_ids`: text as the tokenizer
        writes it in context, and bytes that are not (yet) valid UTF-8 (half a character, a
        model's junk) with the vocabulary's byte pieces (byte fallback `<0xE4>`, byte-level
        single bytes), as a model would have produced them. Stops early only at a byte no
        token can write."""
        ctx = list(context_ids[-LOOKBEHIND_TOKENS:])   # all encode_continuation reads of it
        ids: list[int] = []
        while new:
            end = _text_prefix_len(new)
            if end:
                got, _ = self.encode_continuation(ctx + ids, new[:end])
                if not got:   # a normalizer would change this text: write it piece by piece
                    got = self.longest_match(new[:end])
            else:
                got = self.longest_match(new[:_raw_prefix_len(new)])
            if not got:
                break
            ids += got
            new = new[len(self.bytes_of(got)):]
        return ids


def _is_continuation_byte(b: bytes) -> bool:
    return bool(b) and 0x80 <= b[0] < 0xC0


def _text_prefix_len(data: bytes) -> int:
    """Length of the longest prefix of `data` made of complete, valid UTF-8 characters."""
    try:
        data.decode("utf-8")
        return len(data)
    except UnicodeDecodeError as e:
        return e.start


def _raw_prefix_len(data: bytes) -> int:
    """Length of the leading bytes of `data` that are not text: an invalid byte, or an
    unfinished character (at least 1)."""
    try:
        data.decode("utf-8")
        return len(data)
    except UnicodeDecodeError as e:
        return max(1, e.end) if e.start == 0 else e.start


def _complete_utf8_len(data: bytes) -> int:
    """Length of the longest prefix of `data` that does not end inside a UTF-8 character."""
    n = len(data)
    i = n - 1
    while i >= 0 and i > n - 4 and 0x80 <= data[i] < 0xC0:
        i -= 1
    if i < 0:
        return n
    lead = data[i]
    need = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
    return n if n - i >= need else i


def decode_bytes(data: bytes) -> str:
    """Text of generated bytes; an unfinished trailing character is left out."""
    return data[:_complete_utf8_len(data)].decode("utf-8", errors="replace")


def encode_plain_batch(plain, texts: list[str]) -> list[list[int]]:
    """Ids of each text by a `plain_tokenizer`: one call, without the character offsets where
    the tokenizers release has that call (the same ids)."""
    encode = getattr(plain, "encode_batch_fast", None) or plain.encode_batch
    return [e.ids for e in encode(list(texts), add_special_tokens=False)]
