"""Distillation inside `training.train` (corpus prompts): continue the draft on text the target writes.

(`specfill distill` / training/distill.py is the stand-alone tool on a user's own code.)

The draft is only useful where it predicts the TARGET's greedy choice, not the corpus. So we
let the trained target complete prompts cut from the training corpus, exactly as at inference
(FIM prompts ending at ▁<MID> in PSM and SPM order, and left-to-right prefixes), greedily, and
train the draft on those completions written in its own StarCoder format, mixed with the ordinary
corpus stream so it does not forget; the loss counts only the target-written tokens of those. Called from training/train.py
(--distill-minutes); a control run continues the draft for the same time on the corpus only,
so the acceptance gain is not just "more training".
"""
from __future__ import annotations

import os
import random
import time

import torch

from training.corpus import choose_fim_span, encoder, fim_format, fim_prompt_ids, split_into_chunks

PROMPT_CHARS = 800       # prompt context cut from a training chunk
CONTINUE_TOKENS = 48     # target tokens generated per prompt
BATCH = 16
KD_SHARE = 0.25          # fraction of draft training tokens that are target completions (rest: corpus)


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
                     device: str) -> list[tuple[str, str, str, str, bool]]:
    """(kind, prefix, suffix, target's greedy continuation, whether it stopped) for as many
    prompts as fit in minutes."""
    fmt, enc = fim_format(tok), encoder(tok)
    stop = {fmt.fim_end, fmt.end}
    target.eval().to(device)
    prompts = _prompts(texts, seed, chunk_chars)
    samples, t0, generated = [], time.time(), 0
    while time.time() - t0 < minutes * 60:
        batch = [next(prompts) for _ in range(BATCH)]
        ids = []
        for kind, prefix, suffix in batch:
            if kind == "l2r":
                ids.append([*fmt.start, *enc(prefix)])
            else:
                ids.append(fim_prompt_ids(fmt, enc, prefix, suffix, kind == "spm"))
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
            samples.append((kind, prefix, suffix, tok.decode(row), ended))
    print(f"[distill] {len(samples)} target samples, {generated:,} generated tokens in "
          f"{(time.time() - t0) / 60:.1f} min", flush=True)
    return samples


def draft_stream_from_samples(samples, draft_tok) -> tuple[list[int], list[int]]:
    """The target's completions written in the draft's StarCoder format, and a loss mask that is
    1 on the target-written tokens only (the prompts are corpus text)."""
    fmt, enc = fim_format(draft_tok), encoder(draft_tok)
    stream: list[int] = []
    mask: list[int] = []
    for kind, prefix, suffix, middle, ended in samples:
        # The end token only where the target itself stopped, so the draft learns when it stops.
        end = [fmt.end if kind == "l2r" else fmt.fim_end] if ended else []
        if kind == "l2r":
            prompt = [*fmt.start, *enc(prefix)]
        else:
            prompt = fim_prompt_ids(fmt, enc, prefix, suffix, kind == "spm")
        answer = enc(middle) + end
        stream += prompt + answer
        mask += [0] * len(prompt) + [1] * len(answer)
    return stream, mask


def mixed_stream(kd: tuple[list[int], list[int]], corpus_stream: torch.Tensor,
                 seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distilled tokens plus a random slice of the corpus stream, KD_SHARE of the result distilled."""
    g = torch.Generator().manual_seed(seed)
    ids, mask = kd
    n = min(int(sum(mask) * (1 - KD_SHARE) / KD_SHARE), len(corpus_stream) - 1)
    start = int(torch.randint(0, len(corpus_stream) - n, (1,), generator=g))
    return (torch.cat([torch.tensor(ids, dtype=torch.int32), corpus_stream[start:start + n]]),
            torch.cat([torch.tensor(mask, dtype=torch.bool), torch.ones(n, dtype=torch.bool)]))


def load_or_generate(path: str, target, tok, texts, seed, minutes, chunk_chars, device):
    if os.path.exists(path):
        return torch.load(path)
    samples = generate_samples(target, tok, texts, seed, minutes, chunk_chars, device)
    torch.save(samples, path)
    return samples
