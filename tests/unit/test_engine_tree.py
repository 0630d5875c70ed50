"""Draft trees: the lean forward scores a tree in one pass exactly as the transformers forward
scores each of its paths; after the round the cache holds exactly the accepted path; the walk
down the tree accepts what the target itself would pick."""
import pytest
import torch

from engine.kv import KVSession, TransformersForward
from engine.lean import LeanForward, make_lean
from engine.sampling import verify_tree
from engine.tree import build_tree
from tests.unit.test_engine_lean import VOCAB, _model, _reference

KINDS = ["llama", "llama, 2 heads per kv head", "qwen2", "bigcode", "bigcode multi-head"]


def _paths(tree) -> list[list[int]]:
    """Every root-to-leaf path, as node indices."""
    parents = set(tree.parents[1:])
    out = []
    for leaf in range(len(tree.tokens)):
        if leaf in parents:
            continue
        path, node = [], leaf
        while node >= 0:
            path.append(node)
            node = tree.parents[node]
        out.append(path[::-1])
    return out


def _random_tree(gen, root: int):
    """Three chains: two sharing a prefix, one apart from the root; 1 + 9 + 5 + 4 nodes at most."""
    r = lambda n: torch.randint(0, VOCAB, (n,), generator=gen).tolist()  # noqa: E731
    a = r(9)
    return build_tree(root, [a, a[:3] + r(5), r(4)])


def test_chains_merge_their_common_prefix():
    tree = build_tree(7, [[1, 2, 3, 4], [1, 2, 5], [6], [1, 2, 3]])
    assert tree.tokens == [7, 1, 2, 3, 4, 5, 6]
    assert tree.parents == [-1, 0, 1, 2, 3, 2, 0]
    assert tree.depths == [0, 1, 2, 3, 4, 3, 1]
    assert tree.leaves == 3
    assert build_tree(7, [[1, 2], [1, 2, 3]]).leaves == 1
    assert build_tree(7, [[1, 2], [1, 2, 3]]).longest_chain() == [1, 2, 3]
    anc = tree.ancestors()
    assert anc[4].tolist() == [True, True, True, True, True, False, False]
    assert anc[5].tolist() == [True, True, True, False, False, True, False]
    assert anc[6].tolist() == [True, False, False, False, False, False, True]


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "model-weights"])
@pytest.mark.parametrize("kind", KINDS)
def test_tree_pass_equals_transformers_on_every_path(kind, packed):
    model = _model(kind)
    fwd = LeanForward(make_lean(model, pack_max_bytes=2**30 if packed else 0), torch.float32, torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    prefix = torch.randint(0, VOCAB, (70,), generator=gen).tolist()
    with torch.no_grad():
        fwd(prefix[:-1], n_logits=1)
        tree = _random_tree(gen, prefix[-1])
        got = fwd.tree(tree.tokens, tree.depths, tree.ancestors())
    assert got.shape == (len(tree.tokens), VOCAB)
    for path in _paths(tree):
        ref = _reference(model, prefix[:-1] + [tree.tokens[i] for i in path])[-len(path):]
        torch.testing.assert_close(got[path], ref, atol=1e-4, rtol=1e-4, msg=f"path {path}")


@pytest.mark.parametrize("kind", KINDS)
def test_cache_after_a_tree_round_equals_a_fresh_prefill(kind):
    """keep_path moves the accepted nodes' keys and values into place: the cache then equals a
    fresh prefill of the accepted text, and the next tokens see the same logits as transformers."""
    model = _model(kind)
    lean = make_lean(model)
    session = KVSession(model, 4096, LeanForward(lean, torch.float32, torch.device("cpu")))
    gen = torch.Generator().manual_seed(5)
    seq = torch.randint(0, VOCAB, (40,), generator=gen).tolist()
    session.sync(seq[:-1])
    for round_ in range(3):   # each round keeps another path: the second branch, the first, none
        tree = _random_tree(gen, seq[-1])
        session.advance_tree(seq, tree)
        path = [_paths(tree)[1], _paths(tree)[0], [0]][round_][1:]
        session.keep_path(tree, path)
        seq = seq + [tree.tokens[i] for i in path] + [int(torch.randint(0, VOCAB, (), generator=gen))]
        assert session.ids == seq[:-1]
    cache = session.forward.cache
    fresh = LeanForward(lean, torch.float32, torch.device("cpu"))
    with torch.no_grad():
        fresh(seq[:-1], n_logits=1)
    n = len(seq) - 1
    assert cache.length == fresh.cache.length == n
    torch.testing.assert_close(cache.prefix(n), fresh.cache.prefix(n), atol=1e-5, rtol=1e-5)
    tail = torch.randint(0, VOCAB, (3,), generator=gen).tolist()
    got = session.advance(seq + tail, n_logits=4)
    torch.testing.assert_close(got, _reference(model, seq + tail)[-4:], atol=1e-4, rtol=1e-4)


def test_transformers_forward_never_gets_a_tree():
    model = _model("llama")
    assert KVSession(model, 4096).supports_tree     # the lean forward, by default
    assert not KVSession(model, 4096, TransformersForward(model, torch.device("cpu"))).supports_tree


def test_greedy_walk_follows_the_targets_argmax():
    tree = build_tree(9, [[1, 2, 3], [1, 4], [5]])     # nodes: 9 1 2 3 4 5
    logits = torch.zeros(len(tree.tokens), 10)
    for node, best in enumerate([1, 4, 3, 0, 8, 7]):   # root -> 1 -> 4 (second branch) -> 8
        logits[node, best] = 1.0
    path, bonus = verify_tree(tree, logits, None, None)
    assert [tree.tokens[i] for i in path] == [1, 4] and bonus == 8
    logits[0] = 0
    logits[0, 6] = 1.0      # no child: nothing accepted, the target's own token
    assert verify_tree(tree, logits, None, None) == ([], 6)
