"""Different-tokenizer drafting on REAL tokenizers (Llama-2 + CodeLlama's FIM tokens, Qwen3),
fetched with npm and cached (tests/real_tokenizers.py), with tiny random models on them.

- Text <-> ids: the byte tables and continuation encoding write exactly the bytes asked for,
  tokenized as the tokenizer would in context (dummy-prefix space, byte fallback, byte-level
  pieces, half characters).
- Greedy identity: a draft on the other family's tokenizer never changes the target's output,
  in both directions, on code and hard text (emoji, CJK, CRLF, tabs, trailing spaces) and FIM.
- Self-draft: the target as its own draft with its ids permuted goes through the text path
  and must keep nearly all of its agreement (bench/self_draft.py is the same construction).
"""
from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest

from bench import self_draft
from completion.templates import load_template
from engine import LocalEngine, EngineConfig, GenerationSettings
from engine.load.vocab_tables import build_vocab
from tests import real_tokenizers as rt

HARD_TEXTS = (
    "def greet(name):\n    return f\"你好, {name} 🎉\"\n",
    "x = 1\r\ny = 2\r\nif x:\r\n    ",
    "\tindent = True  \n\t",
    "label = \"数据 ✅ résumé 😀\"  # 注释",
    "def parse_pairs(line):\n    \"\"\"Split key=value pairs.\"\"\"\n    result = {}\n    for part in line.spl",
    "class Stack:\n    def push(self, item):\n        self.items.append(item)\n\n    def ",
)
FIM = [("def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"), ("rows = [\n    ", "\n]\n")]


@pytest.fixture(scope="module", autouse=True)
def real_files():
    try:
        for name in rt.PACKAGES:
            rt.tokenizer_files(name)
    except rt.MissingTokenizer as e:
        pytest.fail(str(e))


@pytest.mark.parametrize("name", ["codellama", "qwen3"])
def test_continuation_writes_the_bytes_as_the_tokenizer_would(name):
    tok = rt.tokenizer(name)
    vocab = build_vocab(tok)
    assert vocab.dummy_prefix == (name == "codellama")
    for text in HARD_TEXTS:
        data = text.encode("utf-8")
        whole = vocab.encode_text(text)
        for cut in range(1, len(data)):
            context = vocab.continuation_ids([], data[:cut])
            assert vocab.bytes_of(context) == data[:cut], (name, text, cut)   # half characters too
            ids = vocab.continuation_ids(context, data[cut:])
            assert vocab.bytes_of(ids) == data[cut:], (name, text, cut)
        # Cut at a token boundary of the whole text's own tokenization: the continuation is
        # exactly the tokenizer's (no dummy space, no different merges).
        extra = len(vocab.bytes_of(whole)) - len(data)    # the dummy-prefix space, if any
        for i in range(1, len(whole)):
            pos = len(vocab.bytes_of(whole[:i])) - extra
            if pos > 0:
                assert vocab.continuation_ids(whole[:i], data[pos:]) == whole[i:], (name, text, i)


def test_byte_fallback_and_half_characters():
    vocab = build_vocab(rt.tokenizer("codellama"))
    emoji = "🫠".encode("utf-8")             # not a Llama-2 piece: four byte-fallback tokens
    assert emoji not in vocab.bytes_to_id
    context = vocab.encode_text("x = ")
    ids = vocab.continuation_ids(context, emoji[:2])          # half a character
    assert [vocab.token_bytes[i] for i in ids] == [emoji[:1], emoji[1:2]]
    rest = vocab.continuation_ids(context + ids, emoji[2:] + b" ok")
    assert rest == vocab.encode_text("x = \U0001fae0 ok")[len(context) + 2:]
    junk = b"\xff\xfe x"                     # invalid UTF-8 a model emitted: byte pieces, then text
    assert vocab.bytes_of(vocab.continuation_ids([], junk)) == junk


PROMPTS = [(text, None) for text in HARD_TEXTS] + FIM   # (prefix, suffix or None: left to right)


