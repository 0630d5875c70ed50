"""Decoding through pairs: prompt lookup's two proposals (the text's copy and the datastore's)
verified together as a tree where they part, at their first token or after shared ones. Greedy output is the
target's own, token for token, sampled output follows its distribution, and the controller
pairs only while the proposal left behind pays for its width.

The stores here hold made-up answers after each prompt: whether the target writes them does not
matter for losslessness, and they make the two proposals disagree."""
from collections import Counter

import pytest

from engine import DraftMemory, Drafters, Engine, EngineConfig, GenerationSettings, KVPool, speculative_generate
from engine.control import OTHER_PRIOR, DraftController, LookupOffer, VerifyCost
from engine.datastore import Datastore, save
from engine.lookup import NgramDrafter
from tests.sampling_law import TEMPERATURE, TOP_K, TOP_P, chi_square_ok
from tests.tiny_models import tiny_pair_dirs
from tests.unit.test_engine_lossless import MAX_NEW, PROMPTS, _ids
from tests.unit.test_engine_sampling import N_SAMPLES, _exact_two_token_dist, small_models  # noqa: F401 (fixture)

PROMPT_TEXT = "abcdab"    # the text's copy after "ab" is "cd..."; the store's, after the whole prompt, is not


def pair_memory() -> DraftMemory:
    """A controller for which every pair pays: verifying costs 1 ms at any width, and the
    proposal lookup leaves is taken to be right half the time."""
    c = DraftController(frozen=True, verify=VerifyCost(one_ms=1.0, per_token_ms=0.0, seen=True))
    c.lookup_other.prior = 0.5
    return DraftMemory(controller=c)


def made_up_store(path, target, prompts: list[str]):
    """After each prompt, the prompt's own ids reversed: a store that matches every prompt
    whole and proposes what the text does not."""
    answers = []
    for prompt in prompts:
        ids = _ids(target, prompt)
        answers.append((ids, ids[::-1][:12] or [5, 6, 7]))
    save(path, answers, target.tokenizer.get_vocab())
    return path


def test_lookup_leaves_the_other_proposal_only_where_they_part(tmp_path):
    vocab = {str(i): i for i in range(16)}
    save(tmp_path / "s.npz", [([], [1, 2, 3, 4, 5, 6])], vocab)
    lookup = NgramDrafter(datastore=Datastore.load(tmp_path / "s.npz", vocab), special_ids=frozenset({0}))
    lookup.read()
    # the store matched "1 2 3" (3 ids), the text "2 3" (2): the store's is taken, the text's left
    got = lookup.propose([7, 2, 3, 9, 8, 1, 2, 3], [], 3, None)
    assert (got.tokens, got.source) == ([4, 5, 6], "datastore")
    assert (got.other.tokens, got.other.source, got.other.match) == ([9, 8, 1], "prompt", 2)
    # the two agree at their first token and part at the second: the tree branches there
    got = lookup.propose([7, 2, 3, 4, 8, 1, 2, 3], [], 3, None)
    assert got.tokens == [4, 5, 6] and got.other.tokens == [4, 8, 1]
    # the text's copy (cut by the special id 0) is the store's first two tokens and no more:
    # nothing to verify beside it
    got = lookup.propose([7, 2, 3, 4, 5, 0, 1, 2, 3], [], 3, None)
    assert got.tokens == [4, 5, 6] and got.other is None


def test_the_controller_pairs_while_the_other_proposal_pays():
    c = pair_memory().controller
    plan = c.plan(LookupOffer(6, other_tokens=4), has_model=False, max_k=16, tree_ok=True)
    assert (plan.drafter, plan.k, plan.other_k) == ("pair", 6, 4)
    assert c.plan(LookupOffer(6, other_tokens=4), has_model=False, max_k=16, tree_ok=False).drafter == "lookup"
    assert c.plan(LookupOffer(6), has_model=False, max_k=16, tree_ok=True).drafter == "lookup"
    # measured: the other proposal is never right, and a wider pass costs more -> no more pairs
    live = DraftController(verify=VerifyCost(one_ms=1.0, per_doubling_ms=0.3, seen=True))
    for _ in range(30):
        plan = live.plan(LookupOffer(6, other_tokens=4), has_model=False, max_k=16, tree_ok=True)
        if plan.drafter == "pair":
            live.record_pair(plan, (plan.k, plan.k), (plan.other_k, 0), 1 + plan.k + plan.other_k,
                             live.verify(1 + plan.k + plan.other_k))
        else:
            live.record(plan, plan.k, plan.k, 0.0, live.verify(1 + plan.k))
    assert live.lookup_other.p(0) < OTHER_PRIOR / 2     # it measured the other proposal
    assert live.plan(LookupOffer(6, other_tokens=4), has_model=False, max_k=16, tree_ok=True).drafter == "lookup"
    assert live.summary()["rounds_by_kind"]["pair"] >= 1


