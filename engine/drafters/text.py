"""A draft model with another tokenizer than the target's: the text it drafts is re-tokenized
for the target (universal assisted generation)."""
from __future__ import annotations

import re
import time

import torch

from ..kv import KVPool
from ..vocab import TokenVocab
from .base import Draft
from .model import greedy


def translate(src: TokenVocab, ids: list[int], src_context: list[int], dst: TokenVocab,
              dst_context: list[int]) -> list[int]:
    """`dst` ids for the text of `src` ids. As `dst`'s tokenizer writes that text in context,
    unless `src` split it otherwise than its own tokenizer would and every one of its tokens is
    one `dst` token: a model's own choice of split (a target that wrote "enty" + "dings"), kept."""
    data = src.bytes_of(ids)
    canonical = dst.continuation_ids(dst_context, data)
    direct = [dst.same_token(src, t) for t in ids]
    if direct == canonical or None in direct or src.continuation_ids(src_context, data) == list(ids):
        return canonical
    return direct


_WHITESPACE = re.compile(rb"[ \t\n\r]")
TAIL_TOKENS = 3    # the draft's last ids whose split healing checks (the healed bytes stay one draft step)


class TextDrafter:
    """A draft model with ANOTHER tokenizer (universal assisted generation).

    The continuation is shared as bytes. The draft keeps its own prompt and KV session, and
    its own tokens for the text it drafted and the target accepted; the rest of the shared
    text (the target's own tokens) is re-tokenized for the draft in context, and draft tokens
    become bytes that are re-tokenized for the target with a lookbehind.

    Token healing, only where the draft's tokenization of the shared text really differs from
    its own: when its tokenizer would end that text with a token that starts earlier than the
    draft's last ids (" Led" + "ger" kept from two rounds, where it writes " Ledger"), those ids
    are held back as a byte constraint the draft must re-produce. Its own split is kept even
    where the target's last token spans other bytes ("):" + "\n" for "):\n"), and so is a split
    the target model chose itself: the target has committed to that boundary and the draft
    commits with it, so it continues the way the target will (after a trailing-indent token,
    " return", not "return"). At the prompt's end (`begin`) a last token spanning other bytes
    than the target's is held back. So is whitespace the draft's tokenizer merges with what
    follows where the target's cannot (`_open_whitespace`): a SentencePiece target ends a line
    with "\n" alone, and a byte-level draft left after a bare "\n", a split it never sees,
    drafts unindented code; re-drafted, it writes "\n" + the indentation as one token. The
    healed token is one of the round's k draft steps, never an extra one.
    """
    name, kind, free = "model", "text", False

    def __init__(self, pool: KVPool, draft_vocab: TokenVocab, target_vocab: TokenVocab, heal: bool = True):
        self.pool = pool
        self.dv = draft_vocab
        self.tv = target_vocab
        self.heal = heal
        self._prefix_index = self._index_prefixes(draft_vocab)
        self._open_ids = self._open_whitespace(draft_vocab, target_vocab)

    @staticmethod
    def _index_prefixes(vocab: TokenVocab, depth: int = 4) -> dict[bytes, torch.Tensor]:
        """For every byte string of length <= depth: the ids of tokens starting with it."""
        index: dict[bytes, list[int]] = {}
        for tid, b in enumerate(vocab.token_bytes):
            if not b or tid in vocab.special_ids:
                continue
            for n in range(1, min(depth, len(b)) + 1):
                index.setdefault(b[:n], []).append(tid)
        return {k: torch.tensor(v) for k, v in index.items()}

    @staticmethod
    def _open_whitespace(draft: TokenVocab, target: TokenVocab) -> frozenset[int]:
        """Draft ids whose text ends in whitespace that the draft's tokenizer merges with what
        follows and the target's cannot: a byte-level draft writes "\n" + indentation as one
        token ("\n       " + " return") where a SentencePiece target writes "\n" alone, so
        shared text ending in the target's "\n" is not yet split as the draft will split it.
        (Where the target's tokenizer could merge there too, its boundary is its own choice.)"""
        def prefixes(vocab: TokenVocab) -> set[bytes]:   # the proper prefixes that end in whitespace
            return {b[:m.end()] for i, b in enumerate(vocab.token_bytes) if i not in vocab.special_ids
                    for m in _WHITESPACE.finditer(b, 0, len(b) - 1)}

        draft_open, target_open = prefixes(draft), prefixes(target)
        return frozenset(i for i, b in enumerate(draft.token_bytes)
                         if b and _WHITESPACE.match(b, len(b) - 1) and i not in draft.special_ids
                         and b in draft_open and b not in target_open)

    def forward_ms(self) -> float:
        return self.pool.forward_ms()

    def clear(self) -> None:
        self.pool.clear()

    def end(self, answer) -> None:
        pass

    def _open_end(self, ids: list[int]) -> int:
        """1 when the draft's last id is whitespace it would merge with the text to come (held back
        and re-drafted, so the draft writes "\n" + indentation its own way), else 0."""
        return int(self.heal and bool(ids) and ids[-1] in self._open_ids)

    def _differs(self, draft_id: int, target_id: int | None) -> bool:
        """Does the draft's last token end the shared text differently from the target's?"""
        if not self.heal or draft_id in self.dv.special_ids:
            return False
        if target_id is None or target_id in self.tv.special_ids:
            return False
        return self.dv.token_bytes[draft_id] != self.tv.token_bytes[target_id]

    def begin(self, target_prompt, draft_prompt=None) -> tuple[int, int]:
        if draft_prompt is None:
            raise ValueError("a draft model with another tokenizer needs its own prompt (draft_ids)")
        prompt = list(draft_prompt)
        held = b""
        if len(prompt) > 1 and (self._differs(prompt[-1], target_prompt[-1] if target_prompt else None)
                                or self._open_end(prompt)):
            held = self.dv.token_bytes[prompt.pop()]
        self.offset = len(target_prompt)     # where the target's generated ids start in `seq`
        self.prompt = prompt
        self.held = held                  # bytes in front of the shared continuation
        self.cont: list[int] = []         # draft ids covering a prefix of held + continuation
        # After each sync: (n, text) where cont[:n] writes exactly `text`, a prefix of the shared
        # bytes; the shared bytes only grow, so the next sync checks only the ids after n.
        self.aligned: tuple[int, bytes] = (0, b"")
        self.session = self.pool.session_for(self.prompt)
        return self.session.sync(self.prompt[:-1]) if len(self.prompt) > 1 else (0, 0)

    def _sync(self, shared: bytes, seq: list[int]) -> bytes:
        """Align the draft's ids with the shared bytes; return the pending bytes the next
        draft token must start with (a healed token, or bytes no draft token sequence writes)."""
        tb = self.dv.token_bytes
        kept, done = self.aligned
        if kept > len(self.cont) or not shared.startswith(done):
            kept, done = 0, b""
        pos = len(done)
        for tid in self.cont[kept:]:    # the ids since the last sync: what the draft drafted
            b = tb[tid]
            if shared[pos:pos + len(b)] != b:
                break
            pos += len(b)
            kept += 1
        del self.cont[kept:]
        rest = shared[pos:]
        if not rest:      # the draft's own tokens write the text: nothing to heal
            self.aligned = (kept, shared)
            return b""
        src = _suffix_writing(self.tv, seq[self.offset:], len(rest))
        if src and not self.held[pos:]:
            ids = translate(self.tv, src, seq[:len(seq) - len(src)], self.dv, self.prompt + self.cont)
        else:
            ids = self.dv.continuation_ids(self.prompt + self.cont, rest)
        written = len(self.dv.bytes_of(ids))
        self.cont.extend(ids)
        end = pos + written
        if ids and written == len(rest):
            back = self._unnatural_tail(seq, len(shared) - len(self.held)) or self._open_end(self.cont)
            if back:
                held = self.dv.bytes_of(self.cont[-back:])
                del self.cont[-back:]
                self.aligned = (len(self.cont), shared[:end - len(held)])
                return held
        self.aligned = (len(self.cont), shared[:end])
        return rest[written:]

    def _unnatural_tail(self, seq: list[int], generated: int) -> int:
        """How many of the draft's last ids to hold back for healing: those its own tokenizer
        writes otherwise at the end of the shared text (its last token would start earlier:
        "\n" + "   " kept from two rounds where it writes "\n   "). Decided on the draft's own
        split of its last few ids, not on the target's last token: a draft token that merely
        spans other bytes than the target's ("er" for "ger") is the draft's own split, and
        re-drafting it would cost a step for nothing. Nothing is held back where the target
        split that text itself otherwise than its tokenizer would (a model's choice, carried
        one to one), so the draft keeps the target's committed boundary there."""
        if not self.heal:
            return 0
        tb, n, size = self.dv.token_bytes, 0, 0
        while n < min(len(self.cont), TAIL_TOKENS) and size + len(tb[self.cont[-1 - n]]) <= generated:
            size += len(tb[self.cont[-1 - n]])
            n += 1
        if n < 2:     # one token of shared text: the tokenizer writes it as the sync did
            return 0
        tail = self.cont[-n:]
        data = self.dv.bytes_of(tail)
        own = self.dv.continuation_ids(self.prompt + self.cont[:-n], data)
        if not own or self.dv.bytes_of(own) != data or tb[own[-1]] == tb[tail[-1]]:
            return 0
        src = _suffix_writing(self.tv, seq[self.offset:], len(data))
        if src and self.tv.continuation_ids(seq[:len(seq) - len(src)], data) != src:
            return 0
        return self.dv.tokens_covering(tail[::-1], len(tb[own[-1]]))

    def _mask_for(self, pending: bytes, vocab_size: int) -> torch.Tensor | None:
        """Bool mask of the tokens compatible with the pending bytes: tokens that start with
        them, and shorter tokens that are a prefix of them."""
        mask = torch.zeros(vocab_size, dtype=torch.bool)
        starting = self._prefix_index.get(pending[:4])  # indexed by up to 4 leading bytes
        if starting is not None:
            if len(pending) > 4:
                tb = self.dv.token_bytes
                starting = torch.tensor([t for t in starting.tolist() if tb[t].startswith(pending)], dtype=torch.long)
            mask[starting[starting < vocab_size]] = True
        for n in range(1, len(pending)):
            tid = self.dv.bytes_to_id.get(pending[:n])
            if tid is not None and tid < vocab_size:
                mask[tid] = True
        return mask if mask.any() else None

    def propose(self, seq, generated, k, sampling) -> Draft:
        t0 = time.perf_counter()
        tb = self.dv.token_bytes
        pending = self._sync(self.held + generated, seq)
        healing = len(pending)
        base = self.prompt + self.cont
        if not base:   # an empty draft prompt and no shared text the draft can write yet
            return Draft([])
        before = self.session.forward_calls
        new = b""
        drafted: list[int] = []
        logits = self.session.advance(base, 1)[-1]
        first_ms = (time.perf_counter() - t0) * 1000
        step = 0
        while True:
            if pending:
                mask = self._mask_for(pending, logits.shape[-1])
                if mask is None:
                    break
                logits = logits.masked_fill(~mask, float("-inf"))
            t, conf = greedy(logits, sampling.confidence)
            if t in self.dv.special_ids:
                break
            b = tb[t]
            drafted.append(t)
            if pending:
                take = min(len(pending), len(b))
                pending, b = pending[take:], b[take:]
            new += b
            step += 1
            # k steps, the healed one among them; one more only if those wrote nothing new
            if step >= k and (new or step > k) or (new and not pending and conf < sampling.confidence) \
                    or (new and sampling.decided is not None and sampling.decided(new)):
                break
            logits = self.session.append([t], 1)[-1]   # the cache holds base + drafted[:-1]
        passes = self.session.forward_calls - before
        self.cont.extend(drafted)
        if not new:
            return Draft([], passes=passes, first_ms=first_ms)
        # The tokens after the healed bytes, when none straddles them, keep the draft's split.
        n_heal = self.dv.tokens_covering(drafted, healing)
        if len(self.dv.bytes_of(drafted[:n_heal])) == healing:
            tokens = translate(self.dv, drafted[n_heal:], base + drafted[:n_heal], self.tv, seq)
        else:
            tokens = self.tv.continuation_ids(seq, new)
        return Draft(tokens[:k], passes=passes, first_ms=first_ms)


def _suffix_writing(vocab: TokenVocab, ids: list[int], n_bytes: int) -> list[int]:
    """The last ids that write exactly the last `n_bytes` bytes, or [] when a token straddles."""
    total = 0
    for i in range(len(ids) - 1, -1, -1):
        if total >= n_bytes:
            break
        total += len(vocab.token_bytes[ids[i]]) if ids[i] not in vocab.special_ids else 0
    else:
        i = -1
    return list(ids[i + 1:]) if total == n_bytes and n_bytes else []
