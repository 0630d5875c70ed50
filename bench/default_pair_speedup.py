"""Speculative decoding figures of the default pair on held-out code, through the specfill engine.

    python -m bench.default_pair_speedup --cases 40
    python -m bench.default_pair_speedup --draft runs/default_pair/draft_plain --cases 40

Two workloads, both from packages held out of training (training/corpus.py):
* line: FIM (PSM) with one whole line masked, stop at ▁<EOT> (what an editor asks most);
* block: left-to-right continuation of a held-out prefix, 64 new tokens, no stop.
For each request the same prompt goes to an engine with the draft and one with draft="none";
outputs are checked identical (greedy), and we report acceptance rate (accepted / drafted),
new tokens per target decoding call, and the wall-time speedup (sum of target-alone latency /
sum of speculative latency; requests interleaved so machine load hits both alike).
"""
from __future__ import annotations

import argparse
import json
import random
import time

import torch

from training.corpus import build_corpus, encoder, fim_format, fim_prompt_ids
from training.evaluate import fim_cases


def requests(kind: str, n: int, seed: int, ttok, dtok):
    """(target_ids, draft_ids, stop_ids, max_new_tokens) per request, each model's prompt in its
    own format (the format the pair was trained on)."""
    held = build_corpus(seed=seed, max_train_bytes=0).held_out
    tfmt, dfmt = fim_format(ttok), fim_format(dtok)
    tenc, denc = encoder(ttok), encoder(dtok)
    if kind == "line":
        stop = (tfmt.fim_end, tfmt.end)
        for prefix, _line, suffix in fim_cases(held, n, seed):
            yield (fim_prompt_ids(tfmt, tenc, prefix, suffix, False),
                   fim_prompt_ids(dfmt, denc, prefix, suffix, False), stop, 32)
        return
    rng = random.Random(seed)
    for _ in range(n):
        f = rng.choice(held)
        cut = f.text.find("\n", rng.randrange(len(f.text))) + 1 or len(f.text)
        prefix = f.text[:cut][-1200:]
        yield [*tfmt.start, *tenc(prefix)], [*dfmt.start, *denc(prefix)], (), 64


def bench(draft: str, kind: str, n: int, seed: int, draft_length) -> dict:
    from engine import LocalEngine, EngineConfig, GenerationSettings
    spec = LocalEngine(EngineConfig(target="default", draft=draft, device="cpu"))
    alone = LocalEngine(EngineConfig(target="default", draft="none", device="cpu"))
    ttok, dtok = spec.target.tokenizer, spec.draft.tokenizer
    totals = dict(drafted=0, accepted=0, new_tokens=0, round_tokens=0, decode_calls=0, spec_ms=0.0, alone_ms=0.0,
                  requests=0, identical=0)
    for i, (tids, dids, stop, max_new) in enumerate(requests(kind, n, seed, ttok, dtok)):
        settings = GenerationSettings(max_new_tokens=max_new, draft_length=draft_length)
        t0 = time.perf_counter()
        a = spec.generate(tids, dids, settings=settings, stop_ids=stop)
        t1 = time.perf_counter()
        b = alone.generate(tids, settings=settings, stop_ids=stop)
        t2 = time.perf_counter()
        s = a.stats
        if i == 0:        # warm-up request: not timed
            continue
        totals["requests"] += 1
        totals["identical"] += a.token_ids == b.token_ids
        totals["drafted"] += s.drafted
        totals["accepted"] += s.accepted
        totals["new_tokens"] += s.new_tokens
        totals["round_tokens"] += s.new_tokens - s.first_from_prefill
        totals["decode_calls"] += s.rounds
        totals["spec_ms"] += (t1 - t0) * 1000
        totals["alone_ms"] += (t2 - t1) * 1000
    return {
        "workload": kind, "draft": draft, "draft_length": draft_length, **totals,
        "acceptance_rate": round(totals["accepted"] / max(totals["drafted"], 1), 3),
        "tokens_per_target_call": round(totals["round_tokens"] / max(totals["decode_calls"], 1), 3),
        "speedup": round(totals["alone_ms"] / max(totals["spec_ms"], 1e-9), 3),
        "spec_ms": round(totals["spec_ms"], 1), "alone_ms": round(totals["alone_ms"], 1),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draft", default="default", help="draft model: 'default' or a directory")
    ap.add_argument("--cases", type=int, default=40, help="requests per workload (first is warm-up)")
    ap.add_argument("--workloads", default="line,block")
    ap.add_argument("--draft-length", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    k = args.draft_length if args.draft_length == "auto" else int(args.draft_length)
    for kind in args.workloads.split(","):
        print(json.dumps(bench(args.draft, kind, args.cases, args.seed, k)), flush=True)


if __name__ == "__main__":
    main()
