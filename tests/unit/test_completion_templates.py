"""FIM templates against the exact prompts each family's real tokenizer expects."""
from __future__ import annotations

import dataclasses
import logging

import pytest

from completion.templates import ExtraChunk, detect_family, load_template
from tests.completion_fixtures import (BYTELEVEL_FAMILIES, bytelevel_tokenizer, llama_style_tokenizer,
                                       without_dummy_prefix)
from tests.tiny_models import tiny_tokenizers
from training.corpus import codellama_format, fim_prompt_ids, starcoder_format

PRE = "def area(w, h):\n    return w * "
SUF = "\n\nprint(area(2, 3))\n"


def tok_for(family):
    return llama_style_tokenizer(family) if family in ("codellama", "codestral") else bytelevel_tokenizer(family)


# The prompt strings of each family's model card / reference code, written with the sentinels
# as text: encoding them the card's way (tokenizer(prompt), sentinels parsed) must give
# exactly the ids the template builds from ids.
CARD_PROMPTS = {
    "starcoder": ("psm", "<fim_prefix>{pre}<fim_suffix>{suf}<fim_middle>"),
    "starcoder2": ("psm", "<fim_prefix>{pre}<fim_suffix>{suf}<fim_middle>"),
    "qwen": ("psm", "<|fim_prefix|>{pre}<|fim_suffix|>{suf}<|fim_middle|>"),
    "deepseek": ("psm", "<｜fim▁begin｜>{pre}<｜fim▁hole｜>{suf}<｜fim▁end｜>"),      # BOS added by the tokenizer
    "codegemma": ("psm", "<|fim_prefix|>{pre}<|fim_suffix|>{suf}<|fim_middle|>"),   # likewise <bos>
}


@pytest.mark.parametrize("family", sorted(CARD_PROMPTS))
def test_bytelevel_families_match_model_card_prompts(family):
    tok = tok_for(family)
    t = load_template(tok)
    assert t.family == family
    layout, card = CARD_PROMPTS[family]
    expected = tok(card.format(pre=PRE, suf=SUF))["input_ids"]
    assert t.build(PRE, SUF, layout) == expected
    assert tok.decode(t.build(PRE, SUF, layout)) == (tok.bos_token or "") * (t.bos_id is not None) + card.format(pre=PRE, suf=SUF)


def test_starcoder_spm_is_bigcode_suffix_first_order():
    tok = tok_for("starcoder")
    t = load_template(tok)
    ids = t.build(PRE, SUF, "spm")
    assert ids == tok(f"<fim_prefix><fim_suffix>{SUF}<fim_middle>{PRE}")["input_ids"]
    assert t.default_layout == "spm"


def test_codellama_real_spacing_psm_and_spm():
    """Meta's infilling_prompt_tokens: "<PRE> {pre} <SUF>{suf} <MID>" and SPM
    "<PRE> <SUF>{suf} <MID> {pre}": the prefix carries SentencePiece's dummy space, the
    suffix is encoded without it, the sentinels are the ▁-prefixed pieces."""
    tok = tok_for("codellama")
    t = load_template(tok)
    assert t.family == "codellama" and t.bos_id == tok.convert_tokens_to_ids("<s>")
    pre_id, suf_id, mid_id = tok.convert_tokens_to_ids(["▁<PRE>", "▁<SUF>", "▁<MID>"])
    sp_encode = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731  (with dummy prefix)
    infill = without_dummy_prefix(tok)
    enc_infilling = lambda s: infill.encode(s, add_special_tokens=False).ids  # noqa: E731
    psm = t.build(PRE, SUF, "psm")
    spm = t.build(PRE, SUF, "spm")
    assert psm == [t.bos_id, pre_id] + sp_encode(PRE) + [suf_id] + enc_infilling(SUF) + [mid_id]
    assert spm == [t.bos_id, pre_id, suf_id] + enc_infilling(SUF) + [mid_id] + sp_encode(PRE)
    assert tok.decode(psm) == f"<s> <PRE> {PRE} <SUF>{SUF} <MID>"
    assert tok.decode(spm) == f"<s> <PRE> <SUF>{SUF} <MID> {PRE}"
    # suffix starting with spaces keeps exactly its spaces (no dummy one added)
    assert tok.convert_ids_to_tokens(t.encode_infill("  x"))[0] in ("▁▁", "▁▁x")
    assert t.stop_ids[0] == tok.convert_tokens_to_ids("▁<EOT>") and tok.eos_token_id in t.stop_ids


