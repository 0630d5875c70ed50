"""Decoding through draft trees (prompt lookup and the draft model in one target pass): greedy
output is the target's own, token for token, and sampled output follows its distribution.

The policy here has its estimates given and frozen (`frozen=True`: free drafting, flat verify
cost), so it builds a tree in every round where both drafters have a proposal; what the trees
look like (branching, merged, one chain) is up to the real drafters."""
from collections import Counter

import pytest

from engine import Drafters, LocalEngine, EngineConfig, GenerationSettings, KVPool, Policy, speculative_generate
from engine.drafters import Draft, LookupDrafter
from engine.policy import Acceptance, Mean, VerifyCost
from tests.sampling_law import TEMPERATURE, TOP_K, TOP_P, chi_square_ok
from tests.tiny_models import tiny_pair_dirs, tiny_same_tokenizer_draft_dir
from tests.unit.test_engine_lossless import MAX_NEW, PROMPTS, _ids
from tests.unit.test_engine_sampling import (N_SAMPLES, _exact_two_token_dist, model_drafter,
                                             small_models)  # noqa: F401 (fixture)


# "ab" comes again at the end: prompt lookup proposes "cd ab ..." beside the draft model, and
# the two chains branch in most first rounds.
PROMPT_TEXT = "abcdab"


def tree_policy() -> Policy:
    """A policy for which every tree pays: drafting is free and verifying costs 1 ms at any width
    (the draft model's tokens right 0.6 of the time)."""
    return Policy(frozen=True, verify=VerifyCost(one=1.0, per_doubling=0.0, n=1), acceptance={"model": Acceptance(0.6)},
                  model_begin=Mean(0.0), model_first=Mean(0.0), model_step=Mean(0.0))


def test_the_frozen_policy_plans_a_tree_whenever_both_draft():
    p = tree_policy()
    five = {"lookup": Draft([1, 2, 3, 4, 5], match=1, source="prompt")}
    assert p.plan(five, model=True, model_ready=True, max_k=16, tree_ok=True).chains == (("lookup", 5), ("model", 16))
    assert p.plan(five, model=True, model_ready=True, max_k=16, tree_ok=False).chains == (("model", 16),)
    assert p.plan({"lookup": Draft([])}, model=True, model_ready=True, max_k=16, tree_ok=True).chains == (("model", 16),)


@pytest.fixture(scope="module")
def engines():
    target_dir, draft_dir = tiny_pair_dirs()
    base = LocalEngine(EngineConfig(target=target_dir, draft="none"))
    others = {"same-tokenizer": LocalEngine(EngineConfig(target=target_dir, draft=tiny_same_tokenizer_draft_dir())),
              "other-tokenizer": LocalEngine(EngineConfig(target=target_dir, draft=draft_dir))}
    for eng in others.values():
        eng.policy = tree_policy()
    return base, others


def test_greedy_through_trees_equals_target_alone(engines):
    base, others = engines
    settings = GenerationSettings(max_new_tokens=MAX_NEW)
    passes = {k: 0 for k in others}
    trees = {k: 0 for k in others}
    accepted = {k: 0 for k in others}
    for prompt in PROMPTS:
        t_ids = _ids(base.target, prompt)
        expected = base.generate(t_ids, settings=settings)
        for name, eng in others.items():
            got = eng.generate(t_ids, _ids(eng.draft, prompt), settings=settings)
            assert got.token_ids == expected.token_ids, (name, prompt)
            assert got.text == expected.text
            passes[name] += got.stats.tree_passes
            trees[name] += sum(n for kind, n in got.stats.rounds_by_drafter.items() if "+" in kind)
            accepted[name] += got.stats.accepted
    # Real branching trees were verified, and the target took tokens from them.
    assert all(n >= 20 for n in passes.values()), passes
    assert all(n > 0 for n in accepted.values()), accepted
    assert all(n > 0 for n in trees.values()), trees


@pytest.mark.parametrize("which", ["same-vocabulary", "other-vocabulary"])
def test_sampling_through_trees_follows_the_target(small_models, which):  # noqa: F811
    """Sample-and-compare down the tree: at each node the target's own sample, descending while
    it is a child. Three new tokens, so the first round's tree has two levels."""
    target, draft, other = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    model, d_prompt = model_drafter(which, target, draft, other, PROMPT_TEXT)
    drafters, policy = Drafters(lookup=LookupDrafter(), model=model), tree_policy()
    pool = KVPool(target.model, 2, 256)
    counts, passes = Counter(), 0
    for i in range(N_SAMPLES):
        settings = GenerationSettings(max_new_tokens=3, temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P, seed=20000 + i)
        r = speculative_generate(target, pool, drafters, prompt, settings, policy, draft_prompt=d_prompt)
        counts[tuple(r.token_ids[:2])] += 1
        passes += r.stats.tree_passes
    assert passes > N_SAMPLES // 4, passes
    assert chi_square_ok(counts, dist, N_SAMPLES), (counts, dist)