def test_a_pair_that_parts_later_pays_for_what_reaches_its_branch():
    c = pair_memory().controller
    plan = c.plan(LookupOffer(6, other_tokens=4, other_from=2), has_model=False, max_k=16, tree_ok=True)
    assert (plan.drafter, plan.k, plan.other_k, plan.other_from) == ("pair", 6, 4, 2)
    # the taken chain must reach past the shared tokens, else the tree is one chain
    assert c.plan(LookupOffer(2, other_tokens=4, other_from=2), has_model=False, max_k=16,
                  tree_ok=True).drafter == "lookup"
    # each verified token costs: a branch the target seldom gets to (the taken chain's products
    # up to it, 0.5 a position here) no longer pays, one at the root still does
    c.verify = VerifyCost(one_ms=1.0, per_token_ms=0.1, seen=True)
    at = {s: c.plan(LookupOffer(16, other_tokens=4, other_from=s), has_model=False, max_k=16, tree_ok=True)
          for s in (0, 1, 2, 8)}
    assert [at[s].drafter for s in (0, 1, 2, 8)] == ["pair", "pair", "lookup", "lookup"]
    assert at[1].other_from == 1 and at[1].k > 1


def store_of_right_starts(path, engine, prompts: list[str], settings: GenerationSettings):
    """After every prefix of each prompt's greedy answer, the target's next two tokens and then
    made-up ones: where the text's copy is right too, the two proposals share a prefix and part."""
    answers = []
    for prompt in prompts:
        ids = _ids(engine.target, prompt)
        full = ids + engine.generate(ids, settings=settings).token_ids
        answers += [(full[:i], full[i:i + 2] + full[i:i + 8][::-1]) for i in range(1, len(full))]
    save(path, answers, engine.target.tokenizer.get_vocab())
    return path


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    target_dir, _ = tiny_pair_dirs()
    base = Engine(EngineConfig(target=target_dir, draft="none"))
    store = made_up_store(tmp_path_factory.mktemp("store") / "s.npz", base.target, PROMPTS)
    paired = Engine(EngineConfig(target=target_dir, draft="ngram", datastore=str(store)))
    paired.memory = pair_memory()
    return base, paired


def greedy_through(base: Engine, paired: Engine) -> tuple[int, int, int]:
    """Every prompt through both engines, the outputs equal token for token; returns the paired
    engine's pair rounds, tree passes and tokens its pairs shared before they parted."""
    settings = GenerationSettings(max_new_tokens=MAX_NEW)
    pairs = passes = shared = 0
    for prompt in PROMPTS:
        t_ids = _ids(base.target, prompt)
        got = paired.generate(t_ids, settings=settings)
        assert got.token_ids == base.generate(t_ids, settings=settings).token_ids, prompt
        assert set(got.stats.by_position) <= {"lookup", "lookup_other"}
        pairs += got.stats.rounds_by_drafter["pair"]
        passes += got.stats.tree_passes
        shared += got.stats.pair_shared
    return pairs, passes, shared


def test_greedy_through_pairs_equals_target_alone(engines):
    pairs, passes, _ = greedy_through(*engines)
    assert pairs >= 20 and passes == pairs, (pairs, passes)


def test_greedy_through_pairs_that_part_later_equals_target_alone(engines, tmp_path):
    base, _ = engines
    store = store_of_right_starts(tmp_path / "s.npz", base, PROMPTS, GenerationSettings(max_new_tokens=MAX_NEW))
    paired = Engine(EngineConfig(target=base.config.target, draft="ngram", datastore=str(store)))
    paired.memory = pair_memory()
    pairs, _, shared = greedy_through(base, paired)
    assert pairs >= 20 and shared >= 10, (pairs, shared)


@pytest.mark.parametrize("shared_start", [False, True], ids=["parting-at-once", "parting-after-a-shared-token"])
def test_sampling_through_pairs_follows_the_target(small_models, tmp_path, shared_start):  # noqa: F811
    """Sample-and-compare down the pair's tree, as through any tree: two new tokens. The store
    proposes the prompt reversed, or (shared_start) the first token the text's copy proposes and
    then other tokens: the tree branches at its root or below its first node."""
    target, _, _ = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    answer = prompt[::-1]
    if shared_start:
        copy = NgramDrafter().propose(prompt, [], 4, None).tokens     # what the text offers after the prompt
        answer = copy[:1] + [t for t in prompt[::-1] if t != copy[1]]
    save(tmp_path / "s.npz", [(prompt, answer)], target.tokenizer.get_vocab())
    store = Datastore.load(tmp_path / "s.npz", target.tokenizer.get_vocab())
    drafters, memory = Drafters(lookup=NgramDrafter(datastore=store)), pair_memory()
    pool = KVPool(target.model, 2, 256)
    counts, pairs, shared = Counter(), 0, 0
    for i in range(N_SAMPLES):
        settings = GenerationSettings(max_new_tokens=3, temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P,
                                      seed=(31000 if shared_start else 30000) + i)
        r = speculative_generate(target, pool, drafters, prompt, settings, memory)
        counts[tuple(r.token_ids[:2])] += 1
        pairs += r.stats.rounds_by_drafter["pair"]
        shared += r.stats.pair_shared
    assert pairs > N_SAMPLES // 4, pairs
    assert shared > N_SAMPLES // 4 if shared_start else shared == 0, shared
    assert chi_square_ok(counts, dist, N_SAMPLES), (counts, dist)