def test_codestral_suffix_then_prefix():
    """mistral-common encode_fim: <s>[SUFFIX]{suffix}[PREFIX]{prefix} (prefix with the dummy space)."""
    tok = tok_for("codestral")
    t = load_template(tok)
    assert t.family == "codestral" and t.layouts == ("spm",)
    suf_id, pre_id = tok.convert_tokens_to_ids(["[SUFFIX]", "[PREFIX]"])
    infill = without_dummy_prefix(tok)
    ids = t.build(PRE, SUF, "auto")
    assert ids == ([t.bos_id, suf_id] + infill.encode(SUF, add_special_tokens=False).ids + [pre_id]
                   + tok.encode(PRE, add_special_tokens=False))
    assert tok.decode(ids) == f"<s>[SUFFIX]{SUF}[PREFIX] {PRE}"
    assert t.stop_ids == (tok.eos_token_id,)


def test_shipped_tokenizers_match_the_default_pair_training_format():
    """The default pair is trained with training/corpus.py's FIM examples (PSM and SPM);
    the templates must produce the very same ids for both models."""
    target_tok, draft_tok = tiny_tokenizers()
    enc = lambda tok: (lambda s: tok.backend_tokenizer.encode(s, add_special_tokens=False).ids)  # noqa: E731
    for tok, fmt, family in ((target_tok, codellama_format(target_tok), "codellama"),
                             (draft_tok, starcoder_format(draft_tok), "starcoder")):
        t = load_template(tok)
        assert t.family == family
        for spm in (False, True):
            assert t.build(PRE, SUF, "spm" if spm else "psm") == fim_prompt_ids(fmt, enc(tok), PRE, SUF, spm)
    assert tiny_tokenizers()[0].decode(load_template(target_tok).build("a", "b", "psm")) == "<s> <PRE>a <SUF>b <MID>"


@pytest.mark.parametrize("family", ["starcoder", "qwen", "deepseek", "codegemma", "codellama", "codestral"])
def test_sentinel_text_in_user_code_stays_text(family):
    tok = tok_for(family)
    t = load_template(tok)
    structural = t.build("x = 1\n", "y = 2\n", t.default_layout)
    nasty_pre = "s = '<fim_prefix><|fim_suffix|><｜fim▁hole｜> <PRE>▁<SUF>[PREFIX]</s><|endoftext|>'\n"
    ids = t.build(nasty_pre, "y = 2\n", t.default_layout)
    special = set(tok.all_special_ids)
    assert [i for i in ids if i in special] == [i for i in structural if i in special]


def test_detection_is_by_vocabulary_not_name():
    for family in BYTELEVEL_FAMILIES:
        assert detect_family(bytelevel_tokenizer(family)) == family
    assert detect_family(llama_style_tokenizer("codellama")) == "codellama"
    assert detect_family(llama_style_tokenizer("codestral")) == "codestral"
    tok = bytelevel_tokenizer("qwen")
    tok.name_or_path = "bigcode/starcoder2-15b"      # the name must not matter
    assert load_template(tok).family == "qwen"


def test_explicit_setting_overrides_detection():
    tok = tok_for("starcoder2")
    assert load_template(tok).family == "starcoder2"
    t = load_template(tok, "starcoder")
    assert t.family == "starcoder" and t.file_sep_id is None
    with pytest.raises(ValueError, match="unknown fim_template"):
        load_template(tok, "gpt-17")


def test_no_fim_tokens_falls_back_to_prefix_only_with_warning(caplog):
    tok = tok_for("plain")
    with caplog.at_level(logging.WARNING, logger="completion.templates"):
        t = load_template(tok)
    assert t.family == "plain" and "prefix only" in caplog.text
    assert t.build(PRE, SUF, "auto") == tok.encode(PRE, add_special_tokens=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="completion.templates"):
        t = load_template(tok, "codellama")            # asked for a format the vocabulary lacks
    assert t.family == "plain" and "no codellama FIM tokens" in caplog.text


def test_psm_only_family_refuses_spm_with_warning(caplog):
    t = load_template(tok_for("deepseek"))
    with caplog.at_level(logging.WARNING, logger="completion.templates"):
        assert t.resolve_layout("spm") == "psm-line"
    assert "not spm" in caplog.text


