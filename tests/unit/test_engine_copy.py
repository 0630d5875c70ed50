"""The copy drafter (engine/drafters/copy.py): its alignment of a rewrite with the original region
on plain id lists (a copy, one changed line, a renamed identifier in several places, an inserted
and a deleted line), each checked to fail when the alignment never re-aligns after a change;
and greedy identity with a copy source on real models: the tiny transformers target and the
shipped demo target, with the source the target's own answer and that answer edited (so the
alignment breaks and re-aligns)."""
from __future__ import annotations

import doctest
import math
from collections import Counter

import pytest

import engine.drafters.copy as copy_module
from engine import (
    Drafters,
    EngineConfig,
    GenerationSettings,
    KVPool,
    LocalEngine,
    Policy,
    speculative_generate,
)
from engine.drafters import CopyDrafter
from engine.drafters.copy import aligned
from engine.kv import common_prefix_len
from engine.policy import Mean
from engine.protocol import TokenPrompt
from engine.settings import MAX_COPY_LENGTH
from tests.tiny_models import tiny_pair_dirs
from tests.unit.test_engine_lossless import CODE

NL, INDENT, NAME = 0, 7, 50     # ids: a newline, an indentation, an identifier used on several lines


def region_lines() -> list[list[int]]:
    """20 lines of code as ids: an indentation, a few ids of their own (shared now and then, as
    code shares words), NAME on every fourth line, a newline."""
    out = []
    for i in range(20):
        line = [INDENT] * (1 + i % 3) + [100 + i, 200 + i % 5, 300 + 2 * i]
        if i % 4 == 1:
            line[-1:-1] = [NAME, 400]
        out.append(line + [NL])
    return out


def flat(lines: list[list[int]]) -> list[int]:
    return [t for line in lines for t in line]


def rewrites() -> dict[str, list[int]]:
    """The region rewritten: kept, one line changed, NAME renamed, a line inserted, a line deleted."""
    lines = region_lines()
    changed = [line[:] for line in lines]
    changed[9] = [INDENT, 101, 901, 902, 903, NL]           # an indentation and an id the region has, then new ids
    inserted = lines[:8] + [[INDENT, 910, 911, 912, NL]] + lines[8:]
    return {"copy": flat(lines), "changed line": flat(changed),
            "renamed": [51 if t == NAME else t for t in flat(lines)],
            "inserted line": flat(inserted), "deleted line": flat(lines[:12] + lines[13:])}


def prefix_only(region: bytes, out, near: int) -> tuple[int, int]:
    """An alignment that never re-aligns: the rewrite is aligned while it is a copy of the
    region's start, and never after a change."""
    ids = [int.from_bytes(region[i:i + 4], "little", signed=True) for i in range(0, len(region), 4)]
    return (len(out), len(out)) if ids[:len(out)] == list(out) else (-1, 0)


def target_calls(region: list[int], rewrite: list[int], k: int = MAX_COPY_LENGTH) -> tuple[int, list[int]]:
    """A target that writes `rewrite` verifying the copy drafter's proposals, greedily: each call
    accepts a proposal up to its first token that differs from the rewrite, and adds the target's
    own next token. (calls, the tokens each call wrote)."""
    drafter, prompt = CopyDrafter(region), [1, 2, 3]
    drafter.begin(prompt)
    out, written = [], []
    while len(out) < len(rewrite):
        proposal = drafter.propose(prompt + out, b"", k, None).tokens
        want = rewrite[len(out):]
        n = min(common_prefix_len(proposal, want) + 1, len(want))
        out += want[:n]
        written.append(n)
    return len(written), written


# Calls at most for each rewrite of the 20-line region (k = MAX_COPY_LENGTH): a copy's, plus the
# ids the region does not have (written by the target alone) and a call or two where the
# rewrite parts from the region and meets it again (for the first of the 5 renamed ids: the call
# whose proposal it ends, one for the id after it, a copy again; the drafter makes the others).
def calls_allowed(name: str, rewrite: list[int]) -> int:
    copy_calls = math.ceil(len(rewrite) / (MAX_COPY_LENGTH + 1))
    return copy_calls + {"copy": 0, "changed line": 5, "renamed": 3, "inserted line": 5, "deleted line": 2}[name]


@pytest.mark.parametrize("name", list(rewrites()))
def test_a_rewrite_of_the_region_takes_few_target_calls(name):
    region, rewrite = flat(region_lines()), rewrites()[name]
    calls, written = target_calls(region, rewrite)
    assert calls <= calls_allowed(name, rewrite), (calls, written)
    assert len(rewrite) / calls >= 8, written


