"""A tokenizer folder's load kept in specfill's cache (engine/load/vocab_cache.py): the tokenizer and
the vocabulary read back from it are exactly those built from tokenizer.json, on every real
tokenizer the tests have; a stale or damaged file is rebuilt with one log line."""
import logging
import os
import shutil

import pytest

from engine.load import vocab_cache
from engine.load.models import DEFAULT_PAIR_DIR
from engine.load.tokenizer import FastTokenizer
from engine.load.vocab_tables import build_vocab
from tests.real_tokenizers import MissingTokenizer, tokenizer_files

TEXTS = ["def f(x):\n    return x  # é 😀\n\n\tpass", " ", "\n\n", "  leading", "<s> </s> <PRE> ▁<MID>",
         "<|fim_prefix|>x<|fim_suffix|>y<|fim_middle|>", "<|endoftext|>tail", "naïve café 你好 \u0301", "\r\n\r\n"]


def _folders():
    folders = {"shipped target": str(DEFAULT_PAIR_DIR / "target")}
    for name in ("llama2", "qwen3"):
        try:
            folders[name] = str(tokenizer_files(name))
        except MissingTokenizer:
            pass
    return folders


def _load(folder):
    tokenizer = FastTokenizer.from_dir(folder)
    read = tokenizer.kept is not None and tokenizer.kept.tables is not None
    return tokenizer, build_vocab(tokenizer), read


def _same(a, b):
    (ta, va), (tb, vb) = a, b
    assert ta.backend_tokenizer.to_str() == tb.backend_tokenizer.to_str()
    assert ta.get_vocab() == tb.get_vocab() and ta.all_special_ids == tb.all_special_ids
    assert (ta.bos_token_id, ta.eos_token_id) == (tb.bos_token_id, tb.eos_token_id)
    assert ta.added_tokens_decoder == tb.added_tokens_decoder
    for field in ("token_bytes", "special_ids", "bytes_to_id", "byte_pieces", "byte_ids", "max_token_len",
                  "dummy_prefix"):
        assert getattr(va, field) == getattr(vb, field), field
    for text in TEXTS:
        assert va.encode_text(text) == vb.encode_text(text), text
        assert ta.encode(text) == tb.encode(text), text


@pytest.mark.parametrize("name", sorted(_folders()))
def test_a_kept_load_is_the_tokenizer_and_vocabulary_built_from_its_files(name, tmp_path, monkeypatch):
    folder = _folders()[name]
    monkeypatch.setenv("SPECFILL_VOCAB_CACHE", "off")
    tokenizer, vocab, read = _load(folder)
    assert not read and tokenizer.kept is None
    monkeypatch.setenv("SPECFILL_VOCAB_CACHE", str(tmp_path))
    *first, read_first = _load(folder)     # builds, and keeps
    *second, read_second = _load(folder)   # reads what was kept
    assert not read_first and read_second
    assert len(list(tmp_path.glob("*.vocab"))) == 1
    _same((tokenizer, vocab), first)
    _same((tokenizer, vocab), second)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A copy of the shipped target's tokenizer, and an empty cache folder."""
    copy = tmp_path / "tokenizer"
    copy.mkdir()
    for name in vocab_cache.TOKENIZER_FILES:
        shutil.copy(DEFAULT_PAIR_DIR / "target" / name, copy / name)
    monkeypatch.setenv("SPECFILL_VOCAB_CACHE", str(tmp_path / "cache"))
    return str(copy)


def _kept_file(folder):
    return vocab_cache.cache_path(folder)


def test_changed_tokenizer_files_are_read_again_with_one_line(folder, caplog):
    reference = _load(folder)[:2]
    assert _load(folder)[2]
    config = os.path.join(folder, "tokenizer_config.json")
    st = os.stat(config)
    os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with caplog.at_level(logging.INFO, logger="specfill.engine"):
        *again, read = _load(folder)
    assert not read
    lines = [r for r in caplog.records if "tokenizer cache" in r.getMessage() or "building it again" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO, caplog.text
    _same(reference, again)
    assert _load(folder)[2]    # kept again under the new key


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "garbage"])
def test_a_damaged_file_is_rebuilt_with_one_warning(folder, caplog, damage):
    reference = _load(folder)[:2]
    where = _kept_file(folder)
    data = bytearray(where.read_bytes())
    if damage == "flip a byte":     # in a piece's bytes: still a file marshal reads
        at = data.rindex(b"return")
        data[at] = ord("R")
    elif damage == "truncate":
        data = data[:len(data) // 2]
    else:
        data = bytearray(b"\x00\xff not a header\n" + bytes(data[:50]))
    where.write_bytes(bytes(data))
    with caplog.at_level(logging.INFO, logger="specfill.engine"):
        *again, read = _load(folder)
    assert not read
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "unusable" in warnings[0].getMessage(), caplog.text
    _same(reference, again)
    assert _load(folder)[2]    # written again


def test_merges_whose_pieces_hold_a_space_stay_pairs():
    """The "a b" form of a merge cannot say where its two pieces part when one holds a space: a
    tokenizer with such a merge keeps the pair form, and parses to the same tokenizer."""
    from tokenizers import Tokenizer
    from tokenizers.models import BPE

    def fast(merges, vocab):
        original = Tokenizer(BPE(vocab=vocab, merges=merges))
        text = vocab_cache.fast_form(original.to_str())
        again = Tokenizer.from_str(text)
        assert again.to_str() == original.to_str()
        assert again.encode("a bab").ids == original.encode("a bab").ids
        return text

    vocab = {"a": 0, " ": 1, "b": 2, "a ": 3, "a b": 4, "ab": 5}
    assert '"merges":[["a"," "],["a ","b"]' in fast([("a", " "), ("a ", "b"), ("a", "b")], vocab)
    assert '"merges":["a b"]' in fast([("a", "b")], {"a": 0, "b": 1, "ab": 2})
