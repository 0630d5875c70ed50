"""Sampled speculative output follows the target's law over whole outputs of several tokens,
with drafts of 4-7 tokens verified in one round, for every drafter: the draft model with the
target's vocabulary (rejection sampling with its q), the draft model with another tokenizer and
prompt lookup (sample-and-compare), the datastore of answers, the copy of a region the answer
rewrites, and the cost-aware policy mixing them, also with the target in bfloat16, int8 and int4
(its law then that precision's).

The models know one habit: text that goes round "abcd", now and then leaving it (they are
trained a moment on such text). So prompt lookup's copies of the prompt's cycle and the drafts
hold for several tokens, and the rounds reach their later positions, where the verification
rules must keep the target's law given the tokens accepted before. Every test counts what its
drafters did (GenerationStats, summed in DraftCounts) and asserts that most calls verified long
chains, so that none can pass by drafting one token at a time; and a check shows the law's
test rejects a wrong law.
"""
import dataclasses
import random
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaForCausalLM

from engine import Drafters, GenerationSettings, KVPool, LoadedModel, Policy, speculative_generate
from engine.drafters import CopyDrafter, DatastoreDrafter, Draft, LookupDrafter, ModelDrafter, TextDrafter
from engine.drafters.datastore import Datastore, save
from engine.forward.forwards import make_forward
from engine.forward.lean import lean_for
from engine.forward.quantize import int8_engine
from engine.policy import Acceptance, Mean, VerifyCost, key
from engine.load.vocab_tables import build_vocab
from tests.sampling_law import (MIN_EXPECTED, POOLED, TEMPERATURE, TOP_K, TOP_P, DraftCounts, char_tokenizer,
                                output_law)
from tests.tiny_models import llama_config, train_on_ids

N = 1000             # sampled calls per test
NEW_TOKENS = 8       # each call's output: the law is over all of it
DRAFT_LENGTH = 6     # tokens a fixed-length round drafts (the first round has room for 7)
CYCLE_TEXT = "abcdabcdabcd"          # the target writes ab cd ab cd ...; the prompt repeats it


def cycle_text(seed: int, chars: int, stay: float) -> str:
    """Text that goes round a -> b -> c -> d -> a, a character leaving the cycle at random
    (1 - stay of the time)."""
    rng = random.Random(seed)
    nxt = {"a": "b", "b": "c", "c": "d", "d": "a"}
    out, c = [], "a"
    for _ in range(chars):
        out.append(c)
        c = nxt[c] if rng.random() < stay else rng.choice("abcd")
    return "".join(out)


def _trained(tokenizer, seed: int, steps: int, stay: float, **size) -> LoadedModel:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(len(tokenizer), bos_token_id=0, eos_token_id=None, **size))
    ids = torch.tensor(tokenizer.encode(cycle_text(seed, 20_000, stay), add_special_tokens=False))
    train_on_ids(model, ids, steps, seed, window=32)
    return LoadedModel("tiny", model, tokenizer, build_vocab(tokenizer), torch.device("cpu"))


SMALL = dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64)


@pytest.fixture(scope="module")
def cycle_models():
    """(target, a draft with its vocabulary, a draft with another tokenizer). The target writes
    "ab" "cd"; the other tokenizer "ab" "c" "d" (so its drafts are re-tokenized for the target).
    The drafts learnt a tighter cycle than the target: they hold to it where the target leaves
    it now and then, so the same-vocabulary draft's q is sharper than the target's p, and a
    rejection resamples from a residual far from p (max(0, p - q) is the tokens off the cycle)."""
    t_tok = char_tokenizer([("a", "b"), ("c", "d")])
    d_tok = char_tokenizer([("a", "b"), ("b", "c")])
    target = _trained(t_tok, seed=1, steps=150, stay=0.85)
    same = _trained(t_tok, seed=2, steps=40, stay=0.97, **SMALL)
    other = _trained(d_tok, seed=3, steps=60, stay=0.97, **SMALL)
    return target, same, other


def _prompt(model: LoadedModel, text: str = CYCLE_TEXT) -> list[int]:
    return [0] + model.vocab.encode_text(text)


def sample_outputs(target: LoadedModel, drafters: Drafters, prompt: list[int], seed0: int,
                   draft_length="auto", policy: Policy | None = None,
                   draft_prompt=None, quantize: str = "none") -> tuple[list[list[int]], DraftCounts]:
    """N sampled calls (seeds seed0...), with what their drafters did (`quantize`: the target's,
    where at_precision quantized it)."""
    pool = KVPool(target.model, 2, 256, quantize=quantize)
    policy = policy or Policy()
    outputs, counts = [], DraftCounts()
    for i in range(N):
        settings = GenerationSettings(max_new_tokens=NEW_TOKENS, temperature=TEMPERATURE, top_k=TOP_K,
                                      top_p=TOP_P, draft_length=draft_length, seed=seed0 + i)
        r = speculative_generate(target, pool, drafters, prompt, settings, policy, draft_prompt=draft_prompt)
        outputs.append(r.token_ids)
        counts.add(r.stats)
    return outputs, counts


