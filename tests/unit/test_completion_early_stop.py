"""Deciding while decoding, through the pipeline on the shipped default pair at the end of lines
of a file it never saw: the ghost text is exactly what decoding to the end and cutting afterwards
shows, with and without a draft, while far fewer tokens are decoded."""
from __future__ import annotations

import dataclasses
import inspect
import os

import pytest

from bench.end_of_line import end_of_line_cursors
from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest

OPTS = CompletionOptions(max_new_tokens=48, extra_tokens=0, prefix_tokens=256, suffix_tokens=96)
LATE = dataclasses.replace(OPTS, stop_while_decoding=False)     # decode to the end, cut afterwards


@pytest.fixture(scope="module")
def engines():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from engine import LocalEngine, EngineConfig
    return {draft: LocalEngine(EngineConfig(target="default", draft=draft, device="cpu", threads=1))
            for draft in ("none", "default")}


def held_out_document() -> str:
    import pygls.workspace.text_document as held_out    # pygls is held out of the pair's corpus
    return inspect.getsource(held_out)



def test_early_stop_shows_the_same_text_and_decodes_less(engines):
    doc = held_out_document()
    uri = "file:///held/out/text_document.py"
    decoded = {"early": 0, "late": 0}
    shown = 0
    reasons = set()
    for draft, engine in engines.items():
        early, late = CompletionPipeline(engine), CompletionPipeline(engine)
        for line, ch in end_of_line_cursors(doc, 8):
            req = CompletionRequest(uri, doc, line, ch)
            a, b = early.complete(req, OPTS), late.complete(req, LATE)
            assert (a is None) == (b is None), (draft, line)
            a_stats, b_stats = early.last_stats, late.last_stats
            if a is not None:
                assert (a.text, a.replace_end) == (b.text, b.replace_end), (draft, line)
            # the early decode is a prefix of the late one: the same tokens, just fewer
            assert b_stats["raw_text"].startswith(a_stats["raw_text"][:len(b_stats["raw_text"])])
            assert a_stats["decoded_tokens"] <= b_stats["decoded_tokens"]
            assert a_stats["shown_tokens"] == b_stats["shown_tokens"] <= a_stats["decoded_tokens"]
            decoded["early"] += a_stats["decoded_tokens"]
            decoded["late"] += b_stats["decoded_tokens"]
            shown += a_stats["shown_tokens"]
            reasons.add(a_stats["stop_reason"])
        summary = early.stats_summary()
        assert summary["decoded_tokens"] >= summary["shown_tokens"] > 0
    assert decoded["early"] < decoded["late"]
    assert reasons - {"eos", "max_tokens"}, reasons      # some answers were decided early