@functools.lru_cache(maxsize=None)
def _engine(target: str, draft: str) -> LocalEngine:
    """Tiny random models on the real tokenizers ("default": the shipped pair's models)."""
    def model(name: str, seed: int) -> str:
        return name if name in ("none", "default") else rt.model_dir(name, seed)
    return LocalEngine(EngineConfig(target=model(target, 0), draft=model(draft, 1), device="cpu", threads=1, lookup=False))


@pytest.mark.parametrize("target,draft", [("codellama", "qwen3"), ("qwen3", "codellama")])
@pytest.mark.parametrize("k", [3, "auto"])
def test_greedy_identity_across_real_tokenizers(target, draft, k):
    alone, pair = _engine(target, "none"), _engine(target, draft)
    assert pair.drafters.model.kind == "text"
    t_tpl = load_template(alone.target.tokenizer)
    d_tpl = load_template(pair.draft.tokenizer)
    settings = GenerationSettings(max_new_tokens=24, draft_length=k)
    drafted = 0
    for prefix, suffix in PROMPTS:
        ids = self_draft.target_ids(t_tpl, prefix, suffix)
        want = alone.generate(ids, settings=GenerationSettings(max_new_tokens=24, draft_length=0),
                              stop_ids=t_tpl.stop_ids)
        got = pair.generate(ids, self_draft.target_ids(d_tpl, prefix, suffix), settings=settings, stop_ids=t_tpl.stop_ids)
        assert got.token_ids == want.token_ids, (target, draft, prefix)
        assert got.text == want.text
        drafted += got.stats.drafted
    assert drafted > 0   # the draft model was really asked


@functools.lru_cache(maxsize=None)
def _self_draft(name: str):
    """(target alone, target + its permuted copy as a different-tokenizer draft, perm)."""
    work = Path(tempfile.mkdtemp(prefix=f"specfill-self-{name}-"))
    perm = self_draft.permuted_copy(rt.model_dir(name), work / "draft", seed=3)
    alone = LocalEngine(EngineConfig(target=rt.model_dir(name), draft="none", device="cpu", threads=1))
    pair = LocalEngine(EngineConfig(target=rt.model_dir(name), draft=str(work / "draft"), device="cpu",
                               threads=1, lookup=False))
    return alone, pair, perm


# Measured on these deterministic constructions (k=4): 1.00 acceptance and 5.00 tokens per
# round at every ending, on both real tokenizers and the shipped target (before the exact
# alignment: 0.50 and 2.58 in trailing indentation, 1.67 tokens per round after emoji/CJK).
# The floors are the goal (>= 0.95, >= 0.9 x (k + 1)).
ACCEPTANCE_FLOOR = 0.95
TOKENS_PER_ROUND_FLOOR = 0.9 * 5


@pytest.mark.parametrize("name", ["codellama", "qwen3"])
def test_self_draft_on_real_tokenizers_keeps_its_agreement(name):
    alone, pair, perm = _self_draft(name)
    assert pair.drafters.model.kind == "text"
    cases = {"hard-text": [(t, None) for t in HARD_TEXTS], "fim": list(FIM)}
    figures = self_draft.measure(alone, pair, perm, cases, 4, max_new_tokens=30)
    for ending, fig in figures.items():
        assert fig.same == fig.prompts, (name, ending)
        assert fig.acceptance >= ACCEPTANCE_FLOOR, (name, ending, fig)
        assert fig.tokens_per_round >= TOKENS_PER_ROUND_FLOOR, (name, ending, fig)


def test_self_draft_of_the_shipped_target_on_every_prompt_ending():
    with tempfile.TemporaryDirectory(prefix="specfill-self-default-") as tmp:
        alone, pair, perm = self_draft.engines("default", Path(tmp))
        figures = self_draft.measure(alone, pair, perm, self_draft.prompt_texts(2), 4, max_new_tokens=40)
    assert set(figures) == set(self_draft.ENDINGS)
    for ending, fig in figures.items():
        assert fig.same == fig.prompts, ending
        assert fig.acceptance >= ACCEPTANCE_FLOOR, (ending, fig)
        assert fig.tokens_per_round >= TOKENS_PER_ROUND_FLOOR, (ending, fig)


