"""Held-out evaluation of a trained model: bits per byte and single-line FIM exact match.

    python -m training.evaluate --model engine/default_pair/target --files 60 --fim 100
    python -m training.evaluate --model engine/default_pair/draft  --files 60 --fim 100

Held-out files come from packages never trained on (training/corpus.py HELD_OUT_PACKAGES).
* bits/byte: left-to-right negative log-likelihood of each file chunk's text tokens (plus the
  end-of-document token) divided by the chunk's UTF-8 bytes and ln 2; independent of vocabulary.
* FIM exact match: mask one whole non-blank line (indentation included), prompt with up to
  PREFIX_CHARS before it and SUFFIX_CHARS after it, decode greedily until the FIM end token;
  a hit is a middle exactly equal to the line. Reported for PSM and SPM prompt order.
The model family (CodeLlama-style or StarCoder-style sentinels) is read from the tokenizer, and
the model is loaded, as the editor's engine loads it (on CPU, float32).
"""
from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import asdict, dataclass

import torch

from training.corpus import (SourceFile, build_corpus, encoder, fim_format, fim_prompt_ids,
                             split_into_chunks)

PREFIX_CHARS, SUFFIX_CHARS = 1000, 400
CHUNK_CHARS = 1500


@dataclass
class EvalResult:
    model: str
    files: int
    bytes: int
    bits_per_byte: float
    fim_cases: int
    fim_exact_psm: float
    fim_exact_spm: float
    fim_first_line_psm: float   # first line of the middle equals the masked line (lenient)


@torch.no_grad()
def bits_per_byte(model, tok, files: list[SourceFile]) -> tuple[float, int]:
    fmt, enc = fim_format(tok), encoder(tok)
    nats, nbytes = 0.0, 0
    for f in files:
        for chunk in split_into_chunks(f.text, CHUNK_CHARS):
            ids = [*fmt.start, *enc(chunk), fmt.end]
            x = torch.tensor([ids])
            logits = model(input_ids=x).logits[0, :-1].float()
            targets = x[0, 1:]
            # With no start token the first text token has no context: skip it and its bytes.
            if not fmt.start:
                skipped = tok.decode(ids[:1])
                nbytes -= len(skipped.encode())
            nats += torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()
            nbytes += len(chunk.encode())
    return nats / nbytes / math.log(2), nbytes


def fim_cases(files: list[SourceFile], n: int, seed: int) -> list[tuple[str, str, str]]:
    """(prefix, line, suffix) for n masked single lines, drawn with a seeded RNG."""
    rng = random.Random(seed)
    cases = []
    pool = list(files)
    while len(cases) < n and pool:
        f = rng.choice(pool)
        lines = f.text.split("\n")
        candidates = [i for i, line in enumerate(lines) if 4 <= len(line.strip()) <= 100]
        if not candidates:
            pool.remove(f)
            continue
        i = rng.choice(candidates)
        prefix = "\n".join(lines[:i]) + ("\n" if i else "")
        suffix = "\n" + "\n".join(lines[i + 1:])
        prefix = prefix[-PREFIX_CHARS:]
        cut = prefix.find("\n")
        if len(prefix) == PREFIX_CHARS and cut >= 0:   # start the window at a line start
            prefix = prefix[cut + 1:]
        cases.append((prefix, lines[i], suffix[:SUFFIX_CHARS]))
    return cases


@torch.no_grad()
def greedy_middle(model, tok, prompt: list[int], stop: set[int], max_new: int = 48) -> str:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False,
                         eos_token_id=sorted(stop), pad_token_id=min(stop))[0, len(prompt):].tolist()
    for j, t in enumerate(out):
        if t in stop:
            out = out[:j]
            break
    return tok.decode(out)


def fim_exact_match(model, tok, cases, spm: bool) -> tuple[float, float]:
    fmt, enc = fim_format(tok), encoder(tok)
    stop = {fmt.fim_end, fmt.end}
    exact = first = 0
    for prefix, line, suffix in cases:
        middle = greedy_middle(model, tok, fim_prompt_ids(fmt, enc, prefix, suffix, spm), stop)
        exact += middle == line
        first += middle.split("\n", 1)[0] == line
    return exact / len(cases), first / len(cases)


def evaluate(model_dir: str, n_files: int = 60, n_fim: int = 100, seed: int = 0) -> EvalResult:
    from engine.load.models import load_model
    loaded = load_model(model_dir, role="evaluated", device="cpu", dtype="float32")
    model, tok = loaded.model, loaded.tokenizer
    corpus = build_corpus(seed=seed, max_train_bytes=0)
    files = corpus.held_out[:n_files]
    bpb, nbytes = bits_per_byte(model, tok, files)
    cases = fim_cases(corpus.held_out, n_fim, seed)
    psm, psm_first = fim_exact_match(model, tok, cases, spm=False)
    spm, _ = fim_exact_match(model, tok, cases, spm=True)
    return EvalResult(model_dir, len(files), nbytes, round(bpb, 4), len(cases),
                      round(psm, 3), round(spm, 3), round(psm_first, 3))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model directory")
    ap.add_argument("--files", type=int, default=60, help="held-out files for bits/byte")
    ap.add_argument("--fim", type=int, default=100, help="single-line FIM cases")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(json.dumps(asdict(evaluate(args.model, args.files, args.fim, args.seed)), indent=2))


if __name__ == "__main__":
    main()
