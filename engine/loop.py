"""Speculative decoding, a round at a time.

A round: the free drafters propose (prompt lookup, the datastore, the copy of a rewritten
region); the policy plans the chain the target verifies, if any (engine/policy.py); the draft
model drafts if planned; the target scores the sequence's last token and the chain in one pass;
the verification rule accepts a prefix of the chain and adds the target's own next token
(engine/sampling.py); the policy and the stats observe; the tokens are emitted. Every rule keeps
the output exactly the target's own.
Invariant: the last token of `seq` is never in the target's cache yet, so every round computes
exactly that token and the chain. The prefill computes the whole prompt when it has a pass to
make anyway, and its last logits give the first token before any drafting.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from .drafters import CopyDrafter, DatastoreDrafter, Draft, Drafter, LookupDrafter, Sampling
from .kv import ContextTooLong, KVPool, KVSession, common_prefix_len
from .load.models import LoadedModel
from .policy import Plan, Policy
from .sampling import greedy_ids, sample, target_probs, verify_greedy, verify_rejection, verify_sample_compare
from .settings import MAX_DRAFT_LENGTH, GenerationResult, GenerationSettings, GenerationStats, StopCheck
from .vocab import decode_bytes

DraftPrompt = list[int] | Callable[[], list[int]] | None   # the draft model's own prompt, or how to build it


@dataclass
class Drafters:
    """The drafters an engine has; any may be None."""
    lookup: LookupDrafter | None = None
    datastore: DatastoreDrafter | None = None
    model: Drafter | None = None      # ModelDrafter (same vocabulary) or TextDrafter (another tokenizer)
    copy: CopyDrafter | None = None   # a request's region to rewrite (TokenPrompt.copy_source)

    def free(self) -> list[Drafter]:
        return [d for d in (self.copy, self.lookup, self.datastore) if d is not None]

    def all(self) -> list[Drafter]:
        return [d for d in (*self.free(), self.model) if d is not None]


@dataclass
class Chain:
    drafter: str
    tokens: list[int]
    asked: int                       # tokens asked for: a chain that stops short failed where it stopped
    q: torch.Tensor | None = None    # the draft model's probabilities (rejection sampling)


@dataclass
class Round:
    """What a round proposed and verifies."""
    plan: Plan
    offers: dict[str, Draft]            # the free proposals by drafter, cut before a decided stop
    chain: Chain | None = None          # the chain verified, if any
    model: Draft | None = None          # the draft model's proposal, when it drafted
    model_ms: float = 0.0
    begin_ms: float | None = None       # the draft model's prefill, when this round began it


@dataclass
class Decoding:
    """One call's state as its rounds go."""
    prompt: list[int]
    draft_prompt: DraftPrompt
    drafters: Drafters
    vocab: object
    stop_check: StopCheck | None
    seq: list[int] = field(default_factory=list)
    out: list[int] = field(default_factory=list)
    gen_bytes: bytes = b""
    model_begun: bool = False

    def cut(self, tokens: list[int]) -> list[int]:
        """`tokens` before the one that decides the answer (`cut_before_stop`)."""
        if self.stop_check is None or not tokens:
            return tokens
        return cut_before_stop(tokens, self.gen_bytes, self.vocab, self.stop_check)

    def decides(self, drafted: bytes) -> bool:
        """Sampling.decided: do these drafted bytes, after the text so far, decide the answer?"""
        return self.stop_check(decode_bytes(self.gen_bytes + drafted)) is not None


def cut_before_stop(tokens: list[int], gen_bytes: bytes, vocab, stop_check: StopCheck) -> list[int]:
    """The draft's tokens before the one that decides the answer (a one-line answer's newline, a
    dedent). Verifying that one is wasted work too: when the draft is right up to it, the target's
    own token after them is that very token (greedy) or its equal in law, and the round's extra
    token would lie past the answer's end; when the draft is wrong before it, it was never
    reached. A draft that is nothing but the deciding token is no draft."""
    text = decode_bytes(gen_bytes + vocab.bytes_of(tokens))
    stop = stop_check(text)
    if stop is None:
        return tokens
    need = len(text[:stop.chars].encode("utf-8")) - len(gen_bytes)
    return tokens[:max(0, vocab.tokens_covering(tokens, need) - 1)]


def propose(d: Decoding, policy: Policy, settings: GenerationSettings, sampling: Sampling, room: int,
            stats: GenerationStats) -> Round:
    """The free proposals (each up to its drafter's `longest`), the plan, and the chain it asks
    for; `room`: the draft tokens the answer still has room for."""
    t0 = time.perf_counter()
    offers, max_k = {}, min(MAX_DRAFT_LENGTH, room)
    for drafter in d.drafters.free():
        k = min(drafter.longest, room)
        draft = drafter.propose(d.seq, d.gen_bytes, k, sampling) if k > 0 else Draft([])
        kept = d.cut(draft.tokens)      # priced for the tokens that can count
        stats.draft_trimmed += len(draft.tokens) - len(kept)
        offers[drafter.name] = replace(draft, tokens=kept)
    has_model = d.drafters.model is not None
    if settings.draft_length == "auto":
        plan = policy.plan(offers, has_model, d.model_begun, max_k)
    else:
        plan = policy.plan_fixed(offers, has_model, min(int(settings.draft_length), max_k))
    stats.plan_ms += (time.perf_counter() - t0) * 1000
    r = Round(plan, offers)
    if plan.chain is not None:
        name, k = plan.chain
        r.chain = Chain(name, offers[name].tokens[:k], k) if name != "model" else draft_model(d, r, k, sampling, stats)
    return r


