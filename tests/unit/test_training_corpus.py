"""The corpus builder and the FIM example builder on tiny inputs (no training)."""
from __future__ import annotations

import random

import pytest

from training import corpus as corpus_mod
from completion.templates import load_template
from training.corpus import (NearDuplicateFilter, build_corpus, choose_fim_span, codellama_fim_end,
                             codellama_format, encoder, example_ids, fim_format, split_into_chunks,
                             starcoder_format)
from training.tokenizers import train_bytelevel, train_sentencepiece_style

CODE = '''import os


class Config:
    """Settings for a run."""

    def __init__(self, path, verbose=False):
        self.path = path
        self.verbose = verbose

    def exists(self):
        return os.path.exists(self.path)


def main(argv):
    cfg = Config(argv[0])
    if cfg.exists():
        print("found", cfg.path)
    return 0
'''


def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_fim_spans_partition_the_text_and_mostly_start_at_line_or_word_boundaries():
    line_starts = word_starts = 0
    for seed in range(300):
        span = choose_fim_span(CODE, random.Random(seed))
        assert span.prefix + span.middle + span.suffix == CODE
        if span.prefix == "" or span.prefix.endswith("\n"):
            line_starts += 1
        if span.prefix == "" or not (span.prefix[-1].isalnum() and span.middle[:1].isalnum()):
            word_starts += 1
    assert line_starts > 100          # about 45% whole-line spans
    assert word_starts > 0.8 * 300    # only the 15% random cuts may split a word


def test_a_single_masked_line_is_a_middle_the_training_data_contains():
    rng = random.Random(0)
    spans = [choose_fim_span(CODE, rng) for _ in range(400)]
    lines = set(CODE.split("\n"))
    single = [s for s in spans if s.middle in lines and s.prefix.endswith("\n") and s.suffix.startswith("\n")]
    assert len(single) > 40


@pytest.fixture(scope="module")
def tokenizers():
    texts = [CODE] * 5
    return train_sentencepiece_style(texts, 400), train_bytelevel(texts, 400)


def test_codellama_psm_and_spm_layouts(tokenizers):
    tok, _ = tokenizers
    fmt, eot = codellama_format(tok), codellama_fim_end(tok)
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    layouts = set()
    for seed in range(40):
        ids = example_ids(CODE, fmt, enc, random.Random(seed))
        assert ids[0] == tok.bos_token_id
        if ids[1] != fmt.pre:
            assert ids[-1] == tok.eos_token_id and tok.decode(ids[1:-1]) == CODE
            layouts.add("plain")
            continue
        assert ids[-1] == eot
        mid = ids.index(fmt.mid)
        if ids[2] == fmt.suf:     # SPM: <s> ▁<PRE> ▁<SUF> suffix ▁<MID> prefix middle ▁<EOT>
            layouts.add("spm")
            suffix, rest = tok.decode(ids[3:mid]), tok.decode(ids[mid + 1:-1])
            assert rest + suffix == CODE
        else:                     # PSM: <s> ▁<PRE> prefix ▁<SUF> suffix ▁<MID> middle ▁<EOT>
            layouts.add("psm")
            suf = ids.index(fmt.suf)
            prefix, suffix = tok.decode(ids[2:suf]), tok.decode(ids[suf + 1:mid])
            middle = tok.decode(ids[mid + 1:-1])
            assert prefix + middle + suffix == CODE
    assert layouts == {"plain", "psm", "spm"}


def test_starcoder_layouts(tokenizers):
    _, tok = tokenizers
    fmt = starcoder_format(tok)
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    firsts = set()
    for seed in range(40):
        ids = example_ids(CODE, fmt, enc, random.Random(seed))
        assert ids[-1] == tok.convert_tokens_to_ids("<|endoftext|>")
        firsts.add(tuple(tok.convert_ids_to_tokens(ids[:2])))
        if ids[0] == fmt.pre:
            assert fmt.mid in ids and fmt.suf in ids
            text = tok.decode(ids, skip_special_tokens=True)
            assert sorted(text) == sorted(CODE)
    assert ("<fim_prefix>", "<fim_suffix>") in firsts   # SPM
    assert any(a == "<fim_prefix>" and b != "<fim_suffix>" for a, b in firsts)   # PSM


