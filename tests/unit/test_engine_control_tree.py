"""The controller prices a tree of the lookup's and the model's chains against each chain alone
and against no draft: expected tokens from each chain's acceptance by position, cost from the
model's steps, the verify width and what a tree pass costs beyond a chain."""
from __future__ import annotations

import pytest

from engine.control import DraftController, LookupOffer, Plan


def controller(verify_one=4.0, per_token=0.05, model_step=0.1, lookup_rate=0.5, model_rate=0.5) -> DraftController:
    c = DraftController()
    c.verify.record(1, verify_one)
    c.verify.one_ms, c.verify.per_doubling_ms, c.verify.per_token_ms = verify_one, 0.0, per_token
    c.model.step_ms, c.model.begin_ms = model_step, 0.0
    for _ in range(200):   # acceptance by position: rate at every position
        c.lookup.record(8, 8, 0, 0.0)
        c.model.record(8, 8, 0, 8 * model_step)
    for est, rate in ((c.lookup, lookup_rate), (c.model, model_rate)):
        for i in range(len(est.evaluated)):
            est.evaluated[i], est.accepted[i] = 1e6, rate * 1e6
    return c


def test_the_tree_formula():
    """E = 1 + sum L_i + sum M_i - sum_{i <= min} L_i M_i for independent chains."""
    c = controller(per_token=0.0, model_step=0.0, lookup_rate=0.5, model_rate=0.5)
    plan = c.plan(LookupOffer(2), has_model=True, max_k=2, tree_ok=True)
    expected = 1 + (0.5 + 0.25) + (0.5 + 0.25) - (0.25 + 0.0625)
    assert (plan.drafter, plan.lookup_k, plan.k) == ("tree", 2, 2)
    assert plan.expected_rate == pytest.approx(expected / c.verify(1), rel=1e-4)


def test_a_tree_pays_when_both_chains_are_half_right_and_width_is_cheap():
    c = controller()
    plan = c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=True)
    assert plan.drafter == "tree" and plan.lookup_k >= 1 and plan.k >= 1
    chain = c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=False)
    assert chain.drafter in ("lookup", "model") and plan.expected_rate > chain.expected_rate


def test_no_tree_without_a_target_that_can_verify_one_or_a_lookup_proposal():
    c = controller()
    assert c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=False).drafter != "tree"
    assert c.plan(LookupOffer(0), has_model=True, max_k=16, tree_ok=True).drafter != "tree"
    assert c.plan(LookupOffer(6), has_model=False, max_k=16, tree_ok=True).drafter != "tree"


def test_no_tree_when_the_model_never_agrees():
    c = controller(model_rate=0.0, lookup_rate=0.7)
    plan = c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=True)
    assert plan.drafter == "lookup"


def test_no_draft_at_all_when_drafting_cannot_pay():
    c = controller(verify_one=1.0, per_token=0.5, model_step=2.0, lookup_rate=0.05, model_rate=0.05)
    assert c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=True).drafter == "none"


def test_costly_width_keeps_trees_off():
    """Each node of a tree costs verify width: when a wider pass costs much more, the two
    chains are not worth scoring together."""
    c = controller(verify_one=4.0, per_token=1.5)
    assert c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=True).drafter != "tree"


def test_a_tree_round_measures_the_verify_cost_of_its_width():
    """Tree passes are priced as a chain pass of their width plus what they measurably cost
    beyond one: a costly tree pass keeps trees off, and leaves the chains' price as it was; one
    pass far slower than that counts as at most TREE_EXTRA_MAX chain passes more."""
    from engine.control import TREE_EXTRA_MAX
    c = controller(verify_one=4.0, per_token=0.05)
    assert c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=True).drafter == "tree"
    for _ in range(40):
        c.record_tree(Plan("tree", 4, 1.0, 4), (4, 0), (4, 0), 9, 0.4, 4.4 + 3.0)   # 3 ms beyond a chain
        c.lookup.evaluated, c.lookup.accepted = [1e6] * 16, [5e5] * 16   # keep the chains' estimates
        c.model.evaluated, c.model.accepted = [1e6] * 16, [5e5] * 16
    assert 2.9 < c.tree_extra_ms < 3.0
    assert c.verify(9) == pytest.approx(4.4)   # chains: as before
    assert c.plan(LookupOffer(6), has_model=True, max_k=16, tree_ok=True).drafter != "tree"
    assert c.summary()["tree_extra_ms"] == pytest.approx(c.tree_extra_ms, abs=1e-3)
    slow = controller(verify_one=4.0, per_token=0.05)
    slow.record_tree(Plan("tree", 4, 1.0, 4), (4, 0), (4, 0), 9, 0.4, 100.0)     # one pass, far off
    assert slow.tree_extra_ms == pytest.approx(0.1 * TREE_EXTRA_MAX * 4.4)


def test_a_tree_round_teaches_both_chains_and_is_counted():
    c = controller()
    c.record_tree(Plan("tree", 4, 1.0, 3), (3, 2), (4, 0), 6, 0.4, 5.0)
    decayed = lambda v, add: pytest.approx(v * 0.97 + add)  # noqa: E731
    # lookup: 3 drafted, the path shared 2 of them: positions 0 and 1 accepted, 2 rejected
    assert c.lookup.evaluated[:4] == [decayed(1e6, 1)] * 3 + [decayed(1e6, 0)]
    assert c.lookup.accepted[:3] == [decayed(5e5, 1)] * 2 + [decayed(5e5, 0)]
    # model: its first token was not the target's
    assert c.model.evaluated[:2] == [decayed(1e6, 1), decayed(1e6, 0)]
    assert c.model.accepted[0] == decayed(5e5, 0)
    assert c.rounds_by_kind["tree"] == 1 and c.since_model == 0 and c.since_lookup == 0
    s = c.summary()
    assert s["rounds_by_kind"]["tree"] == 1