def law_of(target: LoadedModel, prompt: list[int]):
    return output_law(target.model, prompt, NEW_TOKENS, MIN_EXPECTED / N)


def test_the_law_is_whole_and_its_cells_are_testable(cycle_models):
    """The law's cells hold all the probability, each but the root's pool expects MIN_EXPECTED
    of N samples or more, a whole output falls in its own cell, and a sample of an output the
    target cannot write makes the check fail."""
    target, _, _ = cycle_models
    law = law_of(target, _prompt(target))
    assert abs(sum(law.cells.values()) - 1) < 1e-6
    assert all(p * N >= MIN_EXPECTED for key, p in law.cells.items() if key != (POOLED,))
    assert 30 <= len(law.cells) <= N // MIN_EXPECTED
    whole = [key for key in law.cells if POOLED not in key]
    assert whole and all(law.cell(list(key)) == key for key in whole)
    outputs = [list(key) for key in whole for _ in range(round(law.cells[key] * N))]
    assert law.chi_square(outputs)[0] < float("inf")
    assert law.chi_square(outputs + [[7] * NEW_TOKENS])[0] == float("inf")     # id 7 is past the vocabulary


def test_rejection_sampling_of_long_drafts(cycle_models):
    target, same, _ = cycle_models
    prompt = _prompt(target)
    drafters = Drafters(model=ModelDrafter(KVPool(same.model, 2, 256)))
    outputs, counts = sample_outputs(target, drafters, prompt, 1000, DRAFT_LENGTH)
    assert counts.rounds_by_drafter["model"] >= N and counts.mostly_long(0.75), counts
    assert law_of(target, prompt).fits(outputs), counts
    assert not law_of(same, prompt).fits(outputs)     # the samples tell the target from its draft


def test_sample_and_compare_of_long_drafts_from_another_tokenizer(cycle_models):
    target, _, other = cycle_models
    prompt = _prompt(target)
    drafters = Drafters(model=TextDrafter(KVPool(other.model, 2, 256), other.vocab, target.vocab))
    outputs, counts = sample_outputs(target, drafters, prompt, 2000, DRAFT_LENGTH, draft_prompt=_prompt(other))
    assert counts.rounds_by_drafter["model"] >= N and counts.mostly_long(0.75), counts
    assert law_of(target, prompt).fits(outputs), counts


def test_prompt_lookup_of_long_copies(cycle_models):
    target, _, _ = cycle_models
    prompt = _prompt(target)
    outputs, counts = sample_outputs(target, Drafters(lookup=LookupDrafter()), prompt, 3000, DRAFT_LENGTH)
    assert counts.rounds_by_drafter["lookup"] >= N and counts.mostly_long(0.75), counts
    assert law_of(target, prompt).fits(outputs), counts


def test_copies_of_a_region_the_answer_rewrites(cycle_models):
    """The copy drafter, its region the cycle: the answer leaves the cycle now and then, and the
    copy re-aligns after each departure."""
    target, _, _ = cycle_models
    prompt = _prompt(target)
    region = target.vocab.encode_text("abcd" * 8)
    outputs, counts = sample_outputs(target, Drafters(copy=CopyDrafter(region)), prompt, 7000, DRAFT_LENGTH)
    assert counts.rounds_by_drafter["copy"] >= N and counts.mostly_long(0.75), counts
    assert law_of(target, prompt).fits(outputs), counts


# A prompt that goes round the cycle but once: the text's own copies follow short matches, so
# the datastore's proposals (whose match runs over the whole prompt) are taken.
STORE_PROMPT_TEXT = "dbacabcd"


def answers_store(path, target: LoadedModel, prompt: list[int], answers: int = 64,
                  quantize: str = "none") -> Datastore:
    """A datastore of the target's own sampled answers after `prompt` (seeds apart from the
    tests'), as `specfill datastore` makes one of its greedy answers elsewhere."""
    pool = KVPool(target.model, 2, 256, quantize=quantize)
    settings = dict(max_new_tokens=2 * NEW_TOKENS, temperature=TEMPERATURE, top_k=TOP_K, top_p=TOP_P)
    written = [speculative_generate(target, pool, Drafters(), prompt, GenerationSettings(seed=90_000 + i, **settings),
                                    Policy()).token_ids for i in range(answers)]
    save(path, [(prompt, ids) for ids in written], target.tokenizer.get_vocab())
    return Datastore.load(path, target.tokenizer.get_vocab())


def test_datastore_proposals_of_long_answers(cycle_models, tmp_path):
    target, _, _ = cycle_models
    prompt = _prompt(target, STORE_PROMPT_TEXT)
    store = DatastoreDrafter(answers_store(tmp_path / "store.npz", target, prompt))
    outputs, counts = sample_outputs(target, Drafters(lookup=LookupDrafter(), datastore=store), prompt, 4000,
                                     DRAFT_LENGTH)
    by = counts.rounds_by_drafter
    assert by["datastore"] > 0.75 * (by["lookup"] + by["datastore"]), counts
    assert counts.drafted_by["datastore"] >= 4 * by["datastore"], counts
    assert counts.mostly_long(0.75), counts
    assert law_of(target, prompt).fits(outputs), counts