def test_formats_are_detected_from_the_vocabulary_with_the_editors_sentinel_ids(tokenizers):
    target_tok, draft_tok = tokenizers
    ids = target_tok.convert_tokens_to_ids
    assert fim_format(target_tok) == codellama_format(target_tok)
    assert codellama_format(target_tok) == corpus_mod.FimFormat(
        start=(target_tok.bos_token_id,), end=target_tok.eos_token_id, pre=ids("▁<PRE>"), suf=ids("▁<SUF>"),
        mid=ids("▁<MID>"), fim_end=ids("▁<EOT>"), fim_start=(target_tok.bos_token_id,))
    assert codellama_fim_end(target_tok) == ids("▁<EOT>")
    ids = draft_tok.convert_tokens_to_ids
    end = ids("<|endoftext|>")
    assert fim_format(draft_tok) == starcoder_format(draft_tok) == corpus_mod.FimFormat(
        start=(), end=end, pre=ids("<fim_prefix>"), suf=ids("<fim_suffix>"), mid=ids("<fim_middle>"),
        fim_end=end)
    # a training middle ends with a token the editor's template stops on
    for tok in tokenizers:
        assert fim_format(tok).fim_end in load_template(tok).stop_ids
    with pytest.raises(ValueError, match="sentinels"):
        fim_format(draft_tok, "codellama")     # the vocabulary has no CodeLlama sentinels


def test_encoder_gives_the_text_back_without_added_tokens(tokenizers):
    for tok in tokenizers:
        enc = encoder(tok)
        ids = enc(CODE)
        assert tok.decode(ids) == CODE
        assert tok.bos_token_id not in ids and enc("") == []


def test_chunks_cut_at_line_boundaries():
    chunks = split_into_chunks(CODE * 3, 200)
    assert "".join(chunks) == CODE * 3
    assert all(len(c) <= 200 for c in chunks)
    assert all(c.endswith("\n") for c in chunks)


def test_near_duplicates_are_caught_but_different_files_are_not():
    dedup = NearDuplicateFilter(seed=0)
    assert not dedup.is_duplicate(CODE)
    renamed = CODE.replace("def main(argv):", "def run(argv):").replace("# x", "")
    assert dedup.is_duplicate("# Copied from elsewhere\n" + renamed)
    other = "\n".join(f"value_{i} = compute({i}, {i * i})" for i in range(40))
    assert not dedup.is_duplicate(other)


def test_build_corpus_skips_tests_and_copies_holds_out_packages_and_is_deterministic(tmp_path, monkeypatch):
    _write(tmp_path, "alpha/core.py", CODE)
    _write(tmp_path, "alpha/copy_of_core.py", CODE.replace("Config", "Settings"))
    _write(tmp_path, "alpha/tests/test_core.py", CODE + "\nassert main(['x']) == 0\n")
    _write(tmp_path, "beta/other.py", "\n".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(30)))
    _write(tmp_path, "pygls/server.py", CODE.replace("os", "sys"))
    _write(tmp_path, "alpha/tiny.py", "x = 1\n")
    monkeypatch.setattr(corpus_mod, "source_roots", lambda: [("site", str(tmp_path))])
    a = build_corpus(seed=3, max_train_bytes=10_000_000)
    b = build_corpus(seed=3, max_train_bytes=10_000_000)
    assert a == b
    train = sorted(f.relpath for f in a.train)
    assert train in (["site/alpha/core.py", "site/beta/other.py"],
                     ["site/alpha/copy_of_core.py", "site/beta/other.py"])
    assert a.dropped_duplicates == 1
    assert [f.relpath for f in a.held_out] == ["site/pygls/server.py"]


def test_distillation_stream_counts_only_target_written_tokens(tokenizers):
    import torch
    from training.corpus_distill import draft_stream_from_samples, mixed_stream
    _, tok = tokenizers
    samples = [("psm", "def f(x):\n", "\n    return y\n", "    y = x + 1", True),
               ("l2r", "import os\n", "", "import sys\n", False)]
    ids, mask = draft_stream_from_samples(samples, tok)
    assert len(ids) == len(mask)
    learned = [t for t, m in zip(ids, mask) if m]
    end = tok.convert_tokens_to_ids("<|endoftext|>")
    # the stopped FIM middle keeps its end token; the cut-off continuation gets none
    assert tok.decode(learned) == "    y = x + 1<|endoftext|>import sys\n"
    assert learned.count(end) == 1
    stream, loss_mask = mixed_stream((ids, mask), torch.arange(1000, dtype=torch.int32), seed=0)
    assert len(stream) == len(loss_mask)
    assert int(loss_mask.sum()) == sum(mask) * 4   # 25% of the counted tokens are distilled
