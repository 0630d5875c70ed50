"""Speculative decoding in one function.

One round: a drafter proposes k target ids, the target scores [last, *candidates] in ONE
forward pass, the verification rule accepts a prefix and adds the target's own next token.
When prompt lookup and the draft model both draft, their two chains form a tree below `last`
(engine/tree.py) that the target scores in one pass too, and the round walks down it; so do
lookup's two proposals (the text's copy and the datastore's) where they part (a "pair").
Which drafter (prompt lookup, the draft model, a tree of two chains, or none) and how many tokens is
decided each round by `plan_round`: the cost-aware controller (engine/control.py) under `draft_length:
auto`, or a fixed number.
Invariant: the last token of `seq` is never in the target's cache yet, so every round
computes exactly len(candidates) + 1 positions. The prefill computes the whole prompt when it
has a pass to make anyway, and its last logits give the first token before any drafting.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from .control import DraftController, DraftWork, LookupOffer, Plan
from .drafters import Draft, Drafter, Sampling
from .lookup import NgramDrafter
from .kv import ContextTooLong, KVPool, KVSession, common_prefix_len
from .models import LoadedModel
from .sampling import greedy_ids, sample, target_probs, verify_greedy, verify_rejection, verify_sample_compare, verify_tree
from .settings import MAX_DRAFT_LENGTH, GenerationResult, GenerationSettings, GenerationStats, StopCheck
from .tree import DraftTree, build_tree
from .vocab import decode_bytes


@dataclass
class Drafters:
    """The ways of drafting an engine has; either may be None."""
    lookup: NgramDrafter | None = None
    model: Drafter | None = None      # ModelDrafter (same vocabulary) or TextDrafter (another tokenizer)

    def lookup_drafts(self, settings: GenerationSettings) -> bool:
        """Whether prompt lookup drafts under `settings`."""
        return self.lookup is not None


@dataclass
class DraftMemory:
    """What the Engine keeps between requests about drafting: the next request starts from it."""
    controller: DraftController = field(default_factory=DraftController)


def plan_round(drafters: Drafters, memory: DraftMemory, settings: GenerationSettings, lookup: LookupOffer,
               max_k: int, model_ready: bool = True, tree_ok: bool = False, model_behind: int = 0) -> Plan:
    """Which drafter drafts this round, and how many tokens (trees only under the controller)."""
    if max_k <= 0:
        return Plan("none", 0, 0.0)
    if settings.draft_length != "auto":        # a fixed number means that number
        k = min(int(settings.draft_length), max_k)
        if lookup.tokens and (lookup.tokens >= k or drafters.model is None):
            return Plan("lookup", min(k, lookup.tokens), 0.0)
        return Plan("model", k, 0.0) if drafters.model is not None else Plan("none", 0, 0.0)
    return memory.controller.plan(lookup, drafters.model is not None, max_k, model_ready, tree_ok, model_behind)


def _trim_past_stop(cand: list[int], gen_bytes: bytes, vocab, stop_check: StopCheck) -> list[int]:
    """The draft's tokens before the one that decides the answer (a one-line answer's newline,
    a dedent). Verifying that one is wasted work too: when the draft is right up to it, the
    target's own token after them is that very token (greedy) or its equal in law, and the
    round's extra token would lie past the answer's end; when the draft is wrong before it, it
    was never reached. A draft that is nothing but the deciding token is no draft: the round
    costs a one-token pass and yields the same."""
    text = decode_bytes(gen_bytes + vocab.bytes_of(cand))
    stop = stop_check(text)
    if stop is None:
        return cand
    need = len(text[:stop.chars].encode("utf-8")) - len(gen_bytes)
    return cand[:max(0, vocab.tokens_covering(cand, need) - 1)]


def _verify_chain(cand: list[int], draft: Draft, logits: torch.Tensor, settings: GenerationSettings,
                  gen: torch.Generator | None) -> tuple[int, int]:
    """(accepted draft tokens, the target's own next token) by the rule that keeps the output
    the target's: greedy agreement, rejection sampling with the draft's q, or sample-and-compare."""
    if settings.temperature <= 0:
        return verify_greedy(cand, logits)
    p = target_probs(logits, settings.temperature, settings.top_k, settings.top_p)
    if draft.q is not None and cand:
        q = draft.q[:len(cand)]
        if q.shape[-1] != p.shape[-1]:  # vocab padding differs: align supports
            q = torch.nn.functional.pad(q, (0, p.shape[-1] - q.shape[-1]))[:, :p.shape[-1]]
        return verify_rejection(cand, q, p, gen)
    return verify_sample_compare(cand, p, gen)


def _score(session: KVSession, seq: list[int], prop: Proposal) -> torch.Tensor:
    """One target pass: over [last, *cand], or over the tree rooted at last."""
    if prop.tree is None:
        return session.advance(seq + prop.cand, n_logits=len(prop.cand) + 1)
    return session.advance_tree(seq, prop.tree)


def _verify(prop: Proposal, logits: torch.Tensor, session: KVSession, settings: GenerationSettings,
            gen: torch.Generator | None) -> tuple[list[int], int]:
    """(the accepted draft tokens, the target's own next token); a tree's accepted path stays in
    the target's cache, its other branches go."""
    if prop.tree is None:
        n, bonus = _verify_chain(prop.cand, prop.draft, logits, settings, gen)
        return prop.cand[:n], bonus
    probs = None
    if settings.temperature > 0:
        probs = target_probs(logits, settings.temperature, settings.top_k, settings.top_p)
    path, bonus = verify_tree(prop.tree, logits, probs, gen)
    session.keep_path(prop.tree, path)
    return [prop.tree.tokens[i] for i in path], bonus


def _record(prop: Proposal, accepted: list[int], verify_ms: float, stats: GenerationStats,
            memory: DraftMemory, settings: GenerationSettings) -> None:
    """The round in the call's stats, and what it taught the controller."""
    plan, n = prop.plan, len(accepted)
    stats.count_round(plan.drafter, prop.width - 1, n, prop.draft_ms + (prop.begin_ms or 0.0), verify_ms)
    stats.tree_passes += prop.tree is not None
    if prop.model_work is not None:
        stats.draft_first_ms += prop.model_work.first_ms
    # a tree's or a pair's two chains as (drafted, accepted), counted here and taught below
    # (a pair's other chain: its branch, None where the target never got there)
    chains = None
    if plan.drafter == "tree":
        chains = [(len(c), common_prefix_len(accepted, c)) for c in prop.chains]
        for (name, k), (_, agreed) in zip((("lookup", plan.lookup_k), ("model", plan.k)), chains):
            stats.count_positions(name, k, agreed)
    elif plan.drafter == "pair":
        taken = prop.chains[0]
        chains = [(len(taken), common_prefix_len(accepted, taken)), _other_branch(prop, accepted)]
        stats.count_positions("lookup", plan.k, chains[0][1])
        stats.pair_shared += plan.other_from
        if chains[1] is not None:
            stats.count_positions("lookup_other", plan.other_k, chains[1][1])
    elif plan.drafter != "none":
        stats.count_positions(plan.drafter, plan.k, n)
    if settings.draft_length != "auto":
        return
    if plan.drafter == "pair":
        memory.controller.record_pair(plan, *chains, prop.width, verify_ms)
    elif plan.drafter == "tree":
        memory.controller.record_tree(plan, *chains, prop.width, prop.draft_ms, verify_ms, prop.begin_ms,
                                      model_work=prop.model_work)
    else:
        memory.controller.record(plan, len(prop.cand), n, prop.draft_ms, verify_ms, prop.begin_ms,
                                 model_work=prop.model_work)


def _other_branch(prop: Proposal, accepted: list[int]) -> tuple[int, int] | None:
    """A pair round's other branch: (drafted, accepted) past the tokens the two chains share,
    or None where the target parted from both before the branch (it was never reached)."""
    shared, other = prop.plan.other_from, prop.chains[1]
    agreed = common_prefix_len(accepted, other)
    return (len(other) - shared, agreed - shared) if agreed >= shared else None


DraftPrompt = list[int] | Callable[[], list[int]] | None   # the draft model's own prompt, or how to build it


def _begin_model(drafters: Drafters, prompt: list[int], draft_prompt: DraftPrompt,
                 stats: GenerationStats) -> Drafters:
    """Bring the draft model's cache up to its prompt, the first time a round wants it (a request
    the controller drafts by lookup alone never pays for it); a draft whose context is too short
    for its prompt is dropped for this request."""
    if callable(draft_prompt):
        draft_prompt = draft_prompt()
    try:
        stats.draft_reused_tokens, stats.draft_prefill_tokens = drafters.model.begin(prompt, draft_prompt)
    except ContextTooLong:
        return Drafters(drafters.lookup, None)
    return drafters


@dataclass
class Decoding:
    """One call's state as its rounds go."""
    prompt: list[int]
    draft_prompt: DraftPrompt
    drafters: Drafters
    use_lookup: bool
    seq: list[int] = field(default_factory=list)
    out: list[int] = field(default_factory=list)
    gen_bytes: bytes = b""
    model_begun: bool = False
    model_behind: int = 0    # tokens written since the draft model last ran (it catches up on them)


@dataclass
class Proposal:
    """What a round puts to the target: a chain (`cand`, verified with the draft's q when it has
    one) or a tree of two chains (`tree`, with `chains` as drafted): the lookup's and the
    model's, or lookup's two proposals (the one taken first)."""
    plan: Plan
    cand: list[int]
    draft: Draft = field(default_factory=lambda: Draft([]))
    tree: DraftTree | None = None
    chains: tuple[list[int], list[int]] = ([], [])
    draft_ms: float = 0.0
    model_draft: Draft | None = None   # the draft model's proposal as drafted (before any cut), when it drafted
    begin_ms: float | None = None   # the draft model's prefill, when this round began it

    @property
    def model_work(self) -> DraftWork | None:
        return self.model_draft.work if self.model_draft is not None else None

    @property
    def width(self) -> int:
        """Tokens the target scores this round."""
        return len(self.tree.tokens) if self.tree is not None else len(self.cand) + 1


def _model_behind(prop: Proposal, accepted: list[int], bonus: int, behind: int) -> int:
    """The tokens the draft model's next first pass will catch up on (beyond the one it needs
    anyway) after this round adds accepted + [bonus]. A round it drafted leaves its cache holding
    what it drafted but the last token, so it lacks what the target wrote otherwise (a tree's
    lookup path, a rejection); any other round adds all of its tokens."""
    if prop.model_work is None:
        return behind + len(accepted) + 1
    return max(0, len(accepted) - common_prefix_len(accepted + [bonus], prop.model_draft.tokens[:-1]))


def _decides(d: Decoding, stop_check: StopCheck | None) -> Callable[[bytes], bool] | None:
    """Sampling.decided for this call: do these drafted bytes, after the text generated so far,
    decide the answer? (The draft is cut before the deciding token anyway: `_trim_past_stop`.)"""
    if stop_check is None:
        return None
    return lambda drafted: stop_check(decode_bytes(d.gen_bytes + drafted)) is not None


def _cut_at_stop(cand: list[int], d: Decoding, vocab, stop_check: StopCheck | None,
                 stats: GenerationStats | None) -> list[int]:
    """`cand` cut before the token that decides the answer; the tokens cut count in `stats`
    (None: the caller counts them once it knows the chain is drafted)."""
    if stop_check is None or not cand:
        return cand
    trimmed = _trim_past_stop(cand, d.gen_bytes, vocab, stop_check)
    if stats is not None:
        stats.draft_trimmed += len(cand) - len(trimmed)
    return trimmed


def _asked(asked: int, drafted: list[int], kept: list[int]) -> int:
    """A chain cut by the stop, not by its drafter, counts as asked for the tokens kept."""
    return len(kept) if len(kept) < len(drafted) else asked


def _model_draft(d: Decoding, k: int, sampling: Sampling) -> Draft:
    try:
        return d.drafters.model.propose(d.seq, d.gen_bytes, k, sampling)
    except ContextTooLong:
        d.drafters = Drafters(d.drafters.lookup, None)
        return Draft([])


def _as_tree(root: int, plan: Plan, lookup: list[int], model: Draft) -> Proposal:
    """Both chains below `root`; chains that merge into one (one a prefix of the other) are
    verified as that chain, with the model's q when it is the model's."""
    tree = build_tree(root, [lookup, model.tokens])
    if tree.leaves > 1:
        return Proposal(plan, [], tree=tree, chains=(lookup, model.tokens))
    cand = tree.longest_chain()
    return Proposal(plan, cand, model if cand == model.tokens else Draft(cand), chains=(lookup, model.tokens))


def _draft(d: Decoding, memory: DraftMemory, settings: GenerationSettings, sampling: Sampling, vocab,
           stop_check: StopCheck | None, max_k: int, stats: GenerationStats, tree_ok: bool) -> Proposal:
    """The round's plan and what it drafted, cut where the answer would already be decided (a
    chain cut by the stop, not by its drafter, counts as asked for that many tokens)."""
    t0 = time.perf_counter()
    found = d.drafters.lookup.propose(d.seq, d.gen_bytes, max_k, sampling) if d.use_lookup and max_k > 0 else Draft([])
    cut = lambda c: _cut_at_stop(c, d, vocab, stop_check, stats)  # noqa: E731
    # Cut before the plan: a proposal that runs past where the answer is decided (a one-line
    # answer's line end) is priced for the tokens that can count.
    lookup = cut(found.tokens)
    # lookup's other proposal, cut alike (its cut tokens count only in a round that verifies
    # it); it shares its first `shared` tokens with the one taken, then branches
    other = _cut_at_stop(found.other.tokens, d, vocab, stop_check, None) if found.other is not None else []
    shared = common_prefix_len(lookup, other)
    offer = LookupOffer(len(lookup), found.match, found.source, len(other) - shared, shared, len(d.out))
    plan = plan_round(d.drafters, memory, settings, offer, max_k, d.model_begun, tree_ok, d.model_behind)
    # The lookup search and the plan are paid whatever the plan is: they are not the drafter's
    # cost (counted in draft_ms, from which the controller learns a draft step's price).
    t1 = time.perf_counter()
    stats.plan_ms += (t1 - t0) * 1000
    t0 = t1
    begin_ms = None
    if plan.drafter in ("model", "tree") and not d.model_begun:
        d.model_begun, t_begin = True, time.perf_counter()
        d.drafters = _begin_model(d.drafters, d.prompt, d.draft_prompt, stats)
        begin_ms = (time.perf_counter() - t_begin) * 1000
        t0 += begin_ms / 1000
        if d.drafters.model is None:
            plan = replace(plan, drafter="lookup", k=plan.lookup_k, lookup_k=0) \
                if plan.drafter == "tree" else Plan("none", 0, 0.0)
    if plan.drafter == "pair":    # lookup's two proposals part: the tree branches there
        chains = (lookup[:plan.k], other[:plan.other_from + plan.other_k])
        stats.draft_trimmed += len(found.other.tokens) - len(other)
        prop = Proposal(plan, [], tree=build_tree(d.seq[-1], list(chains)), chains=chains)
    elif plan.drafter == "tree":
        model = _model_draft(d, plan.k, sampling)
        chain_l, chain_m = lookup[:plan.lookup_k], cut(model.tokens[:plan.k])
        plan.k, plan.lookup_k = (_asked(plan.k, model.tokens[:plan.k], chain_m),
                                 _asked(plan.lookup_k, lookup[:plan.lookup_k], chain_l))
        prop = _as_tree(d.seq[-1], plan, chain_l, Draft(chain_m, model.q))
        prop.model_draft = model
    else:
        draft = Draft(lookup[:plan.k]) if plan.drafter == "lookup" else (
            _model_draft(d, plan.k, sampling) if plan.drafter == "model" else Draft([]))
        cand = cut(draft.tokens[:plan.k]) if plan.drafter == "model" else draft.tokens[:plan.k]
        plan.k = _asked(plan.k, draft.tokens[:plan.k], cand)   # (the round's own Plan: set in place)
        prop = Proposal(plan, cand, draft, model_draft=draft if draft.work is not None else None)
    prop.draft_ms, prop.begin_ms = (time.perf_counter() - t0) * 1000, begin_ms
    return prop


def _accept(d: Decoding, new: list[int], stops: frozenset, vocab, settings: GenerationSettings,
            stop_check: StopCheck | None) -> str | None:
    """Append the round's tokens; the stop reason if decoding ends here: an end token or a
    decided answer."""
    for i, t in enumerate(new):
        if t in stops:
            d.seq.extend(new[:i])
            d.out.extend(new[:i])
            d.gen_bytes += vocab.bytes_of(new[:i])
            return "eos"
    d.seq.extend(new)
    d.out.extend(new)
    d.gen_bytes += vocab.bytes_of(new)
    if stop_check is not None:
        stop = stop_check(decode_bytes(d.gen_bytes))
        if stop is not None:
            return stop.reason
    return None


def _prefill(session: KVSession, prompt: list[int], settings: GenerationSettings, gen: torch.Generator | None,
             stats: GenerationStats, want_first: bool) -> int | None:
    """Bring the target's cache up to the prompt. When the prompt has tokens to compute besides its
    last, the last rides in the same pass and the target's first token comes out of it (None
    otherwise: then the first round scores the last prompt token with its draft). Drafting
    after the first token is known costs nothing for an answer that ends there (an end token, a
    one-line answer's newline), and the drafter sees one more token of context."""
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
                         settings: GenerationSettings, memory: DraftMemory,
                         stop_ids=(), draft_prompt: DraftPrompt = None,
                         cancel: threading.Event | None = None,
                         stop_check: StopCheck | None = None) -> GenerationResult:
    """`stop_check(text so far)` lets the caller end decoding the moment its answer is decided;
    the tokens up to there are exactly the target's own (greedy output is unchanged).
    `draft_prompt` may be a function that builds it: it is called only if a round uses the model."""
    t0 = time.perf_counter()
    stats = GenerationStats()
    if not prompt:
        raise ValueError("empty prompt: at least one token (e.g. BOS) is needed")
    deadline = t0 + settings.time_budget_ms / 1000 if settings.time_budget_ms else None
    stops = frozenset(stop_ids) | target.vocab.special_ids
    gen = torch.Generator().manual_seed(settings.seed) if settings.seed is not None else None
    auto = settings.draft_length == "auto"
    max_new = settings.max_new_tokens
    if target.max_positions:
        if target.max_positions - len(prompt) <= 0:
            raise ContextTooLong(f"prompt of {len(prompt)} tokens fills the model's context of {target.max_positions}")
        max_new = min(max_new, target.max_positions - len(prompt))

    session = pool.session_for(prompt)
    calls0, fwd0 = session.forward_calls, session.forward_ms
    model0 = drafters.model
    d_calls0, d_fwd0 = (model0.draft_calls, model0.forward_ms()) if model0 is not None else (0, 0.0)
    with torch.inference_mode():
        first = _prefill(session, prompt, settings, gen, stats, max_new > 0)
    stats.prefill_ms = (time.perf_counter() - t0) * 1000

    d = Decoding(prompt, draft_prompt, drafters, seq=list(prompt),
                 use_lookup=drafters.lookup_drafts(settings))
    sampling = Sampling(settings.temperature, settings.top_k, settings.top_p,
                        confidence=settings.draft_confidence if auto else 0.0, gen=gen,
                        decided=_decides(d, stop_check))
    stop_reason = None
    if first is not None:
        d.model_behind = 1
        stop_reason = _accept(d, [first], stops, target.vocab, settings, stop_check)
        stats.first_from_prefill = len(d.out)   # 0 when it was an end token
    with torch.inference_mode():
        while stop_reason is None and len(d.out) < max_new:
            if cancel is not None and cancel.is_set():
                stop_reason = "cancelled"
                break
            if deadline is not None and time.perf_counter() >= deadline:
                stop_reason = "time_budget"
                break
            max_k = min(MAX_DRAFT_LENGTH, max_new - len(d.out) - 1)
            prop = _draft(d, memory, settings, sampling, target.vocab, stop_check, max_k, stats, session.supports_tree)
            t2 = time.perf_counter()
            try:
                logits = _score(session, d.seq, prop)
            except ContextTooLong:
                stop_reason = "context_full"
                break
            accepted, bonus = _verify(prop, logits, session, settings, gen)
            _record(prop, accepted, (time.perf_counter() - t2) * 1000, stats, memory, settings)
            d.model_behind = _model_behind(prop, accepted, bonus, d.model_behind)
            stop_reason = _accept(d, accepted + [bonus], stops, target.vocab, settings, stop_check)
    stop_reason = stop_reason or "max_tokens"

    if d.drafters.lookup is not None:
        # what reading the documents gained, judged by a target step's cost: measured under the
        # cost-aware controller only; a cancelled request paid the read for part of an answer
        verify = memory.controller.verify
        judged = settings.cost_aware and verify.seen and stop_reason != "cancelled"
        d.drafters.lookup.remember(d.out, verify(1) if judged else None)
    stats.new_tokens = len(d.out)
    stats.target_calls = session.forward_calls - calls0
    stats.target_forward_ms = session.forward_ms - fwd0
    if model0 is not None:
        stats.draft_forward_ms = model0.forward_ms() - d_fwd0
        stats.draft_calls = model0.draft_calls - d_calls0
    if settings.cost_aware:
        stats.controller = memory.controller.summary()
    stats.latency_ms = (time.perf_counter() - t0) * 1000
    return GenerationResult(text=decode_bytes(d.gen_bytes), token_ids=d.out, stop_reason=stop_reason, stats=stats)