def costed_policy() -> Policy:
    """The policy with its costs and acceptance given and frozen, so that its plans are
    reproducible: a verify pass costs 1 ms and 0.05 ms a token more, a draft model step 0.1 ms,
    the draft model's tokens are right 0.8 of the time, and a free proposal's (prompt lookup's,
    the datastore's) from 0.3 after one matched token to 0.9 after 16. Under these it plans each
    kind of round by what the free drafters offer: chains of lookup, of the datastore or of the
    draft model."""
    verify = VerifyCost(one=1.0, per_doubling=0.0, per_token=0.05, n=1)
    acceptance = {"model": Acceptance(0.8)}
    for match, p in ((1, 0.3), (2, 0.4), (4, 0.6), (8, 0.75), (16, 0.9)):
        for name, source in (("lookup", "prompt"), ("lookup", "completions"), ("datastore", "datastore")):
            acceptance[key(name, Draft([], match=match, source=source))] = Acceptance(p)
    return Policy(frozen=True, verify=verify, acceptance=acceptance, model_begin=Mean(0.0),
                  model_first=Mean(0.1), model_step=Mean(0.1))


@pytest.mark.parametrize("which", ["same-vocabulary", "other-vocabulary"])
def test_the_policy_mixing_lookup_datastore_and_draft_model(cycle_models, tmp_path, which):
    """draft_length auto: prompt lookup (the prompt's copies), a datastore of answers to another
    prompt and the draft model, as the policy plans."""
    target, same, other = cycle_models
    prompt = _prompt(target)
    store = answers_store(tmp_path / "store.npz", target, _prompt(target, STORE_PROMPT_TEXT))
    free = dict(lookup=LookupDrafter(), datastore=DatastoreDrafter(store))
    if which == "same-vocabulary":
        drafters, draft_prompt = Drafters(**free, model=ModelDrafter(KVPool(same.model, 2, 256))), None
    else:
        drafters = Drafters(**free, model=TextDrafter(KVPool(other.model, 2, 256), other.vocab, target.vocab))
        draft_prompt = _prompt(other)
    outputs, counts = sample_outputs(target, drafters, prompt, 5000 if which == "same-vocabulary" else 6000,
                                     policy=costed_policy(), draft_prompt=draft_prompt)
    by = counts.rounds_by_drafter
    assert all(n > 0.02 * counts.rounds for n in (by["lookup"], by["datastore"], by["model"])), counts
    assert counts.mostly_long(0.5), counts
    assert law_of(target, prompt).fits(outputs), counts


def at_precision(target: LoadedModel, precision: str) -> LoadedModel:
    """A copy of `target` as the engine runs it at `precision`: bfloat16 weights, or its lean
    forward's weights quantized (int8, int4)."""
    model = type(target.model)(target.model.config)
    model.load_state_dict(target.model.state_dict())
    if precision == "bfloat16":
        lean_for(model.to(torch.bfloat16))
    else:
        lean_for(model, precision)
    return dataclasses.replace(target, model=model)


class LeanLaw:
    """A model's lean forward, at the precision it was made in, called as output_law calls a
    model: the logits of each sequence's last token, each sequence in a cache of its own."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def __call__(self, batch: torch.Tensor) -> SimpleNamespace:
        rows = [make_forward(self.model, lean_for(self.model))(seq.tolist(), 1)[-1] for seq in batch]
        return SimpleNamespace(logits=torch.stack(rows)[:, None, :])


@pytest.mark.parametrize("precision", ["bfloat16", pytest.param("int8", marks=pytest.mark.skipif(
    int8_engine() is None, reason="no int8 kernel in this torch build or on this CPU")), "int4"])
def test_the_policy_mixing_drafters_at_each_precision(cycle_models, tmp_path, precision):
    """The target in 16 or fewer bits, under the policy with prompt lookup, the datastore and the
    same-vocabulary draft model: the samples follow that precision's law. int4 moves the law
    far enough from float32's for the samples to tell them apart (bfloat16 and int8 stay within
    0.3 % of it in total variation, too close for 1,000 samples)."""
    full, same, _ = cycle_models
    target = at_precision(full, precision)
    quantize = "none" if precision == "bfloat16" else precision
    prompt = _prompt(target)
    store = answers_store(tmp_path / "store.npz", target, _prompt(target, STORE_PROMPT_TEXT), quantize=quantize)
    drafters = Drafters(lookup=LookupDrafter(), datastore=DatastoreDrafter(store),
                        model=ModelDrafter(KVPool(same.model, 2, 256)))
    outputs, counts = sample_outputs(target, drafters, prompt, 8000, policy=costed_policy(), quantize=quantize)
    by = counts.rounds_by_drafter
    assert by["lookup"] + by["datastore"] > 0.02 * counts.rounds and by["model"] > 0.02 * counts.rounds, counts
    assert counts.mostly_long(0.5), counts
    law = output_law(LeanLaw(target.model), prompt, NEW_TOKENS, MIN_EXPECTED / N)
    assert law.fits(outputs), counts
    if precision == "int4":
        assert not law_of(full, prompt).fits(outputs)
