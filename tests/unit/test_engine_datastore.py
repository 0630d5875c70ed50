"""The datastore of the target's own answers (engine/drafters/datastore.py): longest match and majority
continuation against a brute-force search, its file, and its place in prompt lookup."""
import random
from collections import Counter

import numpy as np
import pytest

from engine.drafters.datastore import CONTEXT, MAX_MATCH, MAX_VOTERS, MIN_SHARE, SEP, Datastore, DatastoreError, resolve, save

VOCAB = {f"t{i}": i for i in range(64)}


def build(tmp_path, answers, vocab=VOCAB, name="store.npz") -> Datastore:
    path = tmp_path / name
    save(path, answers, vocab)
    return Datastore.load(path, vocab)


def brute_force(stored: list[int], seq: list[int], k: int):
    """The longest run ending seq (at most MAX_MATCH) that occurs in `stored`, and the majority
    continuation of its occurrences (ties: the smaller id), id by id while the majority holds
    MIN_SHARE of those still agreeing, as the store promises (up to MAX_VOTERS occurrences)."""
    best, ends = 0, []
    for n in range(1, min(MAX_MATCH, len(seq)) + 1):
        found = [e for e in range(n - 1, len(stored))
                 if stored[e - n + 1:e + 1] == seq[-n:] and SEP not in stored[e - n + 1:e + 1]]
        if not found:
            break
        best, ends = n, found
    assert len(ends) <= MAX_VOTERS, "keep the test's stores small enough to vote from every occurrence"
    out = []
    for j in range(1, k + 1):
        nxt = [(e, stored[e + j]) for e in ends if e + j < len(stored) and stored[e + j] != SEP]
        if not nxt:
            break
        counts = Counter(t for _, t in nxt)
        top = max(counts.values())
        if top < MIN_SHARE * len(ends):     # no clear majority left: the proposal ends
            break
        pick = min(t for t, c in counts.items() if c == top)
        out.append(pick)
        ends = [e for e, t in nxt if t == pick]
    return best, out


def test_longest_match_and_majority_continuation(tmp_path):
    store = build(tmp_path, [([], [5, 1, 2, 3, 4]), ([], [6, 1, 2, 3, 4]), ([], [7, 2, 3, 0, 6])])
    got = store.find([0, 1, 2, 3], 4)
    assert (got.tokens, got.match, got.source) == ([4], 3, "datastore")   # the answer ends after 4
    got = store.find([6, 2, 3], 4)       # [2, 3] thrice: two go on with 4, one with 0
    assert (got.tokens, got.match) == ([4], 2)
    assert store.find([0, 1, 2, 3], 4, special_ids={4}) is None   # never proposes an end token
    assert store.find([3, 3, 3], 0) is None and store.find([], 4) is None


def test_matches_a_brute_force_search(tmp_path):
    rng = random.Random(0)
    common = [rng.randrange(64) for _ in range(6)]    # a run many answers share, continued variously
    answers = [([rng.randrange(64) for _ in range(rng.randrange(0, 20))],
                [rng.randrange(64) for _ in range(rng.randrange(0, 10))] + common
                + [rng.randrange(64) for _ in range(rng.randrange(1, 20))]) for _ in range(12)]
    answers.append(([], list(range(20, 60))))     # a run longer than MAX_MATCH
    store = build(tmp_path, answers)
    stored = []
    for prompt, answer in answers:
        stored += prompt[-CONTEXT:] + answer + [SEP]
    assert store.size == len(stored)
    for trial in range(300):
        seq = [rng.randrange(64) for _ in range(rng.randrange(1, 12))]
        if trial % 3 == 0:               # also runs that surely occur, long ones
            prompt, answer = rng.choice(answers)
            whole = prompt[-CONTEXT:] + answer
            seq = whole[:rng.randrange(1, len(whole) + 1)]
        k = rng.randrange(1, 9)
        match, tokens = brute_force(stored, seq, k)
        for _ in range(2):      # the second time from the store's cache of proposals
            got = store.find(seq, k)
            if got is not None:
                assert (got.match, got.tokens) == (match, tokens), (seq, k)
                got.tokens.append(-1)     # a caller's change to its draft stays its own
            else:
                assert tokens == [], (seq, k)


