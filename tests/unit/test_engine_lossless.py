"""Greedy speculative output == target-alone greedy output, token for token, for every drafter."""
import pytest

from collections import Counter

from engine import LocalEngine, EngineConfig, GenerationSettings
from tests.tiny_models import tiny_pair_dirs, tiny_same_tokenizer_draft_dir

CODE = [
    "def add(a, b):\n    return",
    "import os\nimport sys\n\n\ndef main(argv):\n    ",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.",
    "for i in range(10):\n\tprint(i)\n\t",
    "if x:\r\n    y = 1\r\nelse:\r\n    y =",
    "value = compute()   \n   ",
    "",
    "x",
    "(",
    "\n",
    "    ",
    "# 你好，世界\ndef greet():\n    return '你",
    "emoji = '😀🎉' + ",
    "name = 'Ame\u0301lie'  # combining accent\n",
    "s = \"<fim_prefix> <PRE> ▁<MID>\"\n",
    "\t\tif not isinstance(s, str):\n\t\t\traise TypeError(",
    "try:\n    pass\nexcept Exception as e:\n    ",
    "@dataclass\nclass Config:\n    name: str\n    size: int = ",
    "with open(path) as f:\n    for line in f:\n        ",
    "    def __repr__(self):\n        return f'",
    "x = [1, 2, 3]\ny = {k: v for k, v in ",
    "return self._parse(s, idx=",
    "\"\"\"Docstring.\"\"\"\n\n",
    "lambda x: x *",
    "a = b if c else ",
]
# The same prompts with trailing variations make at least 50.
PROMPTS = CODE + [p + " " for p in CODE]
assert len(PROMPTS) >= 50

MAX_NEW = 16


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    target_dir, draft_dir = tiny_pair_dirs()
    base = LocalEngine(EngineConfig(target=target_dir, draft="none"))
    store = str(target_datastore(base, tmp_path_factory.mktemp("store") / "datastore.npz"))
    others = {
        "ngram": LocalEngine(EngineConfig(target=target_dir, draft="ngram")),
        "same-tokenizer": LocalEngine(EngineConfig(target=target_dir, draft=tiny_same_tokenizer_draft_dir())),
        "other-tokenizer": LocalEngine(EngineConfig(target=target_dir, draft=draft_dir)),
        "ngram+datastore": LocalEngine(EngineConfig(target=target_dir, draft="ngram", datastore=store)),
        "other-tokenizer+datastore": LocalEngine(EngineConfig(target=target_dir, draft=draft_dir, datastore=store)),
    }
    return base, others