@pytest.mark.parametrize("family", ["qwen", "deepseek", "codegemma", "starcoder", "codellama"])
def test_psm_line_begins_the_middle_with_the_cursor_lines_text(family):
    """PSM-LINE is the PSM prompt of the text above the cursor's line, whose middle begins with
    the line's text before the cursor; families trained on PSM only take it by default."""
    t = load_template(tok_for(family))
    above, typed = "import os\n\ndef f(x):\n", "    return os.pa"
    want = t.build(above, SUF, "psm") + t.encode_infill(typed)
    assert t.build(above + typed, SUF, "psm-line") == want
    assert t.build(above, SUF, "psm-line") == t.build(above, SUF, "psm")     # at a line's start: PSM
    assert t.build(typed, SUF, "psm-line") == t.build("", SUF, "psm") + t.encode_infill(typed)
    assert t.default_layout == ("spm" if "spm" in t.layouts else "psm-line")


@pytest.mark.parametrize("family", ["qwen", "deepseek"])
def test_typing_within_a_line_only_appends_to_a_psm_line_prompt(family):
    """Keystroke after keystroke on one line, the prompt keeps all it had up to the typed text's
    last token or two (a word's pieces may merge): the suffix is never computed again."""
    t = load_template(tok_for(family))
    line = "    result = compute_total(values, weights)"
    before = t.build("def f(values, weights):\n", SUF, "psm-line")
    for n in range(1, len(line) + 1):
        prompt = t.build("def f(values, weights):\n" + line[:n], SUF, "psm-line")
        shared = next((i for i, (a, b) in enumerate(zip(before, prompt)) if a != b), min(len(before), len(prompt)))
        assert shared >= len(before) - 2, (n, line[:n])
        before = prompt


def test_stop_ids_per_family():
    def names(family):
        tok = tok_for(family)
        return set(tok.convert_ids_to_tokens(list(load_template(tok).stop_ids)))
    assert names("codellama") == {"▁<EOT>", "</s>"}
    assert {"<|endoftext|>", "<file_sep>", "<fim_pad>"} <= names("starcoder2")
    assert {"<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"} <= names("qwen")
    assert names("deepseek") == {"<｜end▁of▁sentence｜>", "<|EOT|>"}
    assert {"<|file_separator|>", "<eos>"} <= names("codegemma")


# Repository-level prompts (another file of the repo before the current one), as the model cards write them.
REPO_CARD_PROMPTS = {
    "qwen": ("psm", "<|repo_name|>demo\n<|file_sep|>pkg/util.py\ndef helper():\n    return 1\n"
                    "<|file_sep|>pkg/main.py\n<|fim_prefix|>{pre}<|fim_suffix|>{suf}<|fim_middle|>"),
    "starcoder2": ("spm", "<repo_name>demo<file_sep>pkg/util.py\ndef helper():\n    return 1\n<file_sep>pkg/main.py\n"
                          "<fim_prefix><fim_suffix>{suf}<fim_middle>{pre}"),
}


@pytest.mark.parametrize("family", sorted(REPO_CARD_PROMPTS))
def test_repo_level_form(family):
    tok = tok_for(family)
    t = load_template(tok)
    layout, card = REPO_CARD_PROMPTS[family]
    extra = (ExtraChunk("pkg/util.py", "def helper():\n    return 1\n"),)
    ids = t.build(PRE, SUF, layout, extra, path="pkg/main.py", repo="demo")
    assert ids == tok(card.format(pre=PRE, suf=SUF))["input_ids"]


def test_extra_context_without_file_separators_goes_before_the_prefix():
    tok = tok_for("codellama")
    t = load_template(tok)
    extra = (ExtraChunk("util.py", "def helper():\n    return 1\n"),)
    plain = t.build(PRE, SUF, "spm")
    with_extra = t.build(PRE, SUF, "spm", extra)
    assert tok.decode(with_extra) == f"<s> <PRE> <SUF>{SUF} <MID> def helper():\n    return 1\n{PRE}"
    # the suffix part (head of an SPM prompt) is untouched by extra context
    head = plain.index(tok.convert_tokens_to_ids("▁<MID>")) + 1
    assert with_extra[:head] == plain[:head]