def _alignment_per_target_token(target: str, draft: str, prefix: str, text: str):
    """The other-tokenizer drafter's alignment as the target writes `text` after `prefix` one of
    its own tokens per round (none of the draft's accepted): for each target token, (its bytes,
    the bytes the draft holds back to re-draft, the last token of the draft's context)."""
    pair = _engine(target, draft)
    drafter = pair.drafters.model
    assert drafter.kind == "text"
    t_ids = self_draft.target_ids(load_template(pair.target.tokenizer), prefix, None)
    drafter.begin(t_ids, self_draft.target_ids(load_template(pair.draft.tokenizer), prefix, None))
    seq, steps = list(t_ids), []
    for tid in drafter.tv.continuation_ids(t_ids, text.encode("utf-8")):
        seq.append(tid)
        held = drafter._sync(drafter.held + drafter.tv.bytes_of(seq[len(t_ids):]), seq)
        last = (drafter.prompt + drafter.cont)[-1]
        steps.append((drafter.tv.token_bytes[tid], held, drafter.dv.token_bytes[last]))
    return steps


def test_healing_follows_the_drafts_own_split_not_the_targets_last_token():
    # CodeLlama writes " Ledger" as " Led" + "ger" and ":\n" as ":" + "\n"; Qwen3 writes each as
    # one token. Comparing only the last tokens ("ger" and "ger") left the draft after " Led" +
    # "ger", a split its tokenizer never makes; it now re-drafts its own " Ledger".
    steps = _alignment_per_target_token("codellama", "qwen3", "import os\n\n\nclass", " Ledger:\n    def add(self):\n")
    assert steps[:4] == [(b" Led", b"", b" Led"), (b"ger", b" Ledger", b"class"),
                         (b":", b"", b":"), (b"\n", b":\n", b" Ledger")], steps
    assert steps[4:6] == [(b"   ", b"", b"   "), (b" def", b"", b" def")], steps   # its own split: kept
    assert steps[-1] == (b"\n", b"):\n", b"(self"), steps
    # Qwen3 writes "):\n" as one token, Llama-2 as "):" + "\n", the only way it can. The last tokens
    # differ, yet that is the draft's own split: re-drafting "\n" would only cost a step.
    steps = _alignment_per_target_token("qwen3", "codellama", "import os\n\n\n", "def f(x):\n    return x\n")
    assert [held for _, held, _ in steps] == [b""] * len(steps), steps
    assert (b"(x", b"", b"x") in steps and (b"):\n", b"", b"\n") in steps, steps


CODE = ("class Ledger:\n    def add(self, amount):\n        if amount < 0:\n            raise ValueError(amount)\n"
        "        self.total += amount\n\n    def report(self):\n        return self.total\n")


@pytest.mark.parametrize("target,draft", [("codellama", "qwen3"), ("qwen3", "codellama"), ("default", "default")])
def test_the_drafts_context_never_ends_where_its_tokenizer_would_merge_across(target, draft):
    # CodeLlama and the shipped target write "\n" alone, then the indentation; Qwen3 and the
    # shipped draft write "\n" + indentation as one token. A draft left after a bare "\n" has never
    # seen that split, and it drafted unindented code there (the shipped draft's first round at
    # the end of a line was accepted 0.29 of the time, 0.57 once the "\n" was re-drafted). The
    # shared text after each of the target's tokens must leave the draft either on a token its
    # tokenizer could not extend or holding such a token back to re-draft.
    steps = _alignment_per_target_token(target, draft, "import os\n\n\n", CODE)
    pair = _engine(target, draft)
    drafter = pair.drafters.model
    open_bytes = {drafter.dv.token_bytes[i] for i in drafter._open_ids}
    if (target, draft) == ("qwen3", "codellama"):
        assert not open_bytes      # Qwen3 merges every whitespace run CodeLlama does: nothing to hold
    else:
        assert b"\n" in open_bytes
        assert any(held.endswith(b"\n") for _, held, _ in steps), steps   # after ":\n", before the indentation
    assert all(last not in open_bytes for _, _, last in steps), steps
