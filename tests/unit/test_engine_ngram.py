"""Prompt lookup: find the latest earlier occurrence of the sequence's last n tokens, longest n
first, and propose what followed it."""
import pytest

from engine.drafters import LookupDrafter, Sampling

GREEDY = Sampling()


def propose(seq, k=4, max_ngram=3, special_ids=frozenset()):
    drafter = LookupDrafter(max_ngram=max_ngram, special_ids=special_ids)
    drafter.begin(seq)
    draft = drafter.propose(seq, b"", k, GREEDY)
    assert draft.q is None   # no probabilities: verified by sample-and-compare
    return draft.tokens


def test_copies_what_followed_the_last_tokens_before():
    assert propose([1, 2, 3, 4, 5, 9, 1, 2, 3], k=3) == [4, 5, 9]


def test_k_caps_the_draft():
    assert propose([1, 2, 3, 4, 5, 9, 1, 2, 3], k=1) == [4]


def test_a_copy_that_runs_into_the_sequence_end_goes_on_as_its_period():
    # only [6, 7, 8] follows the match, then the sequence ends: 6 7 8 is its period
    assert propose([7, 8, 6, 7, 8], k=4) == [6, 7, 8, 6]
    assert propose([7, 8, 6, 7, 8], k=8) == [6, 7, 8, 6, 7, 8, 6, 7]
    assert propose([7, 8, 6, 7, 8], k=2) == [6, 7]
    # a copy cut by a special id before the end, or by k, is not a period
    assert propose([1, 2, 5, 0, 1, 2], k=8) == [5, 0, 1, 2, 5, 0, 1, 2]
    assert propose([1, 2, 5, 0, 1, 2], k=8, special_ids=frozenset({0})) == [5]
    assert propose([4, 1, 2, 3, 9, 1, 2, 3], k=2) == [9, 1]


def test_a_periodic_copy_is_what_looking_the_same_ngram_up_again_proposes():
    """On random sequences of a few ids: where the copy ran into the sequence's end, the proposal
    is what growing seq + copy by looking the same n-gram up in it, again and again, proposes."""
    import random
    rnd = random.Random(1)
    specials = frozenset({0})
    periodic = 0
    for _ in range(3000):
        seq = [rnd.choice([0, 1, 2, 3, 4]) for _ in range(rnd.randrange(2, 14))]
        k = rnd.randrange(1, 10)
        n = next((n for n in range(min(3, len(seq) - 1), 0, -1) if _plain_copy(seq, seq[-n:], k, specials)[0]), None)
        if n is None:
            continue
        out, start = _plain_copy(seq, seq[-n:], k, specials)
        if len(out) == k or start + n + len(out) < len(seq):
            continue
        periodic += 1
        grown = list(out)
        while len(grown) < k:
            more, _ = _plain_copy(seq + grown, (seq + grown)[-n:], k - len(grown), specials)
            assert more
            grown += more
        assert propose(seq, k=k, special_ids=specials) == grown[:k], (seq, k)
    assert periodic > 500


def test_the_latest_occurrence_wins():
    assert propose([1, 2, 7, 1, 2, 8, 1, 2], k=1) == [8]


def test_longer_ngrams_win_over_later_shorter_ones():
    # [1, 2, 3] occurred once (then 6); the later [2, 3] was followed by 4.
    seq = [5, 1, 2, 3, 6, 2, 3, 4, 1, 2, 3]
    assert propose(seq, k=1) == [6]
    assert propose(seq, k=1, max_ngram=2) == [4]


def test_falls_back_to_shorter_ngrams():
    # Neither [9, 8, 7] nor [8, 7] occurred before; [7] did, followed by 9.
    assert propose([4, 7, 9, 8, 7], k=2) == [9, 8]


def test_a_repeated_token_proposes_more_of_it():
    assert propose([3, 3], k=4) == [3, 3, 3, 3]
    assert propose([5, 3, 3, 3], k=4) == [3, 3, 3, 3]


@pytest.mark.parametrize("seq", [[], [1], [1, 2, 3, 4], [1, 2, 3, 4, 5, 6]])
def test_no_earlier_occurrence_no_draft(seq):
    assert propose(seq) == []


def test_a_special_token_ends_the_copy():
    assert propose([1, 2, 5, 0, 6, 1, 2], k=4, special_ids=frozenset({0})) == [5]


