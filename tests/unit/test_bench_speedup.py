"""The suite's formula (bench/speedup.py) on engine stats written out by hand: the closed form,
per-position acceptance, the costs taken from the no-draft configuration, and the prediction
for a mix of rounds worked out on paper."""
from __future__ import annotations

import pytest

from bench.speedup import (Totals, chain_product, expected_tokens, measure_costs, measured_acceptance,
                           predicted_rate, speedup, tree_tokens)


def call(rounds: dict, drafted: int, accepted: int, new: int, latency: float, prefill: float, draft: float,
         verify: float, controller: dict | None = None) -> dict:
    """One engine call's stats, keyed as GenerationStats.as_dict() keys them."""
    return {"rounds": sum(rounds.values()), "rounds_by_drafter": rounds, "drafted": drafted, "accepted": accepted,
            "new_tokens": new, "latency_ms": latency, "prefill_ms": prefill, "draft_ms": draft,
            "verify_ms": verify, "controller": controller or {}}


@pytest.mark.parametrize("a", [0.0, 0.3, 0.5, 0.9])
@pytest.mark.parametrize("k", [0, 1, 4, 16])
def test_one_rate_gives_the_closed_form(a, k):
    assert expected_tokens([a], k) == pytest.approx((1 - a ** (k + 1)) / (1 - a))


def test_acceptance_by_position_and_fractional_length():
    # 1 + p1 + p1 p2 + p1 p2 p3, the last position's rate carried on
    assert expected_tokens([0.5, 1.0], 3) == pytest.approx(2.5)
    assert expected_tokens([0.8, 0.5], 2) == pytest.approx(1 + 0.8 + 0.4)
    # half a token more than k = 1: halfway to k = 2
    assert expected_tokens([0.5], 1.5) == pytest.approx((1.5 + 1.75) / 2)
    assert expected_tokens([], 3) == 1.0


def test_a_tree_of_one_chain_is_that_chain_and_two_chains_never_lose():
    lookup, model = [0.6, 0.5], [0.7]
    assert tree_tokens(lookup, model, 2, 0) == pytest.approx(expected_tokens(lookup, 2))
    both = tree_tokens(lookup, model, 2, 2)
    assert both > max(expected_tokens(lookup, 2), expected_tokens(model, 2))
    # depth 1: 0.6 + 0.7 - 0.42; depth 2: 0.3 + 0.49 - 0.147
    assert both == pytest.approx(1 + 0.88 + 0.643)


def test_costs_and_prediction_for_a_mix_of_rounds():
    no_draft = [call({"none": 10}, 0, 0, 10, latency=120, prefill=20, draft=0, verify=90)]   # 9 ms per token
    controller = {"lookup": {"acceptance_by_position": [0.5], "step_ms": 0.1},
                  "model": {"acceptance_by_position": [0.8, 0.5], "step_ms": 1.0, "begin_ms": 5.0}}
    # 2 none rounds, 2 lookup rounds, 2 model rounds, 12 drafted (k = 3), 6 accepted, 12 tokens.
    mixed = [call({"none": 2, "lookup": 2, "model": 2}, 12, 6, 12, latency=150, prefill=20, draft=14,
                  verify=6 * 9 + 12 * 0.5, controller=controller)]
    costs = measure_costs({"no-draft": no_draft, "default": mixed}, "no-draft")
    assert costs.verify_one == pytest.approx(9.0)
    assert costs.verify_per_token == pytest.approx(0.5)      # the verify time beyond 9 ms a round, per drafted token
    assert costs.step == {"lookup": 0.1, "model": 1.0}
    assert costs.begin_model == 5.0

    overhead = (130 - 14 - 60) / 6                           # decode - drafting - verifying, per round
    tokens = 2 * 1 + 2 * expected_tokens([0.5], 3) + 2 * expected_tokens([0.8, 0.5], 3)
    time = 2 * 9 + 2 * (3 * 0.1 + 10.5) + 2 * (3 * 1.0 + 10.5) + 6 * overhead   # verify(4) = 9 + 3 x 0.5
    rate, flat = predicted_rate(mixed, costs)
    assert not flat and rate == pytest.approx(tokens / time)

    s = speedup(mixed, no_draft, costs)
    base_rate = 10 / 100
    assert s.achieved == pytest.approx((12 / 130) / base_rate)
    assert s.predicted == pytest.approx(rate / base_rate)
    assert s.efficiency == pytest.approx(s.achieved / s.predicted)