@pytest.mark.parametrize("name", [n for n in rewrites() if n != "copy"])
def test_without_re_alignment_the_rewrites_take_many_calls(name, monkeypatch):
    """The checks above fail for an alignment that never re-aligns after a change."""
    monkeypatch.setattr(copy_module, "aligned", prefix_only)
    region, rewrite = flat(region_lines()), rewrites()[name]
    assert target_calls(region, region)[0] <= calls_allowed("copy", region)    # a copy still copies
    assert target_calls(region, rewrite)[0] > calls_allowed(name, rewrite)


def test_without_learned_replacements_each_renamed_place_costs_calls(monkeypatch):
    monkeypatch.setattr(copy_module, "MAX_EDIT", 0)
    region, rewrite = flat(region_lines()), rewrites()["renamed"]
    assert target_calls(region, rewrite)[0] > calls_allowed("renamed", rewrite) + 5


def test_a_replacement_is_learned_made_again_and_forgotten_where_the_target_does_not_make_it():
    N, M = 50, 51
    region = [5, N, 6, NL, 7, N, 8, NL, 9, N, 10, NL]
    drafter = CopyDrafter(region)
    drafter.begin([])
    assert drafter.propose([5], b"", 4, None).tokens == [N, 6, NL, 7]
    assert drafter.propose([5, M], b"", 4, None).tokens == []             # M: not in the region
    assert drafter.propose([5, M, 6], b"", 4, None).tokens == [NL, 7, N, 8]   # aligned again after 6
    assert drafter.edits == {}
    draft = drafter.propose([5, M, 6, NL], b"", 4, None)     # the alignment held: N -> M learned
    assert drafter.edits == {(N,): (M,)}
    assert (draft.tokens, draft.source) == ([7, M, 8, NL], "realigned")
    draft = drafter.propose([5, M, 6, NL, 7, M, 8, NL], b"", 4, None)
    assert draft.tokens == [9, M, 10, NL] and draft.match == 6
    drafter.begin([])
    for out in ([5], [5, M], [5, M, 6], [5, M, 6, NL]):
        drafter.propose(out, b"", 4, None)
    assert drafter.propose([5, M, 6, NL, 7, N], b"", 4, None).tokens == [8, NL, 9, N]   # N kept: forgotten
    assert drafter.edits == {}
    assert drafter.propose([5, M, 6, NL, 7, N, 8, NL], b"", 4, None).tokens == [9, N, 10, NL]


def test_a_replacement_of_several_ids_is_forgotten_once_the_target_begins_the_region_s_ids():
    region = [5, 50, 51, 6, NL, 7, 50, 51, 8, NL, 9, 50, 51, 10, NL]
    drafter = CopyDrafter(region)
    drafter.begin([])
    for out in ([5], [5, 60], [5, 60, 6], [5, 60, 6, NL]):
        drafter.propose(out, b"", 4, None)
    assert drafter.edits == {(50, 51): (60,)}
    assert drafter.propose([5, 60, 6, NL, 7], b"", 4, None).tokens == [60, 8, NL, 9]
    # the target wrote 50 there: the answer ends inside the replaced ids
    assert drafter.propose([5, 60, 6, NL, 7, 50], b"", 4, None).tokens == [51, 8, NL, 9]
    assert drafter.edits == {}


def test_an_alignment_is_confirmed_by_a_learned_replacement_too():
    """After a learned replacement, the answer parts from the region again just before a place
    where it is made, and goes on with it: the alignment holds, and the replacement is kept."""
    region = [5, 50, 6, NL, 7, 50, 8, NL, 9, 50, 10, NL]
    drafter = CopyDrafter(region)
    drafter.begin([])
    for out in ([5], [5, 51], [5, 51, 6], [5, 51, 6, NL], [5, 51, 6, NL, 7]):
        drafter.propose(out, b"", 4, None)
    draft = drafter.propose([5, 51, 6, NL, 7, 7], b"", 4, None)      # 7 written twice
    assert (draft.tokens, draft.source) == ([51, 8, NL, 9], "realigned")
    assert drafter.propose([5, 51, 6, NL, 7, 7, 51], b"", 4, None).tokens == [8, NL, 9, 51]
    assert drafter.edits == {(50,): (51,)}


def test_a_replacement_of_several_ids_is_made_whole_from_where_the_answer_is():
    region = [5, 50, 6, NL, 7, 50, 8, NL]
    drafter = CopyDrafter(region)
    drafter.begin([])
    for out in ([5], [5, 60], [5, 60, 61], [5, 60, 61, 6], [5, 60, 61, 6, NL]):
        drafter.propose(out, b"", 4, None)
    assert drafter.edits == {(50,): (60, 61)}
    assert drafter.propose([5, 60, 61, 6, NL, 7], b"", 4, None).tokens == [60, 61, 8, NL]
    assert drafter.propose([5, 60, 61, 6, NL, 7, 60], b"", 4, None).tokens == [61, 8, NL]


