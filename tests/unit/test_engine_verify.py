"""The verification rules and the sampling transforms of engine/sampling.py, on hand-made
distributions: exact answers where the rule is deterministic, frequencies over many seeded
draws where it samples."""
import math

import pytest
import torch

from engine.sampling import sample, target_probs, verify_greedy, verify_rejection, verify_sample_compare

V = 6
DRAWS = 12_000


def probs_row(values: dict[int, float]) -> torch.Tensor:
    row = torch.zeros(V)
    for token, p in values.items():
        row[token] = p
    return row


def peaked(tokens: list[int]) -> torch.Tensor:
    """Logits [len(tokens), V] whose argmax in row i is tokens[i]."""
    logits = torch.zeros(len(tokens), V)
    for i, t in enumerate(tokens):
        logits[i, t] = 5.0
    return logits


def frequencies(tokens: list[int]) -> torch.Tensor:
    return torch.bincount(torch.tensor(tokens), minlength=V).double() / len(tokens)


def assert_frequencies(tokens: list[int], expected: torch.Tensor) -> None:
    """Within 5 standard deviations of the expected probability, for every token."""
    got = frequencies(tokens)
    for t in range(V):
        p = float(expected[t])
        tolerance = 5 * math.sqrt(max(p * (1 - p), 1e-12) / len(tokens))
        assert abs(float(got[t]) - p) <= max(tolerance, 1e-12), (t, float(got[t]), p)


# --- target_probs: temperature, top-k, top-p ---------------------------------------------

def test_temperature_scales_logits_before_the_softmax():
    logits = torch.tensor([[0.0, math.log(2.0), -math.inf, -math.inf, -math.inf, -math.inf]])
    torch.testing.assert_close(target_probs(logits, 1.0)[0, :2], torch.tensor([1 / 3, 2 / 3]))
    torch.testing.assert_close(target_probs(logits, 0.5)[0, :2], torch.tensor([1 / 5, 4 / 5]))


def test_temperature_zero_is_the_argmax():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0, -1.0, 2.9]])
    assert target_probs(logits, 0.0).tolist() == [[0.0, 1.0, 0.0, 0.0, 0.0, 0.0]]


def test_top_k_keeps_the_k_largest_logits():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0, 0.0, -1.0]])
    probs = target_probs(logits, 1.0, top_k=2)
    expected = torch.zeros(1, V)
    expected[0, [1, 2]] = torch.softmax(torch.tensor([4.0, 3.0]), -1)
    torch.testing.assert_close(probs, expected)


def test_top_k_keeps_every_logit_tied_with_the_kth():
    probs = target_probs(torch.tensor([[1.0, 3.0, 3.0, 0.0, 0.0, 0.0]]), 1.0, top_k=1)
    assert probs[0].nonzero().flatten().tolist() == [1, 2]
    torch.testing.assert_close(probs[0, [1, 2]], torch.tensor([0.5, 0.5]))


def test_top_k_of_the_whole_vocabulary_changes_nothing():
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(target_probs(logits, 0.7, top_k=V), torch.softmax(logits / 0.7, -1))


# The same distribution with tokens out of order: 0.5 at 3, 0.3 at 0, 0.15 at 5, 0.05 at 1.
SHUFFLED = {3: 0.5, 0: 0.3, 5: 0.15, 1: 0.05}


def _shuffled_logits() -> torch.Tensor:
    return torch.log(probs_row(SHUFFLED))[None]


@pytest.mark.parametrize("top_p, kept", [
    (0.4, {3: 1.0}),                                    # the top token alone reaches 0.4
    (0.7, {3: 0.5 / 0.8, 0: 0.3 / 0.8}),                # 0.5 < 0.7: the token crossing it is kept
    (0.9, {3: 0.5 / 0.95, 0: 0.3 / 0.95, 5: 0.15 / 0.95}),
    (0.99, {3: 0.5, 0: 0.3, 5: 0.15, 1: 0.05}),
])
def test_top_p_keeps_the_smallest_set_reaching_p_and_renormalises(top_p, kept):
    probs = target_probs(_shuffled_logits(), 1.0, top_p=top_p)
    torch.testing.assert_close(probs[0], probs_row(kept))


def test_top_p_works_row_by_row():
    rows = torch.cat([_shuffled_logits(), torch.log(probs_row({2: 0.9, 4: 0.1}))[None]])
    probs = target_probs(rows, 1.0, top_p=0.7)
    torch.testing.assert_close(probs[0], probs_row({3: 0.5 / 0.8, 0: 0.3 / 0.8}))
    torch.testing.assert_close(probs[1], probs_row({2: 1.0}))


