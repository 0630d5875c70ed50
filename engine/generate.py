"""Speculative decoding in one function.

One round: the drafter proposes k target ids, the target scores [last, *candidates] in ONE
forward pass, the verification rule accepts a prefix and adds the target's own next token.
Invariant: the last token of `seq` is never in the target's cache yet, so every round
computes exactly len(candidates) + 1 positions.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from .drafters import Draft, NoDrafter, Sampling
from .kv import ContextTooLong, KVPool
from .models import LoadedModel
from .sampling import sample, target_probs, verify_greedy, verify_rejection, verify_sample_compare
from .settings import MAX_DRAFT_LENGTH, GenerationResult, GenerationSettings, GenerationStats, StopCheck
from .vocab import decode_bytes


@dataclass
class DraftLength:
    """Adaptive draft length: +2 after a fully accepted round, -1 after a rejection.
    Lives in the Engine, so the next request starts from what worked."""
    k: int = 4

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        if accepted == drafted:
            self.k = min(MAX_DRAFT_LENGTH, self.k + 2)
        else:
            self.k = max(1, self.k - 1)


def _find_stop(text: str, stops: tuple[str, ...], search_from: int) -> int:
    cut = -1
    for s in stops:
        i = text.find(s, max(0, search_from - len(s)))
        if i >= 0 and (cut < 0 or i < cut):
            cut = i
    return cut


def _trim_past_stop(cand: list[int], gen_bytes: bytes, vocab, stop_check: StopCheck) -> list[int]:
    """The draft's tokens up to the one that decides the answer: verifying more is wasted work."""
    stop = stop_check(decode_bytes(gen_bytes + vocab.bytes_of(cand)))
    if stop is None:
        return cand
    for j in range(1, len(cand) + 1):
        if len(decode_bytes(gen_bytes + vocab.bytes_of(cand[:j]))) >= stop.chars:
            return cand[:j]
    return cand


