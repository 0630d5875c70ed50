"""KV sessions: logits after reuse equal a fresh forward, for every cache layout and both
forwards (lean and transformers)."""
import logging

import pytest
import torch

from engine import ContextTooLong, KVPool, KVSession
from engine.forward.forwards import TransformersForward, make_forward
from engine.forward.lean import LeanForward, lean_unsupported, make_lean
from tests.tiny_models import llama_config, tiny_model

VOCAB = 300


def _fresh(model, ids, n):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -n:].float()


@pytest.mark.parametrize("lean", [True, False], ids=["lean-forward", "transformers-forward"])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2", "bigcode"])
def test_reuse_matches_fresh_forward(kind, lean):
    model = tiny_model(kind, VOCAB)
    session = KVSession(model, max_tokens=512, forward=make_forward(model, make_lean(model) if lean else None))
    assert isinstance(session.forward, LeanForward) == (lean and kind != "gpt2")
    assert isinstance(session.forward, TransformersForward) == (not lean or kind == "gpt2")
    g = torch.Generator().manual_seed(0)
    doc = torch.randint(0, VOCAB, (80,), generator=g).tolist()
    edits = {
        "first": doc,
        "append": doc + [5, 6, 7],
        "delete at end": doc[:60],
        "edit in the middle": doc[:30] + [9, 9] + doc[31:70],
        "delete in the middle": doc[:20] + doc[25:50],
        "same again": doc[:20] + doc[25:50],
        "unrelated": [1, 2, 3, 4],
    }
    with torch.no_grad():
        for name, ids in edits.items():
            got = session.advance(ids, n_logits=3)
            torch.testing.assert_close(got, _fresh(model, ids, 3), atol=1e-4, rtol=1e-4, msg=name)
            assert session.ids == ids
            # The cache now holds exactly `ids`: one more token continues it correctly.
            torch.testing.assert_close(session.advance(ids + [42]), _fresh(model, ids + [42], 1),
                                       atol=1e-4, rtol=1e-4, msg=name)


@pytest.mark.parametrize("lean", [True, False], ids=["lean-forward", "transformers-forward"])
@pytest.mark.parametrize("kind", ["llama", "bigcode"])
def test_append_steps_one_token_after_another_like_a_fresh_forward(kind, lean):
    # A draft model's steps: each appends its token to what the cache holds (the one-token step of
    # the lean forward takes its id tensor as a slice of a table of every id), outside and inside
    # inference mode.
    model = tiny_model(kind, VOCAB)
    session = KVSession(model, max_tokens=512, forward=make_forward(model, make_lean(model) if lean else None))
    ids = torch.randint(0, VOCAB, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    session.advance(ids)
    for i, token in enumerate([0, VOCAB - 1, 17, 17, 250]):
        ids.append(token)
        if i % 2:
            with torch.inference_mode():
                got = session.append([token])
        else:
            got = session.append([token])
        assert session.ids == ids
        torch.testing.assert_close(got, _fresh(model, ids, 1), atol=1e-4, rtol=1e-4, msg=str(i))
    torch.testing.assert_close(session.append([3, 4], n_logits=2), _fresh(model, ids + [3, 4], 2),
                               atol=1e-4, rtol=1e-4)


def test_pool_switches_between_documents_without_losing_either():
    model = tiny_model("llama", VOCAB)
    pool = KVPool(model, max_sessions=2, max_tokens=512)
    a = list(range(10, 70))
    b = list(range(100, 160))
    with torch.no_grad():
        sa = pool.session_for(a)
        sa.advance(a)
        sb = pool.session_for(b)
        assert sb is not sa  # the other document keeps its cache
        sb.advance(b)
        a2 = a + [1, 2]
        s = pool.session_for(a2)
        assert s is sa
        reused, computed = s.sync(a2)
        assert (reused, computed) == (60, 2)
        torch.testing.assert_close(s.advance(a2 + [3]), _fresh(model, a2 + [3], 1), atol=1e-4, rtol=1e-4)
        # A third document evicts the least recently used (b), memory stays bounded.
        c = list(range(200, 230))
        sc = pool.session_for(c)
        assert sc is sb and len(pool.sessions) == 2


def test_session_refuses_more_than_its_budget():
    model = tiny_model("gpt2", VOCAB)
    session = KVSession(model, max_tokens=16)
    with torch.no_grad(), pytest.raises(ContextTooLong):
        session.advance(list(range(20)))


def test_why_the_lean_forward_is_not_used_is_logged_once_per_pool(caplog):
    model = tiny_model("gpt2", VOCAB)
    with caplog.at_level(logging.INFO, logger="specfill.engine"):
        pool = KVPool(model, max_sessions=2, max_tokens=512)
        with torch.no_grad():
            pool.session_for(list(range(10, 40))).advance(list(range(10, 40)))
            pool.session_for(list(range(100, 140))).advance(list(range(100, 140)))
    assert len(pool.sessions) == 2
    assert all(isinstance(s.forward, TransformersForward) for s in pool.sessions)
    said = [r.getMessage() for r in caplog.records if "lean" in r.getMessage()]
    assert said == ["GPT2LMHeadModel runs the transformers forward, not the lean one: "
                    "no lean forward for GPT2LMHeadModel"]


def test_lean_forward_refuses_configs_it_does_not_compute():
    from transformers import LlamaForCausalLM

    assert lean_unsupported(tiny_model("llama", VOCAB)) is None
    assert lean_unsupported(tiny_model("bigcode", VOCAB)) is None
    assert lean_unsupported(LlamaForCausalLM(llama_config(VOCAB, mlp_bias=True))) == "MLP biases"
    dynamic = LlamaForCausalLM(llama_config(VOCAB, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                     "rope_theta": 10000.0}))
    assert lean_unsupported(dynamic) == "rope type 'dynamic' (dynamic scalings change inv_freq with length)"
    assert make_lean(dynamic) is None