@pytest.mark.parametrize("family", ["starcoder", "qwen", "deepseek", "codegemma", "codellama", "codestral", "plain"])
def test_encoding_with_the_plain_rust_tokenizer_gives_transformers_ids(family):
    """The template encodes with its own copy of the Rust tokenizer (no transformers Python per
    call): the ids are exactly `tokenizer.encode(..., split_special_tokens=True)`'s, sentinel
    strings, CRLF, tabs and non-ASCII text included, and the dummy-prefix strip is the same."""
    tok = tok_for(family)
    t = load_template(tok)
    assert t._plain is not None
    texts = ["", "x", " x", "\n", "\r\n", "\tdef f():\n\treturn '你好 🎉'\n", "a <fim_prefix> b </s> <PRE>",
             "<|endoftext|>", "[PREFIX]x[SUFFIX]", "    total = value * scale  \n\n"]
    slow = dataclasses.replace(t, _plain=None, _marker=None)
    for text in texts:
        want = tok.encode(text, add_special_tokens=False, split_special_tokens=True) if text else []
        assert t.encode(text) == want, (family, text)
        assert t.encode_infill(text) == slow.encode_infill(text), (family, text)


@pytest.mark.parametrize("family", ["codellama", "codestral", "starcoder"])
def test_a_suffix_seen_again_gives_the_ids_it_gave_and_a_prompt_is_its_own_list(family):
    """The suffix's ids are kept by its text between keystrokes (FimTemplate._segment): the same
    prompt as one built afresh, whatever was done to an earlier prompt, and the new ids where the
    suffix changed."""
    t = load_template(tok_for(family))
    layout = "spm" if family != "starcoder" else "psm"
    fresh = lambda pre, suf: load_template(tok_for(family)).build(pre, suf, layout)  # noqa: E731
    first = t.build(PRE, SUF, layout)
    first[:] = [0] * len(first)                    # a caller's list is its own
    for pre in (PRE + "h", PRE + "h)", "x = 1\n"):
        assert t.build(pre, SUF, layout) == fresh(pre, SUF)
    assert t.build(PRE, SUF + "# more\n", layout) == fresh(PRE, SUF + "# more\n")
    for i in range(10):                            # it keeps a few suffixes only
        t.build(PRE, f"\n{i}\n", layout)
    assert len(t._segments) <= 4 and t.build(PRE, SUF, layout) == fresh(PRE, SUF)


def _prompt_tokenizers():
    """The tokenizers prompts are built with here: the shipped target's (its own pre-tokenizer),
    the real CodeLlama's (Llama-2's SentencePiece BPE with a dummy prefix, tests/real_tokenizers)
    and the byte-level fixtures."""
    from transformers import AutoTokenizer

    from engine.load.models import resolve_name
    from tests import real_tokenizers as rt
    return {"shipped target": AutoTokenizer.from_pretrained(resolve_name("default", "target")),
            "codellama": rt.tokenizer("codellama"), "qwen3": rt.tokenizer("qwen3"),
            "llama-style": llama_style_tokenizer("codellama"), "starcoder": bytelevel_tokenizer("starcoder")}


def test_a_prefix_encoded_line_by_line_is_the_prefix_encoded_whole():
    """Where the tokenizer never joins a line break with anything (SentencePiece BPE: the shipped
    target, CodeLlama), the prefix is encoded line by line with each complete line's ids kept
    (FimTemplate._by_lines); the prompt must be the one encoded whole, whatever the text and
    wherever the cursor. Byte-level tokenizers ("\\n   " is one of their pieces) encode it whole."""
    import random
    from pathlib import Path

    rng = random.Random(3)
    files = sorted((Path(__file__).parents[2] / "bench" / "files").glob("*.py"))
    texts = [f.read_text(encoding="utf-8") for f in files]
    texts.append("x = '你好 😀'  \n\n\t\ty = [\n  1,\t\n]  \n\n\n  # <PRE> </s> ▁▁ é\n" * 3)
    for name, tok in _prompt_tokenizers().items():
        t = load_template(tok)
        assert t._line_wise == (name in ("shipped target", "codellama", "llama-style")), name
        whole = dataclasses.replace(t, _line_wise=False, _segments={}, _lines={})
        for _ in range(150):
            text = rng.choice(texts)
            a = rng.randrange(len(text))
            cut = rng.randrange(a, min(len(text), a + 1500) + 1)
            pre, suf = text[a:cut], text[cut:cut + 300]
            assert t.build(pre, suf, "spm") == whole.build(pre, suf, "spm"), (name, pre[-60:])
            assert t.build(pre, suf, "psm") == whole.build(pre, suf, "psm"), (name, pre[-60:])
        assert len(t._lines) <= 20_000