def test_after_a_change_the_copy_resumes_at_the_next_matching_line():
    """One changed line: once the target wrote it, the proposal is the region from the line after
    the changed one; a line inserted: from the line it was inserted before; a line deleted: from
    the line after it, as soon as its first ids (beyond the indentation) are written."""
    lines = region_lines()
    region = flat(lines)
    drafter = CopyDrafter(region)
    drafter.begin([1])
    changed = rewrites()["changed line"]
    upto = len(flat(lines[:9])) + 6    # the rewrite's first ten lines, the changed one (6 ids) the last
    drafter.propose([1] + changed[:upto - 5], b"", 8, None)       # aligned before the change
    after = len(flat(lines[:10]))
    assert drafter.propose([1] + changed[:upto], b"", 8, None).tokens == region[after:after + 8]
    inserted = rewrites()["inserted line"]
    upto = len(flat(lines[:8])) + 5
    drafter.begin([1])
    drafter.propose([1] + inserted[:upto - 6], b"", 8, None)
    assert drafter.propose([1] + inserted[:upto], b"", 8, None).tokens == flat(lines[8:])[:8]
    deleted = rewrites()["deleted line"]
    upto = len(flat(lines[:12]))
    drafter.begin([1])
    drafter.propose([1] + deleted[:upto], b"", 8, None)
    first = len(lines[13]) - 4      # the indentation and the line's first id
    assert drafter.propose([1] + deleted[:upto + first + 1], b"", 8, None).tokens == \
        flat(lines[13:])[first + 1:first + 9]


def test_an_alignment_far_from_where_the_answer_parted_is_told_apart():
    """The policy judges a copy found again near where the answer parted from the region apart
    from one found far from there (a short match there is often in the wrong place)."""
    region = flat(region_lines())
    drafter = CopyDrafter(region)
    for then, source in ((region[6], "realigned"), (region[69], "realigned far")):
        drafter.begin([])
        assert drafter.propose(region[:5], b"", 4, None).source == "copy"
        draft = drafter.propose(region[:5] + [990, then], b"", 4, None)
        assert (draft.source, draft.match) == (source, 1), draft


def test_nothing_aligns_nothing_is_proposed():
    region = flat(region_lines())
    drafter = CopyDrafter(region)
    drafter.begin([1])
    assert drafter.propose([1], b"", 8, None).tokens == region[:8]        # the rewrite starts at the region's start
    assert drafter.propose([1, 990, 991], b"", 8, None).tokens == []
    assert drafter.propose([1] + region, b"", 8, None).tokens == []       # the whole region written
    assert drafter.propose([1] + region[:5], b"", 0, None).tokens == []


def test_a_repeated_line_is_copied_where_the_rewrite_is():
    """A line the region has twice: the copy goes on after the one the rewrite has reached."""
    line = [INDENT, 60, 61, NL]
    region = line + [INDENT, 70, NL] + line + [INDENT, 80, NL]
    drafter = CopyDrafter(region)
    drafter.begin([])
    assert drafter.propose(region[:5], b"", 3, None).tokens == [70, NL] + line[:1]
    assert drafter.propose(region[:11], b"", 3, None).tokens == [INDENT, 80, NL]


def test_the_docstring_example():
    assert doctest.testmod(copy_module).failed == 0


def test_match_counts_the_ids_aligned():
    region = flat(region_lines())
    assert aligned(copy_module.as_bytes(region), region[:40], 0) == (40, copy_module.MAX_TAIL)
    assert aligned(copy_module.as_bytes(region), [], 0) == (0, 0)


# Greedy identity on real models.

TINY_PROMPTS = [CODE[i] for i in (15, 22, 19)]      # the tiny target writes varied lines after these
DEMO_PROMPTS = [CODE[i] for i in (3, 22, 17)]       # ... and the demo target after these
NEW_TOKENS = 80


@pytest.fixture(scope="module")
def engines():
    """(target alone, speculative) for the tiny transformers target (prompt lookup and the copy)
    and the shipped demo target (its draft model, prompt lookup, its datastore and the copy)."""
    target_dir, _ = tiny_pair_dirs()
    return {"tiny": (LocalEngine(EngineConfig(target=target_dir, draft="none")),
                     LocalEngine(EngineConfig(target=target_dir, draft="ngram"))),
            "demo": (LocalEngine(EngineConfig(target="default", draft="none")),
                     LocalEngine(EngineConfig(target="default", draft="default")))}


def units(ids: list[int], vocab) -> list[list[int]]:
    """An answer's lines as ids (a line ends with an id whose text holds a newline), or runs of 8
    ids where it has fewer than 5 lines."""
    out, line = [], []
    for t in ids:
        line.append(t)
        if b"\n" in vocab.bytes_of([t]):
            out.append(line)
            line = []
    out += [line] if line else []
    return out if len(out) >= 5 else [ids[i:i + 8] for i in range(0, len(ids), 8)]