class OlderApiLlama(torch.nn.Module):
    """A real tiny Llama behind the forward signature of transformers releases before the KV
    cache argument was renamed (5.17: `past_key_values`, not `cache`)."""

    def __init__(self, model):
        super().__init__()
        self.inner, self.config = model, model.config

    def forward(self, input_ids=None, past_key_values=None, use_cache=None, logits_to_keep=0, **kwargs):
        return self.inner(input_ids=input_ids, cache=past_key_values, use_cache=use_cache,
                          logits_to_keep=logits_to_keep, **kwargs)


def test_the_transformers_forward_passes_its_cache_under_the_models_own_name():
    """Given under a name the forward does not take, the cache would land in **kwargs and be
    ignored: logits without the context, and no error."""
    model = tiny_model("llama", VOCAB)
    older = OlderApiLlama(model)
    ids = list(range(3, 40))
    for m in (model, older):
        session = KVSession(m, max_tokens=512, forward=TransformersForward(m, torch.device("cpu")))
        with torch.no_grad():
            session.advance(ids[:30])
            got = session.advance(ids, n_logits=3)
        assert torch.allclose(got, _fresh(model, ids, 3), atol=1e-4)
    assert TransformersForward(older, torch.device("cpu")).cache_arg == "past_key_values"


@pytest.mark.parametrize("lean", [True, False], ids=["lean-forward", "transformers-forward"])
def test_the_budget_is_one_total_for_all_of_a_pools_sessions(lean):
    """Three documents of 300 tokens in a pool of 700: each request keeps its document's cache
    and drops the least recently used others' until all fit; a dropped document is computed
    again when it comes back, to the same logits."""
    model = tiny_model("llama", VOCAB)
    pool = KVPool(model, max_sessions=3, max_tokens=700, lean=lean)
    g = torch.Generator().manual_seed(1)
    docs = [torch.randint(0, VOCAB, (300,), generator=g).tolist() for _ in range(3)]
    with torch.no_grad():
        for order in ([0, 1, 2], [0, 1], [2]):
            for i in order:
                session = pool.session_for(docs[i])
                got = session.advance(docs[i], n_logits=2)
                torch.testing.assert_close(got, _fresh(model, docs[i], 2), atol=1e-4, rtol=1e-4)
                assert pool.held_tokens() <= 700
    held = {tuple(s.ids[:5]) for s in pool.sessions if s.ids}
    assert len(pool.sessions) == 3 and tuple(docs[2][:5]) in held and len(held) < 3
    # one session alone may use the whole budget
    long_doc = [i % VOCAB for i in range(650)]
    assert pool.session_for(long_doc).advance(long_doc).shape[0] == 1
    assert pool.held_tokens() <= 700
