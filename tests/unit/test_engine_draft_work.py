"""What a draft model's proposal costs, and the steps it does not waste, on the shipped default
pair (the draft has another tokenizer) and on the shipped target drafting for itself (same
vocabulary): drafting stops at the token that decides the answer, and a proposal reports its
passes and its first pass's time apart, so the policy prices a step as a step."""
from __future__ import annotations

import pytest

from engine import LocalEngine, EngineConfig
from engine.drafters import ModelDrafter, Sampling
from engine.kv import KVPool
from engine.settings import GenerationSettings, TextStop

# Cursor at the end of a body line: the target's answer is the rest of the function and beyond.
TEXT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"


@pytest.fixture(scope="module")
def engine():
    return LocalEngine(EngineConfig(target="default", draft="default", device="cpu", threads=1))


def _ids(loaded, text):
    return [loaded.tokenizer.bos_token_id] + loaded.vocab.encode_text(text)


def _drafter(engine, kind):
    """(drafter, its own prompt for TEXT: None where it reads the target's)."""
    if kind == "other tokenizer":
        return engine.drafters.model, _ids(engine.draft, TEXT)
    same = ModelDrafter(KVPool(engine.target.model, 2, 1024), vocab=engine.target.vocab)
    return same, None


@pytest.mark.parametrize("kind", ["other tokenizer", "same vocabulary"])
def test_drafting_stops_at_the_token_that_decides_the_answer(engine, kind):
    drafter, draft_prompt = _drafter(engine, kind)
    prompt = _ids(engine.target, TEXT)
    drafter.begin(prompt, draft_prompt)
    free = drafter.propose(prompt, b"", 12, Sampling())
    free_text = engine.target.vocab.bytes_of(free.tokens)
    assert b"\n" in free_text[:-1], free_text     # the draft writes past a line end unchecked

    drafter.begin(prompt, draft_prompt)
    stopped = drafter.propose(prompt, b"", 12, Sampling(decided=lambda drafted: b"\n" in drafted))
    stopped_text = engine.target.vocab.bytes_of(stopped.tokens)
    # the same draft, cut short once it wrote a line end
    assert free_text.startswith(stopped_text) and b"\n" in stopped_text, (stopped_text, free_text)
    assert stopped.passes < 12 <= free.passes


@pytest.mark.parametrize("kind", ["other tokenizer", "same vocabulary"])
def test_a_proposal_reports_its_passes_and_its_first_pass(engine, kind):
    drafter, draft_prompt = _drafter(engine, kind)
    prompt = _ids(engine.target, TEXT)
    drafter.begin(prompt, draft_prompt)
    first = drafter.propose(prompt, b"", 4, Sampling())
    assert first.passes == 4 and first.first_ms > 0
    # ten tokens the target wrote without the draft (as lookup rounds do): the first pass of the
    # next proposal catches up on them
    written = engine.target.vocab.continuation_ids(prompt, b"    return a * b\n\n\ndef div(a, b):")[:10]
    assert len(written) == 10
    later = drafter.propose(prompt + written, engine.target.vocab.bytes_of(written), 4, Sampling())
    assert later.passes >= 1 and later.first_ms > 0


def test_drafts_that_stop_at_the_deciding_token_keep_the_answer_the_targets(engine):
    """Greedy output with a stop rule and the draft model drafting (a fixed length: it drafts
    every round lookup has less) is the target's own, to the token."""
    ids, draft_ids = _ids(engine.target, TEXT), _ids(engine.draft, TEXT)

    def after_two_lines(text):
        at = -1
        for _ in range(2):
            at = text.find("\n", at + 1)
            if at < 0:
                return None
        return TextStop("two lines", at + 1)

    alone = LocalEngine(EngineConfig(target="default", draft="none", device="cpu", threads=1))
    settings = GenerationSettings(max_new_tokens=40, draft_length=8)
    want = alone.generate(ids, None, settings, stop_check=after_two_lines)
    engine.clear_caches()
    got = engine.generate(ids, draft_ids, settings, stop_check=after_two_lines)
    assert got.token_ids == want.token_ids and got.stop_reason == "two lines"
    assert got.stats.rounds_by_drafter["model"] >= 2