def sources(answer: list[int], prompt: list[int], vocab) -> dict[str, list[int]]:
    """The target's answer as the region it rewrites: itself, and edited (so that the target's
    answer differs from the region there): a line changed, its most frequent id renamed, a line
    inserted, a line deleted. New ids come from the prompt."""
    lines = units(answer, vocab)
    mid = len(lines) // 2
    other = [t for t in prompt[1:] if t not in answer] or [t + 1 for t in prompt[1:]]
    new_line = (other * 8)[:len(lines[mid])]
    common = Counter(t for t in answer if b"\n" not in vocab.bytes_of([t])).most_common(1)[0][0]
    return {"copy": answer,
            "changed line": flat(lines[:mid] + [new_line] + lines[mid + 1:]),
            "renamed": [other[0] if t == common else t for t in answer],
            "inserted line": flat(lines[:mid] + [new_line] + lines[mid:]),
            "deleted line": flat(lines[:mid] + lines[mid + 1:])}


def _ids(engine: LocalEngine, text: str, role: str = "target") -> list[int]:
    loaded = getattr(engine, role)
    bos = loaded.tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + loaded.vocab.encode_text(text)


@pytest.mark.parametrize("which", ["tiny", "demo"])
def test_greedy_output_with_a_copy_source_is_the_target_alone(engines, which):
    """Through the engine (TokenPrompt.copy_source), with every drafter it has beside the copy;
    the policy's estimates frozen at their priors (a draft model's step at half a verify pass),
    so that its plans (and the counts) do not depend on timings."""
    alone, spec = engines[which]
    spec.policy = Policy(frozen=True, model_begin=Mean(0.0), model_first=Mean(0.5), model_step=Mean(0.5))
    settings = GenerationSettings(max_new_tokens=NEW_TOKENS)
    copied = Counter()
    for text in TINY_PROMPTS if which == "tiny" else DEMO_PROMPTS:
        prompt = _ids(alone, text)
        expected = alone.generate(prompt, settings=settings)
        for name, source in sources(expected.token_ids, prompt, alone.target.vocab).items():
            spec.clear_caches()      # no recent answer for prompt lookup to copy instead
            draft_ids = (lambda text=text: _ids(spec, text, "draft")) if spec.draft is not None else None
            got = spec.decode(_Prompt(TokenPrompt(prompt, draft_ids, copy_source=source)), settings)
            assert got.token_ids == expected.token_ids, (which, text, name)
            copied[name] += got.stats.counts("copy").accepted
    assert all(copied[name] > NEW_TOKENS // 2 for name in copied), copied


class _Prompt:
    def __init__(self, tokens: TokenPrompt):
        self._tokens = tokens

    def tokens(self) -> TokenPrompt:
        return self._tokens


class RecordingCopy(CopyDrafter):
    """The copy drafter, keeping each proposal with where in the answer it was made."""

    def __init__(self, region):
        super().__init__(region)
        self.proposals: list[tuple[int, list[int]]] = []

    def propose(self, seq, generated, k, sampling):
        draft = super().propose(seq, generated, k, sampling)
        self.proposals.append((len(seq) - self.start, draft.tokens))
        return draft


@pytest.mark.parametrize("which", ["tiny", "demo"])
def test_the_copy_re_aligns_after_the_change_on_real_models(engines, which):
    """The copy drafter alone: the output is the target's; it drafted much of it; and where the
    region differs from the answer, its proposals after that place agree with what the target
    wrote (it re-aligned), for every kind of edit over the prompts."""
    alone, _ = engines[which]
    target = alone.target
    settings = GenerationSettings(max_new_tokens=NEW_TOKENS)
    agreed_after = Counter()
    for text in TINY_PROMPTS if which == "tiny" else DEMO_PROMPTS:
        prompt = _ids(alone, text)
        expected = alone.generate(prompt, settings=settings).token_ids
        for name, source in sources(expected, prompt, target.vocab).items():
            drafter = RecordingCopy(source)
            result = speculative_generate(target, KVPool(target.model, 1, 1024), Drafters(copy=drafter), prompt,
                                          settings, Policy(frozen=True))
            assert result.token_ids == expected, (which, text, name)
            assert result.stats.counts("copy").accepted >= NEW_TOKENS // 4, (which, text, name)
            first_difference = common_prefix_len(source, expected)
            agreed_after[name] += sum(common_prefix_len(tokens, expected[at:]) for at, tokens in drafter.proposals
                                      if at > first_difference)
    assert all(agreed_after[name] >= 8 for name in ("changed line", "renamed", "inserted line", "deleted line")), \
        agreed_after
