"""engine/load/tokenizer.py answers as transformers' own tokenizer does, on every real tokenizer the
tests have (the shipped pair's, Llama-2's with CodeLlama's FIM tokens, Qwen's) and on a
byte-level one: the vocabulary, the special tokens, ids with special-token text kept as text
(how the engine encodes every text), ids with and without special tokens of texts that hold no
added token, decoding and pieces."""
import random

import pytest
from transformers import AutoTokenizer

from engine.load.models import DEFAULT_PAIR_DIR
from engine.load.tokenizer import FastTokenizer
from tests.real_tokenizers import MissingTokenizer, tokenizer as real_tokenizer
from tests.tiny_models import tiny_pair_dirs

TEXTS = ["def f(x):\n    return x  # é 😀\n\n\tpass", "", " ", "\n\n", "a", "  leading", "<s> </s> <PRE> ▁<MID>",
         "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<fim_prefix>q<fim_middle>", "<|endoftext|>tail",
         "naïve café 你好 \u0301 \ufeff", "\r\n\r\n", "x" * 300]


def _dirs(tmp_path_factory):
    dirs = {"shipped target": str(DEFAULT_PAIR_DIR / "target"), "shipped draft": str(DEFAULT_PAIR_DIR / "draft"),
            "byte-level test draft": tiny_pair_dirs()[1]}
    for name in ("codellama", "qwen3"):
        try:
            out = tmp_path_factory.mktemp(name)
            real_tokenizer(name).save_pretrained(out)
            dirs[name] = str(out)
        except MissingTokenizer:
            pass
    return dirs


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    return {name: (FastTokenizer.from_dir(d), AutoTokenizer.from_pretrained(d)) for name, d in _dirs(tmp_path_factory).items()}


def test_every_real_tokenizer_was_compared(pairs):
    assert {"shipped target", "shipped draft", "codellama", "qwen3"} <= set(pairs)


def test_vocabulary_and_special_tokens_are_transformers(pairs):
    for name, (ours, theirs) in pairs.items():
        assert ours.get_vocab() == theirs.get_vocab(), name
        assert len(ours) == len(theirs), name
        assert (ours.bos_token_id, ours.eos_token_id) == (theirs.bos_token_id, theirs.eos_token_id), name
        assert set(ours.all_special_ids) == set(theirs.all_special_ids), name
        assert {i: (t.content, t.special) for i, t in ours.added_tokens_decoder.items()} == \
            {i: (t.content, t.special) for i, t in theirs.added_tokens_decoder.items()}, name


def test_ids_text_and_pieces_are_transformers(pairs):
    rng = random.Random(0)
    corpus = "".join(TEXTS) + open(__file__, encoding="utf-8").read()
    texts = TEXTS + [corpus[(i := rng.randrange(len(corpus))):i + rng.randrange(1, 200)] for _ in range(200)]
    for name, (ours, theirs) in pairs.items():
        added = [t.content for t in ours.added_tokens_decoder.values()]
        loose = [t.content for t in ours.added_tokens_decoder.values() if not t.special]
        for text in texts:
            for special in (True, False) if not any(a in text for a in added) else ():
                assert ours.encode(text, add_special_tokens=special) == theirs.encode(text, add_special_tokens=special), \
                    (name, text, special)
            split = ours.encode(text, add_special_tokens=False, split_special_tokens=True)
            if not any(a in text for a in loose):   # (transformers still matches those: see below)
                assert split == theirs.encode(text, add_special_tokens=False, split_special_tokens=True), (name, text)
            assert ours.decode(split) == theirs.decode(split), (name, text)
            assert ours.convert_ids_to_tokens(split) == theirs.convert_ids_to_tokens(split), (name, text)


def test_a_document_that_spells_a_sentinel_keeps_it_as_text(pairs):
    """Qwen adds its FIM sentinels as tokens that are not special, which transformers'
    split_special_tokens still matches in text: the engine's encoding (FastTokenizer's and
    vocab_tables.plain_tokenizer's) keeps them text, so a file that spells `<|fim_middle|>` cannot put
    the real sentinel into a prompt; asked for special tokens, it still reads them as tokens."""
    from engine.load.vocab_tables import plain_tokenizer
    from engine.vocab import encode_plain_batch

    ours, theirs = pairs["qwen3"]
    loose = {i: t.content for i, t in ours.added_tokens_decoder.items() if not t.special}
    assert "<|fim_prefix|>" in loose.values() and "<|file_sep|>" in loose.values()
    text = "x = '" + "' + '".join(loose.values()) + "'\n"
    for encoder in (ours, plain_tokenizer(theirs)):
        ids = ours.encode(text, add_special_tokens=False, split_special_tokens=True) if encoder is ours \
            else encode_plain_batch(encoder, [text])[0]
        assert not set(ids) & set(loose), ids
        assert ours.decode(ids) == text
    assert set(loose) <= set(ours.encode(text, add_special_tokens=False))
    assert ours.all_special_ids == sorted(theirs.all_special_ids)
