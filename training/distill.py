"""Sequence-level distillation for the draft: continue its training on text the target writes.

The draft is only useful where it predicts the TARGET's greedy choice, not the corpus. So we
let the trained target complete prompts cut from the training corpus, exactly as at inference
(FIM prompts ending at ▁<MID> in PSM and SPM order, and left-to-right prefixes), greedily, and
train the draft on those completions written in its own StarCoder format, mixed half and half
with the ordinary corpus stream so it does not forget. Called from training/train.py
(--distill-minutes); a control run continues the draft for the same time on the corpus only,
so the acceptance gain is not just "more training".
"""
from __future__ import annotations

import os
import random
import time

import torch

from training.corpus import (choose_fim_span, codellama_fim_end, codellama_format, fim_prompt_ids,
                             split_into_chunks, starcoder_format)

PROMPT_CHARS = 1200      # prompt context cut from a training chunk
CONTINUE_TOKENS = 48     # target tokens generated per prompt
BATCH = 16


def _encode(tok, text: str) -> list[int]:
    return tok.backend_tokenizer.encode(text, add_special_tokens=False).ids


def _prompts(texts: list[str], seed: int, chunk_chars: int):
    """Endless seeded (kind, prefix, suffix) prompts: half FIM (PSM/SPM), half left-to-right."""
    rng = random.Random(seed)
    while True:
        text = rng.choice(texts)
        chunk = rng.choice(split_into_chunks(text, chunk_chars))
        if len(chunk) < 50:
            continue
        if rng.random() < 0.5:
            span = choose_fim_span(chunk, rng)
            kind = "spm" if rng.random() < 0.5 else "psm"
            yield kind, span.prefix[-PROMPT_CHARS:], span.suffix[:PROMPT_CHARS // 2]
        else:
            cut = chunk.find("\n", rng.randrange(len(chunk))) + 1 or len(chunk)
            yield "l2r", chunk[:cut][-PROMPT_CHARS:], ""


@torch.no_grad()
def generate_samples(target, tok, texts: list[str], seed: int, minutes: float, chunk_chars: int,
                     device: str) -> list[tuple[str, str, str, str]]:
    """(kind, prefix, suffix, target's greedy continuation) for as many prompts as fit in minutes."""
    fmt, eot = codellama_format(tok), codellama_fim_end(tok)
    stop = {eot, tok.eos_token_id}
    target.eval().to(device)
    prompts = _prompts(texts, seed, chunk_chars)
    samples, t0, generated = [], time.time(), 0
    while time.time() - t0 < minutes * 60:
        batch = [next(prompts) for _ in range(BATCH)]
        ids = []
        for kind, prefix, suffix in batch:
            if kind == "l2r":
                ids.append([tok.bos_token_id, *_encode(tok, prefix)])
            else:
                ids.append(fim_prompt_ids(fmt, lambda s: _encode(tok, s), prefix, suffix, kind == "spm"))
        width = max(map(len, ids))
        pad = tok.eos_token_id
        x = torch.tensor([[pad] * (width - len(r)) + r for r in ids], device=device)
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ids], device=device)
        out = target.generate(input_ids=x, attention_mask=mask, max_new_tokens=CONTINUE_TOKENS,
                              do_sample=False, eos_token_id=sorted(stop), pad_token_id=pad)
        for (kind, prefix, suffix), row in zip(batch, out[:, width:].tolist()):
            ended = False
            for j, t in enumerate(row):
                if t in stop:
                    row, ended = row[:j], True
                    break
            generated += len(row)
            # A FIM middle that did not end inside the budget would teach the draft to stop early.
            if kind == "l2r" or ended:
                samples.append((kind, prefix, suffix, tok.decode(row)))
    print(f"[distill] {len(samples)} target samples, {generated:,} generated tokens in "
          f"{(time.time() - t0) / 60:.1f} min", flush=True)
    return samples


def draft_stream_from_samples(samples, draft_tok) -> list[int]:
    """The target's completions written in the draft's StarCoder format."""
    fmt = starcoder_format(draft_tok)
    enc = lambda s: _encode(draft_tok, s)  # noqa: E731
    stream: list[int] = []
    for kind, prefix, suffix, middle in samples:
        if kind == "l2r":
            stream += [*enc(prefix), *enc(middle), fmt.end]
        else:
            stream += fim_prompt_ids(fmt, enc, prefix, suffix, kind == "spm") + enc(middle) + [fmt.end]
    return stream


def mixed_stream(kd: list[int], corpus_stream: torch.Tensor, seed: int) -> torch.Tensor:
    """Distilled tokens plus an equal-sized random slice of the corpus stream."""
    g = torch.Generator().manual_seed(seed)
    n = min(len(kd), len(corpus_stream) - 1)
    start = int(torch.randint(0, len(corpus_stream) - n, (1,), generator=g))
    return torch.cat([torch.tensor(kd, dtype=torch.int32), corpus_stream[start:start + n]])


def load_or_generate(path: str, target, tok, texts, seed, minutes, chunk_chars, device):
    if os.path.exists(path):
        return torch.load(path)
    samples = generate_samples(target, tok, texts, seed, minutes, chunk_chars, device)
    torch.save(samples, path)
    return samples