def test_top_k_applies_before_top_p():
    # top-k=3 leaves {3: .5, 0: .3, 5: .15} renormalised by .95; top-p=.8 of that keeps 3 and 0
    # (cumulative mass before 0 is .526 < .8, before 5 it is .842).
    probs = target_probs(_shuffled_logits(), 1.0, top_k=3, top_p=0.8)
    torch.testing.assert_close(probs[0], probs_row({3: 0.5 / 0.8, 0: 0.3 / 0.8}))


# --- verify_greedy -------------------------------------------------------------------------

@pytest.mark.parametrize("cand, target, expected", [
    ([4, 1, 2], [4, 1, 2, 5], (3, 5)),   # all agree: the target's own next token comes on top
    ([4, 1, 2], [4, 1, 3, 5], (2, 3)),   # the first disagreement ends it with the target's token
    ([4, 1, 2], [0, 1, 2, 5], (0, 0)),   # later agreement does not count
    ([], [3], (0, 3)),                   # no draft: plain greedy decoding
])
def test_greedy_accepts_the_longest_agreeing_prefix(cand, target, expected):
    assert verify_greedy(cand, peaked(target)) == expected


# --- verify_rejection ----------------------------------------------------------------------

def test_rejection_accepts_everything_when_the_draft_is_the_target():
    p = torch.stack([probs_row({0: 0.5, 2: 0.5}), probs_row({1: 0.25, 4: 0.75}), probs_row({5: 1.0})])
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):   # u < min(1, p/q) = 1 always holds
        assert verify_rejection([2, 4], p[:2], p, gen) == (2, 5)


def test_rejection_resamples_from_what_the_target_wants_more_than_the_draft():
    # The draft proposes 2, which the target never picks: rejected, and max(0, p - q) is 1.
    p = torch.stack([probs_row({1: 1.0}), probs_row({0: 1.0})])
    q = probs_row({2: 1.0})[None]
    assert verify_rejection([2], q, p, torch.Generator().manual_seed(0)) == (0, 1)


def test_rejection_of_a_token_neither_model_picks_samples_the_target():
    # q(x) = 0 rejects x; the residual max(0, p - q) is all zero, so the target is sampled.
    p = torch.stack([probs_row({0: 0.5, 1: 0.5}), probs_row({3: 1.0})])
    gen = torch.Generator().manual_seed(0)
    seen = {verify_rejection([2], p[:1], p, gen) for _ in range(100)}
    assert seen == {(0, 0), (0, 1)}


def test_rejection_sampling_outputs_the_target_distribution():
    p0 = probs_row({0: 0.6, 1: 0.3, 2: 0.1})
    q0 = probs_row({0: 0.2, 1: 0.3, 2: 0.4, 3: 0.1})
    p = torch.stack([p0, probs_row({5: 1.0})])
    gen = torch.Generator().manual_seed(1234)
    first, accepted = [], 0
    for _ in range(DRAWS):
        x = sample(q0, gen)
        n, token = verify_rejection([x], q0[None], p, gen)
        accepted += n
        first.append(x if n == 1 else token)
        assert (n, token) == (1, 5) or (n == 0 and token != x)
    assert_frequencies(first, p0)
    # Acceptance rate: sum over tokens of min(p, q) = 0.2 + 0.3 + 0.1.
    assert abs(accepted / DRAWS - 0.6) <= 5 * math.sqrt(0.6 * 0.4 / DRAWS)


# Three positions, each with its own residual max(0, p - q): {1: 1} at the first, {3: 1} at the
# second, {4: .5, 5: .5} at the third (not p there, nor p without the drafted token); then the
# target's next token. The draft is right at the first two often, so most chains reach the third.
LATER_P = [{0: 0.5, 1: 0.3, 2: 0.2}, {1: 0.5, 3: 0.3, 4: 0.2}, {2: 0.3, 4: 0.4, 5: 0.3}, {0: 1.0}]
LATER_Q = [{0: 0.6, 1: 0.2, 2: 0.2}, {1: 0.6, 3: 0.2, 4: 0.2}, {2: 0.7, 4: 0.2, 5: 0.1}]


def _rows(rows: list[dict[int, float]]) -> torch.Tensor:
    return torch.stack([probs_row(r) for r in rows])