def test_no_controller_means_the_measured_acceptance_at_every_position():
    no_draft = [call({"none": 4}, 0, 0, 4, latency=50, prefill=10, draft=0, verify=40)]
    heuristic = [call({"model": 4}, 8, 4, 8, latency=80, prefill=10, draft=8, verify=4 * 10 + 8 * 1.0)]
    costs = measure_costs({"no-draft": no_draft, "draft": heuristic}, "no-draft")
    assert costs.step == {"model": 1.0}                      # its drafting time per drafted token
    rate, flat = predicted_rate(heuristic, costs)
    assert flat
    t = Totals.of(heuristic)
    assert (t.mean_k, t.acceptance) == (2.0, 0.5)
    per_round = 2 * 1.0 + 10 + 2 * 1.0 + t.overhead_ms
    assert rate == pytest.approx(expected_tokens([0.5], 2) / per_round)


def test_the_reference_predicts_itself():
    no_draft = [call({"none": 5}, 0, 0, 5, latency=70, prefill=10, draft=1, verify=50),
                call({"none": 3}, 0, 0, 3, latency=40, prefill=5, draft=0.5, verify=30)]
    costs = measure_costs({"no-draft": no_draft}, "no-draft")
    s = speedup(no_draft, no_draft, costs)
    assert s.achieved == 1.0
    # the prediction leaves out only the drafting time of rounds that drafted nothing (planning)
    assert s.efficiency == pytest.approx((95 - 1.5) / 95)


def test_exact_counts_by_position_come_before_the_controllers_estimates():
    no_draft = [call({"none": 4}, 0, 0, 4, latency=50, prefill=10, draft=0, verify=40)]
    # two rounds of k = 2: one had both tokens accepted, one none; a third call saw only position 0
    model = [call({"model": 2}, 4, 2, 4, latency=60, prefill=10, draft=4, verify=2 * 12,
                  controller={"model": {"acceptance_by_position": [0.9, 0.9]}}),
             call({"model": 1}, 1, 0, 1, latency=30, prefill=10, draft=1, verify=11)]
    model[0]["by_position"] = {"model": {"evaluated": [2, 1], "accepted": [1, 1]}}
    model[1]["by_position"] = {"model": {"evaluated": [1], "accepted": [0]}}
    assert measured_acceptance(model, "model") == [1 / 3, 1.0]
    assert measured_acceptance(model, "lookup") is None
    costs = measure_costs({"no-draft": no_draft, "draft": model}, "no-draft")
    rate, flat = predicted_rate(model, costs)
    assert not flat
    t = Totals.of(model)
    per_round = t.mean_k * costs.step["model"] + costs.verify(t.mean_k + 1) + t.overhead_ms
    assert rate == pytest.approx(expected_tokens([1 / 3, 1.0], t.mean_k) / per_round)


def test_acceptance_needed_inverts_the_formula():
    """The acceptance a drafter needs for a speedup, at given costs, is where the best chain's
    predicted speedup reaches it; a costly drafter needs more, and a speedup beyond what an
    always-right drafter gives is out of reach (None)."""
    from bench.speedup import Costs, acceptance_needed, best_chain_speedup
    costs = Costs(verify_one=4.0, verify_per_token=0.8, step={})
    free = acceptance_needed(1.5, 0.0, costs)
    assert best_chain_speedup(free, 0.0, costs) == pytest.approx(1.5, rel=1e-3)
    # one free token at rate a for verify(2): (1 + a) * 4 / 4.8 >= 1.5 needs a >= 0.8 with k = 1,
    # and longer chains do better, so less is needed
    assert 0.3 < free < 0.8
    assert acceptance_needed(1.5, 1.7, costs) > free
    assert acceptance_needed(1.0, 1.7, costs) < acceptance_needed(1.5, 1.7, costs)
    assert acceptance_needed(20.0, 0.0, costs) is None


