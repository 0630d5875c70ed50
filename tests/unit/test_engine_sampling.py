"""Sampled speculative output follows the target's own distribution (chi-square test).

Small vocabularies keep it fast: the exact target distribution of the first two tokens is
computed by forward passes, then speculative samples are tested against it. A sanity check
shows the test rejects a wrong distribution (the draft's), so it can fail.
"""
from collections import Counter

import pytest
import torch
from transformers import LlamaForCausalLM

from engine import Drafters, GenerationSettings, KVPool, LoadedModel, Policy, speculative_generate
from engine.drafters import DatastoreDrafter, LookupDrafter, ModelDrafter, TextDrafter
from engine.sampling import greedy_ids
from engine.load.vocab_tables import build_vocab
from tests.sampling_law import TEMPERATURE, TOP_K, TOP_P, char_tokenizer, chi_square_ok, output_law
from tests.tiny_models import init_sharp, llama_config

N_SAMPLES = 1200


def _loaded(tokenizer, seed, scale):
    cfg = llama_config(len(tokenizer), bos_token_id=0, eos_token_id=None)
    model = init_sharp(LlamaForCausalLM(cfg), seed, scale)
    return LoadedModel("tiny", model, tokenizer, build_vocab(tokenizer), torch.device("cpu"))


@pytest.fixture(scope="module")
def small_models():
    t_tok = char_tokenizer([("a", "b"), ("c", "d")])
    d_tok = char_tokenizer([("b", "c"), ("d", "a")])
    target = _loaded(t_tok, seed=11, scale=0.25)
    same_vocab_draft = _loaded(t_tok, seed=12, scale=0.25)
    other_vocab_draft = _loaded(d_tok, seed=13, scale=0.25)
    return target, same_vocab_draft, other_vocab_draft


def _exact_two_token_dist(target, prompt):
    """P(t1, t2) of the target alone after the sampling transforms. Token 0 (<s>) is
    special and ends generation, so (t1, 0) is the one-token output (t1,)."""
    return output_law(target.model, prompt, 2, min_mass=0.0).cells


def model_drafter(which: str, target, draft, other, text: str):
    """The draft model of a sampling test and its own prompt for `text`: the same-vocabulary
    draft, or the draft with another tokenizer (which drafts through text and has its own prompt)."""
    if which == "same-vocabulary":
        return ModelDrafter(KVPool(draft.model, 2, 256)), None
    return (TextDrafter(KVPool(other.model, 2, 256), other.vocab, target.vocab),
            [0] + other.vocab.encode_text(text))


def _sample_pairs(target, drafters, prompt, draft_prompt, seed0, draft_length=2):
    counts = Counter()
    settings_base = dict(max_new_tokens=2, temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P, draft_length=draft_length)
    pool = KVPool(target.model, 2, 256)
    policy = Policy()      # shared: under auto the policy's choices vary from call to call
    for i in range(N_SAMPLES):
        r = speculative_generate(target, pool, drafters, prompt, GenerationSettings(seed=seed0 + i, **settings_base),
                                 policy, draft_prompt=draft_prompt)
        counts[tuple(r.token_ids[:2])] += 1
    return counts


PROMPT_TEXT = "abcda"


def test_rejection_sampling_same_vocabulary(small_models):
    target, draft, _ = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    drafter = ModelDrafter(KVPool(draft.model, 2, 256))
    counts = _sample_pairs(target, Drafters(model=drafter), prompt, None, 1000)
    assert chi_square_ok(counts, dist, N_SAMPLES), (counts, dist)


def test_sample_and_compare_other_vocabulary(small_models):
    target, _, other = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    d_prompt = [0] + other.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    drafter = TextDrafter(KVPool(other.model, 2, 256), other.vocab, target.vocab)
    counts = _sample_pairs(target, Drafters(model=drafter), prompt, d_prompt, 5000)
    assert chi_square_ok(counts, dist, N_SAMPLES), (counts, dist)


@pytest.mark.parametrize("which", ["same-vocabulary", "other-vocabulary"])
def test_sampling_with_lookup_and_draft_under_the_policy(small_models, which):
    """Rounds drafted by prompt lookup (sample-and-compare), by the draft model (rejection
    sampling or sample-and-compare) or by nobody, as the policy picks: still the target's
    distribution. "abcda" ends where it began, so the lookup has a proposal."""
    target, draft, other = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    model, d_prompt = model_drafter(which, target, draft, other, PROMPT_TEXT)
    drafters = Drafters(lookup=LookupDrafter(), model=model)
    counts = _sample_pairs(target, drafters, prompt, d_prompt, 9000, draft_length="auto")
    assert chi_square_ok(counts, dist, N_SAMPLES), (counts, dist)


def test_sampling_with_datastore_proposals(small_models, tmp_path):
    """Rounds drafted from a datastore of answers (engine/drafters/datastore.py), here one whose first
    token is the target's likeliest and one that is not: sample-and-compare keeps the target's
    distribution."""
    from engine.drafters.datastore import Datastore, save

    target, _, _ = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    likely = max((k for k in dist if len(k) == 2), key=dist.get)
    save(tmp_path / "store.npz", [(prompt, list(likely)), (prompt[1:], [likely[1], likely[0]])],
         target.tokenizer.get_vocab())
    store = Datastore.load(tmp_path / "store.npz", target.tokenizer.get_vocab())
    datastore = DatastoreDrafter(store)
    assert datastore.propose(prompt, [], 2, None).source == "datastore"
    counts = _sample_pairs(target, Drafters(lookup=LookupDrafter(), datastore=datastore), prompt, None, 13000)
    assert chi_square_ok(counts, dist, N_SAMPLES), (counts, dist)


def test_chi_square_rejects_the_draft_distribution(small_models):
    """The check has power: the same-vocabulary draft's own distribution fails it."""
    target, draft, _ = small_models
    prompt = [0] + target.vocab.encode_text(PROMPT_TEXT)
    dist = _exact_two_token_dist(target, prompt)
    draft_dist = _exact_two_token_dist(draft, prompt)
    g = torch.Generator().manual_seed(0)
    keys = list(draft_dist)
    idx = torch.multinomial(torch.tensor([draft_dist[k] for k in keys]), N_SAMPLES, replacement=True, generator=g)
    counts = Counter(keys[i] for i in idx.tolist())
    assert not chi_square_ok(counts, dist, N_SAMPLES)


def test_greedy_ids_equal_torch_argmax_on_every_dtype_and_edge():
    """greedy_ids (numpy on the CPU) picks what torch's argmax picks: random rows, ties (the
    first index), a NaN (counts as the maximum), a 1-D vector, and bfloat16 (torch's path)."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(17, 4096, generator=gen)
    rows[3, 10] = rows[3, 2000] = rows[3].max() + 1          # a tie: the first index wins
    rows[5, 77] = float("nan")
    rows[6] = 0.0                                            # all equal
    for dtype in (torch.float32, torch.float16, torch.float64, torch.bfloat16):
        x = rows.to(dtype)
        assert greedy_ids(x) == x.argmax(-1).tolist()
        assert greedy_ids(x[4]) == [int(x[4].argmax())]
    assert greedy_ids(rows)[3] == 10 and greedy_ids(rows)[5] == 77 and greedy_ids(rows)[6] == 0
    assert greedy_ids(rows[:, ::3]) == rows[:, ::3].argmax(-1).tolist()   # a strided view
    grad = rows.clone().requires_grad_()                       # numpy cannot read it: torch's path
    assert greedy_ids(grad) == rows.argmax(-1).tolist()
