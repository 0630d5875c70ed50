"""The other-tokenizer drafter's alignment is incremental: each round it checks only the draft ids
since the last round against the shared text. On the shipped pair (two real tokenizers), at every
round of a decode, that gives exactly what aligning from scratch gives."""
import pytest

from engine import LocalEngine, EngineConfig
from engine.drafters import Sampling
from engine.kv import common_prefix_len

TEXTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Ledger:\n\tdef add(self, amount):\n\t\tself.total += amount  # naïve 中文 😀\n\t\treturn self\n",
    "for i in range(10):\r\n    print(i)   \r\n    x = [a for a in items if a]\n",
]


@pytest.fixture(scope="module")
def engine():
    return LocalEngine(EngineConfig(target="default", draft="default", device="cpu", threads=1))


def _prompt(loaded, text):
    bos = loaded.tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + loaded.vocab.encode_text(text)


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_sync_equals_a_sync_from_scratch_every_round(engine, text):
    drafter = engine.drafters.model
    assert drafter.kind == "text"
    cut = len(text) // 3
    prompt = _prompt(engine.target, text[:cut])
    drafter.begin(prompt, _prompt(engine.draft, text[:cut]))
    # What "the target" writes: the rest of the text, as its tokenizer splits it in context. Each
    # round accepts the draft's agreeing prefix and one token of its own, as verification does.
    reference = engine.target.vocab.continuation_ids(prompt, text[cut:].encode("utf-8"))
    seq, done, rounds, accepted = list(prompt), 0, 0, 0
    while done < len(reference):
        generated = engine.target.vocab.bytes_of(seq[len(prompt):])
        before = (list(drafter.cont), drafter.aligned)
        incremental = drafter._sync(drafter.held + generated, seq), list(drafter.cont)
        drafter.cont, drafter.aligned = list(before[0]), (0, b"")
        from_scratch = drafter._sync(drafter.held + generated, seq), list(drafter.cont)
        assert incremental == from_scratch, (rounds, generated)
        drafter.cont, drafter.aligned = before    # propose aligns again, as in a real round
        draft = drafter.propose(seq, generated, 4, Sampling())
        n = common_prefix_len(draft.tokens, reference[done:])
        seq += reference[done:done + n + 1]
        done += n + 1
        rounds, accepted = rounds + 1, accepted + n
    assert seq[len(prompt):] == reference
    assert rounds >= 5 and accepted > 0   # both accepted drafts and rejections were aligned