def target_datastore(base: LocalEngine, path):
    """A datastore of the target's own greedy answers (as `python -m training.datastore` makes
    one), here on the test's own code prompts cut short, so that it proposes often."""
    from engine.drafters.datastore import save

    answers = []
    for prompt in CODE:
        ids = _ids(base.target, prompt[:len(prompt) * 2 // 3])
        answers.append((ids, base.generate(ids, settings=GenerationSettings(max_new_tokens=24)).token_ids))
    save(path, answers, base.target.tokenizer.get_vocab())
    return path


def _ids(loaded, text):
    bos = loaded.tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + loaded.vocab.encode_text(text)


def test_drafters_are_the_kinds_asked_for(engines):
    _, others = engines
    kinds = {k: (e.drafters.lookup is not None, e.drafters.model.kind if e.drafters.model else None)
             for k, e in others.items()}
    # a draft model comes with prompt lookup beside it; the policy picks per round
    assert kinds == {"ngram": (True, None), "same-tokenizer": (True, "model"), "other-tokenizer": (True, "text"),
                     "ngram+datastore": (True, None), "other-tokenizer+datastore": (True, "text")}
    assert [k for k, e in others.items() if e.drafters.datastore is not None] == \
        ["ngram+datastore", "other-tokenizer+datastore"]


@pytest.mark.parametrize("draft_length", ["auto", 3])
def test_greedy_speculative_equals_target_alone(engines, draft_length):
    base, others = engines
    settings = GenerationSettings(max_new_tokens=MAX_NEW, draft_length=draft_length)
    accepted = {k: 0 for k in others}
    from_store = {k: 0 for k in others if "datastore" in k}
    for prompt in PROMPTS:
        t_ids = _ids(base.target, prompt)
        expected = base.generate(t_ids, settings=settings)
        for name, eng in others.items():
            d_ids = _ids(eng.draft, prompt) if eng.draft is not None else None
            got = eng.generate(t_ids, d_ids, settings=settings)
            assert got.token_ids == expected.token_ids, (name, prompt)
            assert got.text == expected.text
            accepted[name] += got.stats.accepted
            if eng.drafters.datastore is not None:
                from_store[name] += got.figures["lookup"]["agreed"].get("datastore", 0)
    # Each drafter really drafted something the target took (the test exercises acceptance).
    assert all(n > 0 for n in accepted.values()), accepted
    assert all(n > 0 for n in from_store.values()), from_store


def test_speculation_saves_target_calls(engines):
    base, others = engines
    prompt = _ids(base.target, CODE[2])
    plain = base.generate(prompt, settings=GenerationSettings(max_new_tokens=32))
    spec = others["same-tokenizer"].generate(prompt, settings=GenerationSettings(max_new_tokens=32))
    assert spec.token_ids == plain.token_ids
    assert spec.stats.target_calls < plain.stats.target_calls
    assert spec.stats.tokens_per_target_call > 1.0


def test_policy_stops_drafting_with_a_draft_that_never_agrees(engines):
    """A random draft model (same vocabulary, untrained) is almost never right: the policy
    learns that drafting cannot pay and decodes without it, probing now and then; the output
    stays the target's own."""
    from engine import Drafters, KVPool, Policy, speculative_generate
    from engine.drafters import ModelDrafter
    from tests.tiny_models import tiny_model

    base, _ = engines
    target = base.target
    useless = ModelDrafter(KVPool(tiny_model("llama", len(target.tokenizer), seed=7), 2, 1024))
    drafters, policy = Drafters(model=useless), Policy()
    settings = GenerationSettings(max_new_tokens=MAX_NEW)
    rounds = Counter()
    for prompt in PROMPTS[:12]:
        t_ids = _ids(target, prompt)
        got = speculative_generate(target, KVPool(target.model, 2, 1024), drafters, t_ids, settings, policy)
        assert got.token_ids == base.generate(t_ids, settings=settings).token_ids, prompt
        rounds.update(got.stats.rounds_by_drafter)
    model = policy.estimate("model")
    assert model.reach()[1] < model.prior / 2      # it measured the draft
    assert policy.plan({}, model=True, model_ready=True, max_k=16).chain is None
    assert rounds["none"] > 3 * rounds["model"] > 0, rounds     # gave up, but probed


@pytest.mark.parametrize("name", ["ngram", "same-tokenizer", "other-tokenizer", "ngram+datastore"])
def test_acceptance_by_position_is_counted_exactly(engines, name):
    """stats.by_position holds, per drafter, the drafts that reached each position and those
    accepted there: its accepted counts add up to the accepted tokens of the chain rounds, and
    position 0 was reached once per round of that drafter."""
    base, others = engines
    eng = others[name]
    rounds, counted = Counter(), {}
    for prompt in PROMPTS[:20]:
        d_ids = _ids(eng.draft, prompt) if eng.draft is not None else None
        got = eng.generate(_ids(base.target, prompt), d_ids,
                           settings=GenerationSettings(max_new_tokens=MAX_NEW, draft_length=3))
        s = got.stats
        for drafter, rec in s.by_position.items():
            ev, acc = rec["evaluated"], rec["accepted"]
            assert len(ev) == len(acc) <= 3
            assert all(a <= e for a, e in zip(acc, ev))
            assert all(later <= earlier for earlier, later in zip(acc, ev[1:]))  # reached only past an acceptance
            c = counted.setdefault(drafter, [0, 0])
            c[0] += ev[0]
            c[1] += sum(acc)
        rounds.update({k: n for k, n in s.rounds_by_drafter.items() if k != "none"})
        assert sum(sum(r["accepted"]) for r in s.by_position.values()) == s.accepted
    assert counted == {d: [rounds[d], counted[d][1]] for d in rounds if rounds[d]}
    assert sum(c[1] for c in counted.values()) > 0
