"""A draft model that shares the target's vocabulary: it reads the target's ids and drafts
target ids, with its probabilities q for rejection sampling."""
from __future__ import annotations

import time

import torch

from ..kv import KVPool, KVSession
from ..sampling import greedy_ids, sample, target_probs
from ..vocab import TokenVocab
from .base import Draft, Sampling


def choose(logits: torch.Tensor, sampling: Sampling) -> tuple[int, float, torch.Tensor | None]:
    """The draft's token: (token, its probability, q row when sampling)."""
    if sampling.temperature > 0:
        q = target_probs(logits[None], sampling.temperature, sampling.top_k, sampling.top_p)[0]
        t = sample(q, sampling.gen)
        return t, float(q[t]), q
    t, conf = greedy(logits, sampling.confidence)
    return t, conf, None


def greedy(logits: torch.Tensor, confidence: float) -> tuple[int, float]:
    """The draft's greedy token and its probability. The softmax over the vocabulary only where
    a confidence threshold will read it; otherwise the argmax of the logits (1.0 stands for the
    probability: nothing compares it)."""
    t = greedy_ids(logits)[0]
    if confidence <= 0:
        return t, 1.0
    return t, float(torch.softmax(logits, -1)[t])


class ModelDrafter:
    """`vocab` (the shared one) gives the bytes of its tokens, for `Sampling.decided`; without it
    that rule is not checked while drafting (the engine still cuts the draft before verifying)."""
    name, kind, free = "model", "model", False

    def __init__(self, pool: KVPool, special_ids=frozenset(), vocab: TokenVocab | None = None):
        self.pool = pool
        self.vocab = vocab
        self.special_ids = special_ids or (vocab.special_ids if vocab is not None else frozenset())
        self.offset = 0
        self.draft_prompt: list[int] = []
        self.session: KVSession | None = None

    def begin(self, prompt, draft_prompt=None) -> tuple[int, int]:
        self.offset = len(prompt)
        self.draft_prompt = list(draft_prompt if draft_prompt is not None else prompt)
        self.session = self.pool.session_for(self.draft_prompt)
        return self.session.sync(self.draft_prompt[:-1]) if len(self.draft_prompt) > 1 else (0, 0)

    def end(self, answer) -> None:
        pass

    def forward_ms(self) -> float:
        return self.pool.forward_ms()

    def clear(self) -> None:
        self.pool.clear()

    def propose(self, seq, generated, k, sampling) -> Draft:
        ids = self.draft_prompt + seq[self.offset:]
        if not ids:   # nothing for the draft to condition on (an empty draft prompt)
            return Draft([])
        t0, before = time.perf_counter(), self.session.forward_calls
        tokens, qs = [], []
        decided = sampling.decided if self.vocab is not None else None
        logits = self.session.advance(ids, 1)[-1]
        first_ms = (time.perf_counter() - t0) * 1000
        for step in range(k):
            t, conf, q = choose(logits, sampling)
            if t in self.special_ids:
                break
            tokens.append(t)
            if q is not None:
                qs.append(q)
            if step == k - 1 or conf < sampling.confidence or (
                    decided is not None and decided(self.vocab.bytes_of(tokens))):
                break
            logits = self.session.append([t], 1)[-1]   # the cache holds ids + tokens[:-1]
        q = torch.stack(qs) if qs and len(qs) == len(tokens) else None
        return Draft(tokens, q, passes=self.session.forward_calls - before, first_ms=first_ms)
