"""Alternative suggestions for cycling (`candidates` > 1): the greedy completion first, exactly
what the editor already shows (usually from the cache), then exact samples from the target
model (the engine's lossless speculative sampling: each is an honest draw), cut and cleaned
like any completion and without duplicates. Made only when the user asks to cycle, so typing
costs nothing more; samples are not cached (a cached sample would come back every time).

The engine is imported where it is used: the settings table reads MAX_CANDIDATES without
loading torch."""
from __future__ import annotations

import dataclasses
import threading
from typing import TYPE_CHECKING

from completion.context import parse_document
from completion.postprocess import clean_completion, with_eol
from engine.settings import GenerationSettings

if TYPE_CHECKING:
    from completion.pipeline import Completion, CompletionOptions, CompletionPipeline, CompletionRequest

MAX_CANDIDATES = 5
SAMPLE_TEMPERATURE = 1.0   # with greedy settings (temperature 0), draw from the target as it is
DRAWS_PER_CANDIDATE = 2    # duplicates are dropped: at most this many draws per wanted candidate


def _same(a: str, b: str) -> bool:
    return a.rstrip() == b.rstrip()


def sample_once(pipeline: CompletionPipeline, req: CompletionRequest, options: CompletionOptions,
                cancel: threading.Event | None) -> Completion | None:
    """One sampled completion at the request's cursor, cleaned; None when empty or cancelled."""
    from completion.pipeline import Completion, RequestPrompt

    cur = parse_document(req.text, req.line, req.character)
    gen = GenerationSettings(max_new_tokens=options.max_new_tokens, draft_length=options.draft_length,
                             temperature=options.temperature, time_budget_ms=options.time_budget_ms)
    result = pipeline.engine.decode(RequestPrompt(pipeline, req.uri, cur, options), gen, cancel=cancel)
    if result.stop_reason == "cancelled":
        return None
    cleaned = clean_completion(result.text, cur, options.multiline, options.max_lines, options.tab_size)
    if cleaned is None or not cleaned.text:
        return None
    return Completion(text=with_eol(cleaned.text, cur.eol),
                      replace_end=(cur.line, cur.character + cleaned.replace_chars),
                      cursor=(cur.line, cur.character))


def alternatives(pipeline: CompletionPipeline, req: CompletionRequest, options: CompletionOptions, count: int,
                 cancel: threading.Event | None = None) -> list[Completion]:
    """Up to `count` different completions: the greedy one first (when there is one), then
    samples. An engine whose samples are not exact draws from the target (a remote server applies
    its own sampling defaults) gives the greedy one only."""
    count = max(1, min(count, MAX_CANDIDATES))
    first = pipeline.complete(req, options, cancel=cancel)
    found = [first] if first is not None else []
    if count == 1 or not pipeline.engine.exact_samples:
        return found
    sampled = dataclasses.replace(options, temperature=options.temperature or SAMPLE_TEMPERATURE)
    for _ in range(DRAWS_PER_CANDIDATE * (count - 1)):
        if len(found) >= count or (cancel is not None and cancel.is_set()):
            break
        one = sample_once(pipeline, req, sampled, cancel)
        if one is not None and not any(_same(one.text, f.text) for f in found):
            found.append(one)
    return found
