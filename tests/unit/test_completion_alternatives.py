"""Alternatives for cycling: the greedy completion first (as shown, from the cache), then
samples from the target, distinct after post-processing, only when asked."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from completion.alternatives import MAX_CANDIDATES, alternatives, sample_once
from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest
from engine import LocalEngine, EngineConfig
from tests.tiny_models import tiny_pair_dirs

DOC = "import os\n\n\ndef add(alpha, beta):\n    \n\n\ndef main():\n    print(add(1, 2))\n"
URI = "file:///work/demo/alternatives.py"
OPTS = CompletionOptions(max_new_tokens=12, extra_tokens=0, multiline="never")
AT = (4, 4)


@pytest.fixture(scope="module")
def pipe():
    target, draft = tiny_pair_dirs()
    return CompletionPipeline(LocalEngine(EngineConfig(target=target, draft=draft, device="cpu")))


def test_the_greedy_one_comes_first_from_the_cache_and_the_others_differ(pipe):
    torch.manual_seed(0)
    req = CompletionRequest(URI, DOC, *AT)
    shown = pipe.complete(req, OPTS)
    assert shown is not None, "the tiny model shows something here"
    runs = pipe.stats_summary()["requests"]
    (only,) = alternatives(pipe, req, OPTS, 1)
    assert (only.text, only.replace_end, only.from_cache) == (shown.text, shown.replace_end, True)
    assert pipe.stats_summary()["requests"] == runs + 1   # one cached lookup, no sampling

    found = alternatives(pipe, req, OPTS, 4)
    assert 2 <= len(found) <= 4
    assert (found[0].text, found[0].from_cache) == (shown.text, True)
    texts = [c.text.rstrip() for c in found]
    assert len(set(texts)) == len(texts) and all(texts)
    for c in found:
        assert c.cursor == AT and c.replace_end[0] == AT[0]
    # The samples were not cached: the next greedy request still shows the greedy text.
    assert pipe.complete(req, OPTS).text == shown.text


def test_samples_are_drawn_at_the_settings_temperature_or_the_targets_own(pipe):
    req = CompletionRequest(URI, DOC, *AT)
    # At temperature 0 a "sample" is the greedy text itself, a check that the path is the same.
    greedy = sample_once(pipe, req, OPTS, None)
    assert greedy is not None and greedy.text == pipe.complete(req, OPTS).text
    torch.manual_seed(1)
    hot = [sample_once(pipe, req, dataclasses.replace(OPTS, temperature=1.0), None) for _ in range(6)]
    assert len({c.text for c in hot if c is not None}) > 1
    assert alternatives(pipe, req, OPTS, 99) and MAX_CANDIDATES == 5
    assert len(alternatives(pipe, req, OPTS, 99)) <= MAX_CANDIDATES