def speculative_generate(target: LoadedModel, pool: KVPool, drafter, prompt: list[int],
                         settings: GenerationSettings, draft_length: DraftLength,
                         stop_ids=(), draft_prompt: list[int] | None = None,
                         cancel: threading.Event | None = None,
                         stop_check: StopCheck | None = None) -> GenerationResult:
    """`stop_check(text so far)` lets the caller end decoding the moment its answer is decided;
    the tokens up to there are exactly the target's own (greedy output is unchanged)."""
    t0 = time.perf_counter()
    stats = GenerationStats()
    if not prompt:
        raise ValueError("empty prompt: at least one token (e.g. BOS) is needed")
    deadline = t0 + settings.time_budget_ms / 1000 if settings.time_budget_ms else None
    stops = frozenset(stop_ids) | target.vocab.special_ids
    gen = torch.Generator().manual_seed(settings.seed) if settings.seed is not None else None
    greedy = settings.temperature <= 0
    fixed_k = None if settings.draft_length == "auto" else int(settings.draft_length)
    sampling = Sampling(settings.temperature, settings.top_k, settings.top_p,
                        confidence=settings.draft_confidence if fixed_k is None else 0.0, gen=gen)
    max_new = settings.max_new_tokens
    if target.max_positions:
        max_new = min(max_new, target.max_positions - len(prompt))
        if max_new <= 0:
            raise ContextTooLong(f"prompt of {len(prompt)} tokens fills the model's context of {target.max_positions}")

    # Prefill everything but the last prompt token (reusing the cached prefix).
    session = pool.session_for(prompt)
    calls0, fwd0 = session.forward_calls, session.forward_ms
    d_pool = getattr(drafter, "pool", None)
    d_fwd0 = sum(s.forward_ms for s in d_pool.sessions) if d_pool else 0.0
    model_drafter, draft_calls0 = drafter, drafter.draft_calls  # kept for stats if dropped below
    with torch.inference_mode():
        reused, computed = session.sync(prompt[:-1])
        stats.reused_tokens, stats.prefill_tokens = reused, computed + 1
        try:
            drafter.begin(prompt, draft_prompt)
        except ContextTooLong:  # the draft's context is shorter: go on without it
            drafter = NoDrafter()
        d_prefill = getattr(drafter, "prefill", (0, 0))
        stats.draft_reused_tokens, stats.draft_prefill_tokens = d_prefill
    stats.prefill_ms = (time.perf_counter() - t0) * 1000

    seq = list(prompt)
    out: list[int] = []
    gen_bytes = b""
    text_checked = 0
    stop_reason = "max_tokens"
    with torch.inference_mode():
        while len(out) < max_new:
            if cancel is not None and cancel.is_set():
                stop_reason = "cancelled"
                break
            if deadline is not None and time.perf_counter() >= deadline:
                stop_reason = "time_budget"
                break
            k = min(fixed_k if fixed_k is not None else draft_length.k, max_new - len(out) - 1)
            t1 = time.perf_counter()
            try:
                draft = drafter.propose(seq, gen_bytes, k, sampling) if k > 0 else Draft([])
            except ContextTooLong:
                drafter, draft = NoDrafter(), Draft([])
            cand = draft.tokens[:max(k, 0)]
            if stop_check is not None and cand:
                trimmed = _trim_past_stop(cand, gen_bytes, target.vocab, stop_check)
                stats.draft_trimmed += len(cand) - len(trimmed)
                cand = trimmed
            t2 = time.perf_counter()
            try:
                logits = session.advance(seq + cand, n_logits=len(cand) + 1)
            except ContextTooLong:
                stop_reason = "context_full"
                break
            if greedy:
                n, bonus = verify_greedy(cand, logits)
            else:
                p = target_probs(logits, settings.temperature, settings.top_k, settings.top_p)
                if draft.q is not None and cand:
                    q = draft.q[:len(cand)]
                    if q.shape[-1] != p.shape[-1]:  # vocab padding differs: align supports
                        q = torch.nn.functional.pad(q, (0, p.shape[-1] - q.shape[-1]))[:, :p.shape[-1]]
                    n, bonus = verify_rejection(cand, q, p, gen)
                else:
                    n, bonus = verify_sample_compare(cand, p, gen)
            t3 = time.perf_counter()
            stats.draft_ms += (t2 - t1) * 1000
            stats.verify_ms += (t3 - t2) * 1000
            stats.rounds += 1
            stats.drafted += len(cand)
            stats.accepted += n
            if fixed_k is None:
                draft_length.update(len(cand), n)

            new = cand[:n] + [bonus]
            for i, t in enumerate(new):
                if t in stops:
                    new = new[:i]
                    stop_reason = "eos"
                    break
            seq.extend(new)
            out.extend(new)
            gen_bytes += target.vocab.bytes_of(new)
            if stop_reason == "eos":
                break
            if stop_check is not None:
                stop = stop_check(decode_bytes(gen_bytes))
                if stop is not None:
                    stop_reason = stop.reason
                    break
            if settings.stop_strings:
                text = decode_bytes(gen_bytes)
                cut = _find_stop(text, settings.stop_strings, text_checked)
                text_checked = len(text)
                if cut >= 0:
                    gen_bytes = text[:cut].encode("utf-8")
                    stop_reason = "stop_string"
                    break

    stats.new_tokens = len(out)
    stats.target_calls = session.forward_calls - calls0
    stats.target_forward_ms = session.forward_ms - fwd0
    if d_pool:
        stats.draft_forward_ms = sum(s.forward_ms for s in d_pool.sessions) - d_fwd0
    stats.draft_calls = model_drafter.draft_calls - draft_calls0
    stats.final_draft_length = fixed_k if fixed_k is not None else draft_length.k
    stats.latency_ms = (time.perf_counter() - t0) * 1000
    return GenerationResult(text=decode_bytes(gen_bytes), token_ids=out, stop_reason=stop_reason, stats=stats)