def test_a_match_followed_by_a_special_token_is_skipped_for_an_earlier_one():
    # The latest [1, 2] is followed by 0 (special): the earlier one, followed by 5, is used.
    assert propose([1, 2, 5, 1, 2, 0, 1, 2], k=2, special_ids=frozenset({0})) == [5, 1]


def match(seq, k=4, max_ngram=3):
    drafter = LookupDrafter(max_ngram=max_ngram)
    return drafter.propose(seq, b"", k, GREEDY).match


def test_the_match_counts_every_token_before_the_proposal_that_matched():
    # [8, 1, 2, 3] occurred before and is the sequence's end: 4 tokens matched, then 4 follows
    assert match([8, 1, 2, 3, 4, 9, 8, 1, 2, 3]) == 4
    # only [2, 3] matched ([1, 2, 3] did not occur before: 7 came before the earlier 2, 3)
    assert match([7, 2, 3, 4, 1, 2, 3]) == 2
    assert match([1, 2]) == 0                       # nothing proposed, nothing matched
    assert match([5, 6, 7] * 20) == 32              # capped: as good as any longer match


def test_a_match_in_the_remembered_completions_counts_too():
    drafter = LookupDrafter()
    drafter.end([9, 8, 1, 2, 3, 4, 5])
    draft = drafter.propose([7, 7, 8, 1, 2, 3], b"", 2, GREEDY)
    assert (draft.tokens, draft.match) == ([4, 5], 4)


def _reference_near(seq, history, k, max_ngram, special_ids):
    """Prompt lookup as plainly as it can be written: for n = max_ngram .. 1, the sequence
    itself then the completions newest first, the latest occurrence of the last n ids that has
    something after it (cut at a special id; a copy from the sequence that reaches its end goes
    on as that period); None if none."""
    for n in range(min(max_ngram, len(seq) - 1), 0, -1):
        tail = seq[-n:]
        for name, source in (("prompt", seq), *(("completions", h) for h in reversed(history))):
            out, start = _plain_copy(source, tail, k, special_ids)
            if out and name == "prompt" and len(out) < k and start + n + len(out) == len(seq):
                out = (out * k)[:k]     # the copy ran into the sequence's end: its period again
            if out:
                return name, out, start, n, source
    return None


def _plain_copy(source, tail, k, special_ids):
    """What follows the latest occurrence of `tail` in `source` that has something after it (cut
    at a special id), as a plain scan finds it: (copy, where the occurrence starts)."""
    n = len(tail)
    for start in range(len(source) - n - 1, -1, -1):
        if source[start:start + n] == tail:
            out = []
            for t in source[start + n:start + n + k]:
                if t in special_ids:
                    break
                out.append(t)
            if out:
                return out, start
    return [], -1


def test_the_byte_search_finds_what_a_plain_scan_finds():
    """The search runs on the ids as bytes (bytes.rfind), grown as the sequence grows: on
    random sequences with many repeats, ids of every byte pattern (0, 256, 65536: a byte-wise
    match across two ids must not count) and special ids, it proposes what a plain scan of the
    ids proposes, at every length of a growing sequence and after the sequence is replaced."""
    import random
    from engine.drafters.lookup import matched_before
    rnd = random.Random(0)
    specials = frozenset({0})
    alphabet = [0, 1, 2, 3, 256, 257, 65536, 65537, 16777216]
    for trial in range(60):
        drafter = LookupDrafter(max_ngram=3, special_ids=specials)
        history = []
        for _ in range(rnd.randrange(0, 12)):        # (8 are kept)
            done = [rnd.choice(alphabet) for _ in range(rnd.randrange(2, 12))]
            drafter.end(done)
            if len(done) > drafter.max_ngram:
                history.append(done)
        seq = [rnd.choice(alphabet) for _ in range(rnd.randrange(1, 8))]
        for _ in range(40):
            k = rnd.randrange(1, 6)
            got = drafter.near(seq, k)
            want = _reference_near(seq, history[-8:], k, 3, specials)
            if want is None:
                assert got is None
            else:
                name, out, start, n, source = want
                assert (got.source, got.tokens) == (name, out), (seq, history)
                assert got.match == n + matched_before(source, start, seq, n)
            seq.append(rnd.choice(alphabet))      # the engine's sequence grows in place
            if rnd.random() < 0.05:
                seq = [rnd.choice(alphabet) for _ in range(len(seq))]   # another list, same length


def test_the_worked_examples_in_the_lookup_module_hold():
    import doctest

    from engine.drafters import lookup
    result = doctest.testmod(lookup)
    assert result.attempted >= 2 and result.failed == 0