def test_rejection_at_a_later_position_resamples_from_that_positions_residual():
    """Chains drafted from q, three tokens long: where the first two were accepted and the third
    rejected, the token written instead follows the third position's residual, renormalised,
    whichever tokens were accepted before it; and the token written at the third position,
    accepted or resampled, follows the target's p there."""
    p, q = _rows(LATER_P), _rows(LATER_Q)
    residual = torch.clamp(p[2] - q[2], min=0.0)
    residual = residual / residual.sum()
    gen = torch.Generator().manual_seed(2024)
    resampled: dict[int, list[int]] = {}      # the first accepted token -> tokens resampled at the third
    written = []                              # the token written at the third position
    for _ in range(DRAWS):
        cand = [sample(q[i], gen) for i in range(3)]
        n, token = verify_rejection(cand, q, p, gen)
        if n == 2:
            resampled.setdefault(cand[0], []).append(token)
        if n >= 2:
            written.append(cand[2] if n == 3 else token)
    assert_frequencies([t for tokens in resampled.values() for t in tokens], residual)
    assert sorted(resampled) == [0, 1, 2]
    for tokens in resampled.values():     # the tokens accepted before do not weigh in
        assert_frequencies(tokens, residual)
    assert_frequencies(written, p[2])


def test_rejection_after_certain_acceptances_resamples_the_rejected_positions_residual():
    """The first two tokens are accepted for certain (p >= q there) and the third for certain
    not (p gives it nothing): every chain is cut at the third position, by its own residual,
    never by an earlier position's or by p."""
    p = _rows([{0: 0.5, 1: 0.5}, {2: 0.6, 3: 0.4}, {2: 0.2, 4: 0.2, 5: 0.6}, {0: 1.0}])
    q = _rows([{0: 0.5, 1: 0.5}, {2: 0.6, 3: 0.4}, {3: 0.6, 5: 0.4}])
    gen = torch.Generator().manual_seed(5)
    tokens = []
    for _ in range(DRAWS // 4):
        n, token = verify_rejection([1, 2, 3], q, p, gen)
        assert n == 2
        tokens.append(token)
    # max(0, p - q) at the third position: {2: .2, 4: .2, 5: .2}, renormalised
    assert_frequencies(tokens, probs_row({2: 1 / 3, 4: 1 / 3, 5: 1 / 3}))


# --- verify_sample_compare -----------------------------------------------------------------

def test_sample_compare_with_certain_targets_is_greedy():
    p = torch.stack([probs_row({4: 1.0}), probs_row({1: 1.0}), probs_row({3: 1.0})])
    gen = torch.Generator().manual_seed(0)
    assert verify_sample_compare([4, 1], p, gen) == (2, 3)
    assert verify_sample_compare([4, 2], p, gen) == (1, 1)
    assert verify_sample_compare([0, 1], p, gen) == (0, 4)


@pytest.mark.parametrize("cand", [[0, 0], [2, 1], [5, 5]])
def test_sample_compare_outputs_what_the_target_alone_samples_with_the_same_seed(cand):
    # One draw from p[i] per position, in order: the output is exactly the target's own
    # samples from the same generator state, whatever the draft proposed.
    p = torch.stack([probs_row({0: 0.6, 1: 0.3, 2: 0.1}), probs_row({0: 0.2, 1: 0.8}),
                     probs_row({3: 0.5, 4: 0.5})])
    for seed in range(300):
        n, token = verify_sample_compare(cand, p, torch.Generator().manual_seed(seed))
        alone = torch.Generator().manual_seed(seed)
        expected = [sample(p[i], alone) for i in range(n + 1)]
        assert cand[:n] + [token] == expected
        assert n == len(cand) or token != cand[n]


def test_sample_compare_outputs_the_target_distribution_for_any_draft():
    p0 = probs_row({0: 0.6, 1: 0.3, 2: 0.1})
    p = torch.stack([p0, probs_row({5: 1.0})])
    gen = torch.Generator().manual_seed(99)
    for proposed, acceptance in ((0, 0.6), (2, 0.1), (4, 0.0)):
        first, accepted = [], 0
        for _ in range(DRAWS // 2):
            n, token = verify_sample_compare([proposed], p, gen)
            accepted += n
            first.append(proposed if n == 1 else token)
        assert_frequencies(first, p0)
        rate = accepted / (DRAWS // 2)
        assert abs(rate - acceptance) <= max(5 * math.sqrt(acceptance * (1 - acceptance) / (DRAWS // 2)), 0.0)