def draft_model(d: Decoding, r: Round, k: int, sampling: Sampling, stats: GenerationStats) -> Chain | None:
    """The draft model's chain of up to k tokens, cut before a decided stop; its cache is brought
    up to its prompt the first time a round asks (a request drafted without it never pays for
    that). A draft model whose context is too short is dropped for the request."""
    model = d.drafters.model
    try:
        if not d.model_begun:
            d.model_begun, t0 = True, time.perf_counter()
            prompt = d.draft_prompt() if callable(d.draft_prompt) else d.draft_prompt
            stats.draft_reused_tokens, stats.draft_prefill_tokens = model.begin(d.prompt, prompt)
            r.begin_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        draft = model.propose(d.seq, d.gen_bytes, k, sampling)
        r.model, r.model_ms = draft, (time.perf_counter() - t0) * 1000
    except ContextTooLong:
        d.drafters = replace(d.drafters, model=None)
        return None
    drafted = draft.tokens[:k]
    tokens = d.cut(drafted)
    stats.draft_trimmed += len(drafted) - len(tokens)
    # a chain cut by the stop, not by its drafter, counts as asked for the tokens kept
    return Chain("model", tokens, len(tokens) if len(tokens) < len(drafted) else k,
                 draft.q[:len(tokens)] if draft.q is not None else None)


def score(session: KVSession, seq: list[int], chain: list[int]) -> torch.Tensor:
    """One target pass over the sequence's last token and the chain: logits for each of them."""
    return session.advance(seq + chain, n_logits=len(chain) + 1)


def verify(chain: Chain | None, logits: torch.Tensor, settings: GenerationSettings,
           gen: torch.Generator | None) -> tuple[list[int], int]:
    """(the accepted draft tokens, the target's own next token), by the rule that keeps the output
    the target's: greedy agreement, rejection sampling with the draft model's q, or
    sample-and-compare."""
    tokens = chain.tokens if chain is not None else []
    if settings.temperature <= 0:
        n, bonus = verify_greedy(tokens, logits)
        return tokens[:n], bonus
    p = target_probs(logits, settings.temperature, settings.top_k, settings.top_p)
    q = chain.q if chain is not None else None
    if q is not None and tokens:
        if q.shape[-1] != p.shape[-1]:  # vocabulary padding differs: align the supports
            q = torch.nn.functional.pad(q, (0, p.shape[-1] - q.shape[-1]))[:, :p.shape[-1]]
        n, bonus = verify_rejection(tokens, q, p, gen)
    else:
        n, bonus = verify_sample_compare(tokens, p, gen)
    return tokens[:n], bonus


def observe(r: Round, accepted: list[int], bonus: int, verify_ms: float, policy: Policy,
            stats: GenerationStats) -> None:
    """What the round taught the policy, in the call's stats: every free proposal against what the
    target wrote, verified or not; the chain verified by the positions it reached; the costs."""
    written = accepted + [bonus]
    for name, draft in r.offers.items():
        agreed = policy.observe_free(name, draft, written)
        if draft.tokens:
            for counts in (stats.counts(name), stats.source(draft.source)):
                counts.add(proposals=1, proposed=len(draft.tokens), agreed=agreed)
    chain = r.chain
    if chain is not None:
        n = len(accepted)
        stats.counts(chain.drafter).add(chains=1, drafted=len(chain.tokens), accepted=n)
        stats.count_positions(chain.drafter, chain.asked, n)
        if chain.drafter == "model":
            policy.observe_model(chain.asked, n, r.model, r.model_ms, r.begin_ms)
    if r.model is not None:
        ms = r.model_ms + (r.begin_ms or 0.0)
        stats.counts("model").add(proposals=1, proposed=len(r.model.tokens), passes=r.model.passes, ms=ms,
                                  agreed=common_prefix_len(r.model.tokens, written))
        stats.draft_ms += ms
    width = 1 + (len(chain.tokens) if chain is not None else 0)
    policy.observe_pass(width, verify_ms)
    policy.count(r.plan)
    stats.rounds += 1
    stats.rounds_by_drafter[chain.drafter if chain is not None else "none"] += 1
    stats.drafted += width - 1
    stats.accepted += len(accepted)
    stats.verify_ms += verify_ms


