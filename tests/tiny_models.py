"""Tiny real models for tests: a Llama target with a SentencePiece-style tokenizer and a
GPTBigCode (multi-query) draft with a byte-level tokenizer, both trained for a few seconds
on a little code so they agree often (real acceptance) and choose decisively.
`tiny_model(kind, vocab)` gives random models of each cache layout the engine supports.
Everything is built once per process into a temp directory.
"""
from __future__ import annotations

import functools
import inspect
import json
import tempfile
from pathlib import Path

import torch
from transformers import (GPT2Config, GPT2LMHeadModel, GPTBigCodeConfig, GPTBigCodeForCausalLM,
                          LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from training.tokenizers import train_bytelevel, train_sentencepiece_style


def code_corpus() -> list[str]:
    import argparse, dataclasses, textwrap  # noqa: E401  (their sources are the corpus)
    return [inspect.getsource(m) for m in (json.decoder, textwrap, dataclasses, argparse)]


def init_sharp(model: torch.nn.Module, seed: int, scale: float) -> torch.nn.Module:
    """Random weights with decisive greedy choices (no near-ties between the top tokens)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model.eval()


def llama_config(vocab_size: int, **kw) -> LlamaConfig:
    base = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    base.update(kw)
    return LlamaConfig(**base)


def bigcode_config(vocab_size: int, **kw) -> GPTBigCodeConfig:
    base = dict(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=2, n_positions=2048,
                multi_query=True, bos_token_id=0, eos_token_id=0)
    base.update(kw)
    return GPTBigCodeConfig(**base)


def _train(model: torch.nn.Module, tokenizer, steps: int, seed: int) -> torch.nn.Module:
    """A few hundred steps of next-token training on the corpus, so that target and draft
    share habits (real acceptance) and make decisive greedy choices."""
    torch.manual_seed(seed)
    ids = torch.tensor(tokenizer.encode("\n".join(code_corpus()), add_special_tokens=False))
    return train_on_ids(model, ids, steps, seed)


def train_on_ids(model: torch.nn.Module, ids: torch.Tensor, steps: int, seed: int,
                 window: int = 64, batch: int = 16) -> torch.nn.Module:
    """`steps` AdamW steps of next-token training on random windows of `ids` (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - window - 1, (batch,), generator=gen)
        rows = torch.stack([ids[s:s + window + 1] for s in starts.tolist()])
        loss = model(input_ids=rows[:, :-1], labels=rows[:, :-1].clone()).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@functools.lru_cache(maxsize=None)
def tiny_tokenizers():
    texts = code_corpus()
    return train_sentencepiece_style(texts, 700), train_bytelevel(texts, 600)


@functools.lru_cache(maxsize=None)
def tiny_pair_dirs() -> tuple[str, str]:
    """(target_dir, draft_dir): saved tiny Llama + tiny GPTBigCode, loadable with Auto classes."""
    root = Path(tempfile.mkdtemp(prefix="specfill-tiny-"))
    tt, dt = tiny_tokenizers()
    torch.manual_seed(1)
    target = _train(LlamaForCausalLM(llama_config(len(tt))), tt, steps=150, seed=1)
    torch.manual_seed(2)
    draft = _train(GPTBigCodeForCausalLM(bigcode_config(len(dt))), dt, steps=150, seed=2)
    for model, tok, name in ((target, tt, "target"), (draft, dt, "draft")):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    return str(root / "target"), str(root / "draft")


@functools.lru_cache(maxsize=None)
def tiny_same_tokenizer_draft_dir() -> str:
    """A second, smaller Llama sharing the target's tokenizer, drawn close to the target."""
    root = Path(tempfile.mkdtemp(prefix="specfill-tiny-same-"))
    tt, _ = tiny_tokenizers()
    torch.manual_seed(3)
    draft = _train(LlamaForCausalLM(llama_config(len(tt), num_hidden_layers=1, hidden_size=32,
                                                  intermediate_size=64)), tt, steps=150, seed=3)
    draft.save_pretrained(root)
    tt.save_pretrained(root)
    return str(root)


def tiny_model(kind: str, vocab_size: int, seed: int = 0) -> torch.nn.Module:
    """Tiny random models of the cache layouts the engine must handle."""
    if kind == "llama":
        return init_sharp(LlamaForCausalLM(llama_config(vocab_size)), seed, 0.3)
    if kind == "qwen2":
        cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
        return init_sharp(Qwen2ForCausalLM(cfg), seed, 0.3)
    if kind == "gpt2":
        cfg = GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=2, n_positions=2048)
        return init_sharp(GPT2LMHeadModel(cfg), seed, 0.3)
    if kind == "bigcode":
        return init_sharp(GPTBigCodeForCausalLM(bigcode_config(vocab_size)), seed, 0.3)
    raise ValueError(kind)