def test_the_block_of_a_run_is_found_from_any_of_its_occurrences(tmp_path):
    """The sorted suffixes that start with a run are found by galloping out from one of them:
    the same block a scan of the whole order finds, for runs that occur once, at the order's
    ends, and hundreds of times (more than MAX_VOTERS)."""
    rng = random.Random(1)
    answers = [([], [rng.choice([1, 2, 3, 60, 61, 62, 63]) for _ in range(40)]) for _ in range(30)]
    store = build(tmp_path, answers)
    keys = [store._key(r) for r in store._order]
    for trial in range(200):
        at = rng.randrange(len(keys)) if trial > 1 else (0 if trial == 0 else len(keys) - 1)
        ids = len(keys[at]) // 4
        prefix = keys[at][:4 * rng.randrange(1, max(2, min(ids, 5)) + 1)]
        inside = [i for i, key in enumerate(keys) if key.startswith(prefix)]
        assert inside == list(range(inside[0], inside[-1] + 1))     # one block of the order
        assert store._block_around(prefix, rng.choice(inside)) == (inside[0], inside[-1] + 1)
    assert max(len([k for k in keys if k.startswith(s.to_bytes(4, "big"))]) for s in (1, 2, 3)) > 4 * MAX_VOTERS


def test_file_round_trip_and_wrong_tokenizer(tmp_path):
    big = {f"t{i}": i for i in range(70000)}
    store = build(tmp_path, [([69999], [1, 69998, 2])], vocab=big, name="wide.npz")  # ids past 16 bits
    assert store.find([69999, 1], 3).tokens == [69998, 2]
    small = build(tmp_path, [([7], [1, 2])], name="small.npz")
    with np.load(tmp_path / "small.npz") as data:
        assert data["ids"].dtype == np.uint16     # stored at half the width where the ids allow
    assert small.find([7], 3).tokens == [1, 2]
    with pytest.raises(DatastoreError, match="another tokenizer"):
        Datastore.load(tmp_path / "small.npz", big)
    whole = (tmp_path / "small.npz").read_bytes()
    for name, content in (("junk.npz", b"not a datastore"), ("empty.npz", b""), ("cut.npz", whole[:len(whole) // 2])):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(DatastoreError, match="not a datastore file"):
            Datastore.load(tmp_path / name, VOCAB)
    np.save(tmp_path / "plain.npy", np.arange(3))     # numpy's, but not an archive of a store
    with pytest.raises(DatastoreError, match="not a datastore file"):
        Datastore.load(tmp_path / "plain.npy", VOCAB)


def test_setting_names_a_file(tmp_path):
    save(tmp_path / "datastore.npz", [([], [1, 2])], VOCAB)
    assert resolve("none", str(tmp_path)) is None
    assert resolve("auto", str(tmp_path)) == tmp_path / "datastore.npz"
    assert resolve("auto", str(tmp_path / "elsewhere")) is None    # auto: only if there is one
    assert resolve(str(tmp_path / "datastore.npz"), None) == tmp_path / "datastore.npz"
    with pytest.raises(DatastoreError, match="no such file"):
        resolve(str(tmp_path / "missing.npz"), None)


def test_a_fixed_draft_length_takes_the_datastore_where_its_match_is_longer_than_the_texts(tmp_path):
    from engine.drafters import DatastoreDrafter, LookupDrafter
    from engine.policy import Policy

    drafters = (LookupDrafter(), DatastoreDrafter(build(tmp_path, [([], [1, 2, 3, 4, 5, 6])])))

    def taken(seq):
        offers = {d.name: d.propose(seq, b"", 3, None) for d in drafters}
        name, k = Policy.plan_fixed(offers, model=False, k=3).chain
        return offers[name].tokens[:k], offers[name].source, offers[name].match
    # the prompt holds no earlier 3: the datastore's proposal
    assert taken([0, 0, 3]) == ([4, 5, 6], "datastore", 1)
    # the text and the store both matched "2 3": a tie goes to the text
    assert taken([1, 2, 3, 9, 8, 0, 2, 3]) == ([9, 8, 0], "prompt", 2)
    # the store matched "1 2 3", the text only "2 3": the store's
    assert taken([7, 2, 3, 9, 8, 1, 2, 3]) == ([4, 5, 6], "datastore", 3)


def test_the_store_is_loaded_only_where_prompt_lookup_runs():
    from engine import LocalEngine, EngineConfig

    shipped = {name: LocalEngine(EngineConfig(draft=draft, lookup=lookup, device="cpu")).drafters.datastore
               for name, draft, lookup in (("ngram", "ngram", True), ("draft + lookup", "default", True),
                                           ("draft alone", "default", False), ("none", "none", True))}
    assert {name: store is not None for name, store in shipped.items()} == \
        {"ngram": True, "draft + lookup": True, "draft alone": False, "none": False}
    assert shipped["ngram"].store.size > 1_000_000      # the default pair's own store
