"""The shipped default pair (engine/default_pair): loads offline, has the promised tokenizers and
sizes, and through the engine gives target-identical greedy output and real FIM completions on
code it never saw (pygls and huggingface_hub are held out of its training corpus)."""
from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest
import torch

PAIR = Path(__file__).resolve().parents[2] / "engine" / "default_pair"
MAX_SHIPPED_BYTES = 40 * 1024 * 1024


@pytest.fixture(scope="module")
def offline():
    old = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    yield
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def pair(offline):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    loaded = {}
    for role in ("target", "draft"):
        tok = AutoTokenizer.from_pretrained(PAIR / role, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(PAIR / role, local_files_only=True,
                                                     dtype=torch.float32).eval()
        loaded[role] = (tok, model)
    return loaded


def held_out_snippets() -> list[str]:
    """Source of held-out packages, cut at a line end in the middle of a function body."""
    import huggingface_hub.utils._paths as hf_paths
    import pygls.workspace.text_document as text_document
    import pygls.uris as uris
    out = []
    for module in (uris, text_document, hf_paths):
        lines = inspect.getsource(module).splitlines(keepends=True)
        body = [i for i, line in enumerate(lines) if line.startswith("        ") and i > 20]
        cut = body[len(body) // 3]
        out.append("".join(lines[max(0, cut - 40):cut]))
    return out


def test_pair_loads_offline_with_the_promised_architectures(pair):
    target_tok, target = pair["target"]
    draft_tok, draft = pair["draft"]
    assert target.config.model_type == "llama"
    assert draft.config.model_type == "gpt_bigcode" and draft.config.multi_query
    assert target.get_input_embeddings().num_embeddings >= len(target_tok)
    assert draft.get_input_embeddings().num_embeddings >= len(draft_tok)


def test_tokenizers_have_the_fim_sentinels_and_differ(pair):
    target_tok, draft_tok = pair["target"][0], pair["draft"][0]
    tv, dv = target_tok.get_vocab(), draft_tok.get_vocab()
    for s in ("▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>", "<s>", "</s>", "<0xE4>"):
        assert s in tv, s
    for s in ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<|endoftext|>"):
        assert s in dv, s
    assert tv != dv and len(tv) != len(dv)
    text = "def f(x):\n        return x  # naïve 中文\n"
    assert target_tok.decode(target_tok(text, add_special_tokens=False).input_ids) == text
    assert draft_tok.decode(draft_tok(text).input_ids) == text
    assert target_tok.convert_ids_to_tokens(target_tok(text).input_ids)[0] == "<s>"


def test_sizes(pair):
    n_target = sum(p.numel() for p in pair["target"][1].parameters())
    n_draft = sum(p.numel() for p in pair["draft"][1].parameters())
    assert n_target / n_draft >= 8
    shipped = sum(f.stat().st_size for f in PAIR.rglob("*") if f.is_file())
    assert shipped <= MAX_SHIPPED_BYTES


@pytest.fixture(scope="module")
def engines(offline):
    from engine import LocalEngine, EngineConfig
    return (LocalEngine(EngineConfig(target="default", draft="default", device="cpu")),
            LocalEngine(EngineConfig(target="default", draft="none", device="cpu")))


def test_speculative_greedy_equals_target_alone_on_held_out_code(engines):
    from engine import GenerationSettings
    spec, alone = engines
    ttok, dtok = spec.target.tokenizer, spec.draft.tokenizer
    stop = (ttok.eos_token_id,)
    drafted = accepted = 0
    for snippet in held_out_snippets():
        snippet = snippet[-1200:]  # well inside the target's 512-token context
        target_ids = ttok.encode(snippet)
        draft_ids = dtok.encode(snippet)
        settings = GenerationSettings(max_new_tokens=40)
        a = spec.generate(target_ids, draft_ids, settings=settings, stop_ids=stop)
        b = alone.generate(target_ids, settings=settings, stop_ids=stop)
        assert a.token_ids == b.token_ids
        assert a.text == b.text and a.text
        drafted += a.stats.drafted
        accepted += a.stats.accepted
    assert drafted > 0 and accepted > 0   # the draft really proposed and was sometimes right


def test_fim_request_on_held_out_snippet_returns_code(engines):
    from engine import GenerationSettings
    from training.corpus import codellama_fim_end, codellama_format, fim_prompt_ids, starcoder_format
    spec, _ = engines
    ttok, dtok = spec.target.tokenizer, spec.draft.tokenizer
    snippet = held_out_snippets()[1]
    lines = snippet.splitlines(keepends=True)
    k = max(i for i, line in enumerate(lines) if line.strip())
    prefix, suffix = "".join(lines[:k]), "".join(lines[k:])
    enc_t = lambda s: ttok.encode(s, add_special_tokens=False)  # noqa: E731
    enc_d = lambda s: dtok.encode(s, add_special_tokens=False)  # noqa: E731
    target_ids = fim_prompt_ids(codellama_format(ttok), enc_t, prefix, suffix, spm=False)
    draft_ids = fim_prompt_ids(starcoder_format(dtok), enc_d, prefix, suffix, spm=False)
    stop = (codellama_fim_end(ttok), ttok.eos_token_id)
    result = spec.generate(target_ids, draft_ids, settings=GenerationSettings(max_new_tokens=32),
                           stop_ids=stop)
    assert result.text.strip()
    assert "<PRE>" not in result.text and "<SUF>" not in result.text


def test_an_empty_draft_prompt_drafts_from_the_shared_text_and_changes_nothing(engines):
    """A draft prompt with no tokens (the draft tokenizer writes nothing for the prompt, or a
    caller passes []) gives the draft model nothing to run its first forward on: the draft
    waits until the generated text gives it something to condition on. Prompt lookup
    is off here: with the shipped datastore it has a proposal of 4 tokens nearly every round,
    which a fixed draft length of 4 takes instead of the model's."""
    from engine import LocalEngine, EngineConfig, GenerationSettings
    _, alone = engines
    spec = LocalEngine(EngineConfig(target="default", draft="default", lookup=False, device="cpu"))
    ttok = spec.target.tokenizer
    target_ids = ttok("def add(a, b):\n    return").input_ids
    settings = GenerationSettings(max_new_tokens=24, draft_length=4)
    a = spec.generate(target_ids, [], settings=settings, stop_ids=(ttok.eos_token_id,))
    b = alone.generate(target_ids, settings=settings, stop_ids=(ttok.eos_token_id,))
    assert a.token_ids == b.token_ids and a.text
    assert a.stats.draft_calls > 0    # the draft joined in once the shared text had tokens


def test_the_shipped_draft_reaches_its_model_cards_acceptance_at_held_out_editor_positions(offline):
    # The distillation report's positions (cursor at the end of 24 code lines and on 24 fresh
    # indented lines of bench/files, never trained on), k = 4, prompt lookup off: the figures the
    # model card gives. Measured 0.615 acceptance and 3.22 tokens per target call (0.561 / 2.97
    # before the draft re-drafted a bare "\n" with the indentation that follows it); the floor
    # leaves room for another CPU's kernels turning an argmax or two (each moves a position's text).
    from training.distill import eval_positions
    from training.distill_eval import EvalSettings, measure
    from training.editor_positions import read_sources

    positions = eval_positions(read_sources([str(PAIR.parents[1] / "bench" / "files")]), 24)
    result = measure("default", {"shipped": "default"}, positions, EvalSettings(device="cpu", threads=1),
                     log=lambda _: None)
    tally = result.by_kind["shipped"]["all"]
    assert tally.positions == 48
    assert tally.acceptance >= 0.59 and tally.tokens_per_call >= 3.0, tally
