"""What a draft model's proposal costs, and the steps it no longer wastes, on the shipped default
pair (the draft has another tokenizer) and on the shipped target drafting for itself (same
vocabulary): drafting stops at the token that decides the answer, and a proposal reports its
passes and the tokens its first pass caught up on, so the controller prices a step as a step."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine import Engine, EngineConfig
from engine.drafters import ModelDrafter, Sampling
from engine.kv import KVPool, common_prefix_len
from engine.settings import GenerationSettings, TextStop

# Cursor at the end of a body line: the target's answer is the rest of the function and beyond.
TEXT = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\ndef mul(a, b):\n"


@pytest.fixture(scope="module")
def engine():
    return Engine(EngineConfig(target="default", draft="default", device="cpu", threads=1))


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
    assert stopped.work.steps < 12 <= free.work.steps


@pytest.mark.parametrize("kind", ["other tokenizer", "same vocabulary"])
def test_a_proposal_reports_the_tokens_it_caught_up_on(engine, kind):
    drafter, draft_prompt = _drafter(engine, kind)
    prompt = _ids(engine.target, TEXT)
    drafter.begin(prompt, draft_prompt)
    first = drafter.propose(prompt, b"", 4, Sampling())
    assert (first.work.steps, first.work.catch_up) == (4, 0)
    # ten tokens the target wrote without the draft (as lookup rounds do): the first pass of the
    # next proposal computes them, one of them being the input of its own first step
    written = engine.target.vocab.continuation_ids(prompt, b"    return a * b\n\n\ndef div(a, b):")[:10]
    assert len(written) == 10
    seq = prompt + written
    later = drafter.propose(seq, engine.target.vocab.bytes_of(written), 4, Sampling())
    assert later.work.steps >= 1 and later.work.first_ms > 0
    if kind == "same vocabulary":   # less what its cache already held: its own draft, where the target wrote it too
        assert later.work.catch_up == 9 - common_prefix_len(first.tokens[:-1], written)
    else:   # in the draft's own tokens: about as many
        assert 4 <= later.work.catch_up <= 12, later.work


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

    alone = Engine(EngineConfig(target="default", draft="none", device="cpu", threads=1))
    settings = GenerationSettings(max_new_tokens=40, draft_length=8)
    want = alone.generate(ids, None, settings, stop_check=after_two_lines)
    engine.clear_caches()
    got = engine.generate(ids, draft_ids, settings, stop_check=after_two_lines)
    assert got.token_ids == want.token_ids and got.stop_reason == "two lines"
    assert got.stats.rounds_by_drafter["model"] >= 2


def test_the_controller_plans_with_exactly_the_catch_up_the_draft_then_does():
    """The shipped target drafting for itself (same vocabulary, so counts are exact) under the
    controller, lookup beside it: at every round the model drafts, the tokens the plan priced it
    to catch up on are the tokens its first pass did catch up on: after lookup rounds, after
    trees whose lookup path won, after rejections. (Its estimates are given by hand, frozen, so
    that the model drafts often: as its own draft the target costs what it saves.)"""
    target_dir = Path(__file__).resolve().parents[2] / "engine" / "default_pair" / "target"
    same = Engine(EngineConfig(target="default", draft=str(target_dir), device="cpu", threads=1))
    assert same.drafters.model.kind == "model"
    controller = same.memory.controller
    controller.verify.record(1, 4.0)
    controller.model.step_ms, controller.model.begin_ms, controller.frozen = 0.05, 1.0, True
    planned, done = [], []
    plan = controller.plan

    def recording_plan(*args):
        p = plan(*args)
        planned.append((p.drafter, args[5]))    # model_behind, as plan_round passes it
        return p
    controller.plan = recording_plan
    propose = same.drafters.model.propose

    def recording_propose(*args):
        draft = propose(*args)
        done.append(draft.work.catch_up)
        return draft
    same.drafters.model.propose = recording_propose
    text = TEXT + "    return a * b\n\n\ndef div(a, b):\n    return a / b\n\n\ndef mod(a, b):\n"
    for cut in (len(TEXT), len(text)):
        same.generate(_ids(same.target, text[:cut]), None, GenerationSettings(max_new_tokens=40))
    behind = [b for kind, b in planned if kind in ("model", "tree")]
    assert len(behind) == len(done) >= 3 and any(behind), (planned, done)
    assert behind == done