def test_the_longest_draft_is_the_engines():
    """bench/speedup keeps the engine's longest draft as its own number (it imports no torch)."""
    from bench.speedup import MAX_DRAFT
    from engine.settings import MAX_DRAFT_LENGTH
    assert MAX_DRAFT == MAX_DRAFT_LENGTH


def test_a_chains_product_to_a_depth():
    assert chain_product([0.5, 0.8], 2) == pytest.approx(0.4)
    assert chain_product([0.5], 3) == pytest.approx(0.125)       # the last rate carried on
    assert chain_product([0.5], 0) == 1.0
    assert chain_product([0.5], 1.5) == pytest.approx((0.5 + 0.25) / 2)


def test_pair_rounds_add_the_other_branch_where_the_target_reaches_it():
    no_draft = [call({"none": 10}, 0, 0, 10, latency=120, prefill=20, draft=0, verify=90)]   # 9 ms per token
    controller = {"lookup": {"acceptance_by_position": [0.5], "step_ms": 0.0},
                  "lookup_other": {"acceptance_by_position": [0.2], "step_ms": 0.0}}
    # 2 pair rounds of 6 drafted tokens each, sharing 2 tokens a round before they part
    pairs = [{**call({"pair": 2}, 12, 4, 6, latency=46, prefill=20, draft=0, verify=18 + 12 * 0.5,
                     controller=controller), "pair_shared": 4}]
    costs = measure_costs({"no-draft": no_draft, "default": pairs}, "no-draft")
    # 2 shared, then 2 tokens on each branch: the taken chain as a chain of 4, plus the other
    # branch's 2 tokens wherever the taken chain held for the 2 shared ones (0.25 of the time)
    tokens = expected_tokens([0.5], 4) + 0.25 * (expected_tokens([0.2], 2) - 1)
    overhead = (26 - 0 - 24) / 2                             # decode - drafting - verifying, per round
    rate, _ = predicted_rate(pairs, costs)
    assert rate == pytest.approx(2 * tokens / (2 * (9 + 6 * 0.5 + overhead)))


def test_the_policys_estimates_and_a_tree_of_two_drafters():
    """An engine's stats as they are now: the policy's estimates (`policy`), rounds by the
    drafters of their chains ("lookup+model": a tree of both), free drafters without a step, and
    the draft model's first pass priced apart from its steps."""
    no_draft = [call({"none": 10}, 0, 0, 10, latency=120, prefill=20, draft=0, verify=90)]   # 9 ms per token
    mixed = call({"lookup+model": 2, "datastore": 2}, 12, 6, 12, latency=150, prefill=20, draft=10,
                 verify=4 * 9 + 12 * 0.5)
    del mixed["controller"]
    mixed["policy"] = {"acceptance": {"model": [0.9]}, "model": {"begin_ms": 5.0, "first_ms": 2.0, "step_ms": 1.0}}
    mixed["by_position"] = {"lookup": {"evaluated": [2], "accepted": [1]}, "model": {"evaluated": [2], "accepted": [2]},
                            "datastore": {"evaluated": [2, 2], "accepted": [2, 1]}}
    costs = measure_costs({"no-draft": no_draft, "default": [mixed]}, "no-draft")
    assert costs.step == {"lookup": 0.0, "datastore": 0.0, "model": 1.0}
    assert (costs.begin_model, costs.first_model, costs.verify_per_token) == (5.0, 2.0, 0.5)
    overhead = (130 - 10 - 42) / 4
    tokens = 2 * tree_tokens([0.5], [1.0], 1.5, 1.5) + 2 * expected_tokens([1.0, 0.5], 3)
    time = 2 * ((2.0 - 1.0) + 10.5 + 1.5 * 1.0) + 2 * 10.5 + 4 * overhead   # verify(4) = 9 + 3 x 0.5
    rate, flat = predicted_rate([mixed], costs)
    assert not flat and rate == pytest.approx(tokens / time)
