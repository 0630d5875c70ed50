"""Small real tokenizers carrying each code-model family's real special tokens, for the
completion tests (nothing can be downloaded here, so we train tiny BPEs with the same
sentinels, BOS/EOS conventions and, for Llama/Mistral, the SentencePiece dummy prefix)."""
from __future__ import annotations

import functools
import inspect
import textwrap

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


def corpus() -> list[str]:
    return [inspect.getsource(textwrap)] * 2


# family -> (special tokens in vocab order, bos, eos)
BYTELEVEL_FAMILIES = {
    "starcoder": (["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
                   "<filename>", "<gh_stars>"], None, "<|endoftext|>"),
    "starcoder2": (["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
                    "<repo_name>", "<file_sep>"], None, "<|endoftext|>"),
    "deepseek": (["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>",
                  "<｜fim▁end｜>", "<|EOT|>"], "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "qwen": (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>",
              "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"], None, "<|endoftext|>"),
    "codegemma": (["<pad>", "<eos>", "<bos>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                   "<|file_separator|>", "<start_of_turn>", "<end_of_turn>"], "<bos>", "<eos>"),
    "plain": (["<|endoftext|>"], None, "<|endoftext|>"),
}


@functools.lru_cache(maxsize=None)
def bytelevel_tokenizer(family: str) -> PreTrainedTokenizerFast:
    specials, bos, eos = BYTELEVEL_FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    kw = {"bos_token": bos} if bos else {}
    if family == "deepseek" or family == "codegemma":
        # Their tokenizers add BOS to every encode (model cards rely on it).
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos,
                                   additional_special_tokens=[s for s in specials if s not in (bos, eos)],
                                   clean_up_tokenization_spaces=False, **kw)


LLAMA_STYLE = {
    # CodeLlama: <s> </s>, FIM pieces are ▁-prefixed user-defined symbols in the sp model.
    "codellama": ["<unk>", "<s>", "</s>", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"],
    # Codestral (Mistral tokenizer v3): control tokens [INST]... [PREFIX] [MIDDLE] [SUFFIX].
    "codestral": ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]"],
}


@functools.lru_cache(maxsize=None)
def llama_style_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """SentencePiece-like with the dummy prefix (every text starts with '▁'), as the real
    CodeLlama and Mistral tokenizers: this is where the space after <PRE> comes from."""
    specials = LLAMA_STYLE[family]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Split("\n", behavior="isolated")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=500, special_tokens=specials + BYTE_TOKENS, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", additional_special_tokens=specials[3:],
                                   clean_up_tokenization_spaces=False)


def without_dummy_prefix(tok: PreTrainedTokenizerFast) -> Tokenizer:
    """An independent encoder of text with no dummy '▁' in front (SentencePiece's
    encode_infilling), to check the templates' own way of getting it."""
    import json
    spec = json.loads(tok.backend_tokenizer.to_str())
    spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    spec["post_processor"] = None
    return Tokenizer.from_str(json.dumps(spec))