def emit(d: Decoding, new: list[int], stops: frozenset) -> str | None:
    """Append the round's tokens; the stop reason if decoding ends here: an end token or a
    decided answer."""
    end = next((i for i, t in enumerate(new) if t in stops), None)
    new = new if end is None else new[:end]
    d.seq.extend(new)
    d.out.extend(new)
    d.gen_bytes += d.vocab.bytes_of(new)
    if end is not None:
        return "eos"
    if d.stop_check is not None:
        stop = d.stop_check(decode_bytes(d.gen_bytes))
        if stop is not None:
            return stop.reason
    return None


def prefill(session: KVSession, prompt: list[int], settings: GenerationSettings, gen: torch.Generator | None,
            stats: GenerationStats, want_first: bool) -> int | None:
    """Bring the target's cache up to the prompt. When the prompt has tokens to compute besides its
    last, the last rides in the same pass and the target's first token comes out of it (None
    otherwise: then the first round scores the last prompt token with its draft). Drafting
    after the first token is known costs nothing for an answer that ends there (an end token, a
    one-line answer's newline), and the drafters see one more token of context."""
    reused = common_prefix_len(session.ids, prompt)
    # (a prompt that fills the session's budget to its last token: round one reports it full)
    if reused >= len(prompt) - 1 or not want_first or len(prompt) > session.max_tokens:
        stats.reused_tokens, computed = session.sync(prompt[:-1])
        stats.prefill_tokens = computed + 1
        return None
    logits = session.advance(prompt, n_logits=1)
    stats.reused_tokens, stats.prefill_tokens = reused, len(prompt) - reused
    if settings.temperature <= 0:
        return greedy_ids(logits[-1])[0]
    return sample(target_probs(logits[-1:], settings.temperature, settings.top_k, settings.top_p)[0], gen)


def speculative_generate(target: LoadedModel, pool: KVPool, drafters: Drafters, prompt: list[int],
                         settings: GenerationSettings, policy: Policy, stop_ids=(), draft_prompt: DraftPrompt = None,
                         cancel: threading.Event | None = None,
                         stop_check: StopCheck | None = None) -> GenerationResult:
    """`stop_check(text so far)` lets the caller end decoding the moment its answer is decided;
    the tokens up to there are exactly the target's own. `draft_prompt` may be a function that
    builds it: it is called only if a round uses the draft model."""
    t0 = time.perf_counter()
    if not prompt:
        raise ValueError("empty prompt: at least one token (e.g. BOS) is needed")
    max_new = settings.max_new_tokens
    if target.max_positions:
        if target.max_positions - len(prompt) <= 0:
            raise ContextTooLong(f"prompt of {len(prompt)} tokens fills the model's context of {target.max_positions}")
        max_new = min(max_new, target.max_positions - len(prompt))
    stats = GenerationStats()
    deadline = t0 + settings.time_budget_ms / 1000 if settings.time_budget_ms else None
    stops = frozenset(stop_ids) | target.vocab.special_ids
    gen = torch.Generator().manual_seed(settings.seed) if settings.seed is not None else None
    session = pool.session_for(prompt)
    calls0, forward0 = session.forward_calls, session.forward_ms
    model0 = drafters.model
    draft_forward0 = model0.forward_ms() if model0 is not None else 0.0
    for drafter in drafters.free():
        drafter.begin(prompt)
    with torch.inference_mode():
        first = prefill(session, prompt, settings, gen, stats, max_new > 0)
    stats.prefill_ms = (time.perf_counter() - t0) * 1000

    d = Decoding(prompt, draft_prompt, drafters, target.vocab, stop_check, seq=list(prompt))
    sampling = Sampling(settings.temperature, settings.top_k, settings.top_p, gen=gen,
                        confidence=settings.draft_confidence if settings.draft_length == "auto" else 0.0,
                        decided=d.decides if stop_check is not None else None)
    reason = None
    if first is not None:
        reason = emit(d, [first], stops)
        stats.first_from_prefill = len(d.out)   # 0 when it was an end token
    with torch.inference_mode():
        while reason is None and len(d.out) < max_new:
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
            elif deadline is not None and time.perf_counter() >= deadline:
                reason = "time_budget"
            if reason is not None:
                break
            r = propose(d, policy, settings, sampling, max_new - len(d.out) - 1, stats)
            chain = r.chain.tokens if r.chain is not None else []
            t1 = time.perf_counter()
            try:
                logits = score(session, d.seq, chain)
            except ContextTooLong:
                reason = "context_full"
                break
            accepted, bonus = verify(r.chain, logits, settings, gen)
            observe(r, accepted, bonus, (time.perf_counter() - t1) * 1000, policy, stats)
            reason = emit(d, accepted + [bonus], stops)

    for drafter in drafters.all():
        drafter.end(d.out)
    stats.new_tokens = len(d.out)
    stats.target_calls = session.forward_calls - calls0
    stats.target_forward_ms = session.forward_ms - forward0
    stats.draft_calls = sum(c.passes for c in stats.drafters.values())
    if model0 is not None:
        stats.draft_forward_ms = model0.forward_ms() - draft_forward0
    stats.policy = policy.summary()
    stats.latency_ms = (time.perf_counter() - t0) * 1000
    return GenerationResult(decode_bytes(d.gen_bytes), d.out, reason or "max_tokens", stats)
