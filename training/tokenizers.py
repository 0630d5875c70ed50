"""Tokenizer recipes shared by the default pair and the tests.

Two deliberately different vocabularies, shaped like the pair users run:

* ``train_sentencepiece_style``: CodeLlama-like. Metaspace ``▁`` for spaces, BPE with byte
  fallback (``<0xXX>`` tokens, NOT special, or decoding would drop them), runs of spaces kept
  together for indentation, CodeLlama's FIM sentinels ``▁<PRE>`` ``▁<SUF>`` ``▁<MID>``
  ``▁<EOT>``. No dummy prefix: encoding a text gives exactly its bytes back.
* ``train_bytelevel``: StarCoder-like. GPT-2 byte-level BPE (``Ġ``) with ``<|endoftext|>``,
  ``<fim_prefix>``, ``<fim_middle>``, ``<fim_suffix>``, ``<fim_pad>``.
"""
from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CODELLAMA_SPECIALS = ["<unk>", "<s>", "</s>", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"]
STARCODER_SPECIALS = ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]

# Pre-tokens on the ▁-replaced text: a run of spaces before a word stays one piece (indent),
# the word keeps its single leading ▁, newlines stand alone.
_SP_SPLIT = r"▁+(?=▁[^▁\n])|▁?[^▁\n]+|▁+|\n"


def train_sentencepiece_style(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False),
        pre_tokenizers.Split(Regex(_SP_SPLIT), behavior="isolated"),
    ])
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
    ])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=CODELLAMA_SPECIALS + BYTE_TOKENS,
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    # The byte tokens entered the vocabulary as "special" to reserve their ids; unmark them.
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] not in BYTE_TOKENS]
    spec["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(spec))
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        additional_special_tokens=CODELLAMA_SPECIALS[3:], add_bos_token=True,
        clean_up_tokenization_spaces=False,
    )


def train_bytelevel(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=STARCODER_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
        unk_token="<|endoftext|>", additional_special_tokens=STARCODER_SPECIALS[1:],
        clean_up_tokenization_spaces=False,
    )
