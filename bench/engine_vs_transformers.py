"""Side-by-side: specfill's engine vs transformers generate(), same pair, same prompts, one run.

    python -m bench.engine_vs_transformers [--target default --draft default] [--prompts 12]

Prompts are left-to-right cuts of held-out source (pygls, not in the default pair's training
data). Prints tokens per target call, ms per token and the speedup of each configuration
over plain transformers greedy generate(). Every run is checked to produce the same tokens.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from bench.common import CallCounter, held_out_prompts, prompt_ids
from engine import LocalEngine, EngineConfig, GenerationSettings


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="default")
    ap.add_argument("--draft", default="default")
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--prompt-chars", type=int, default=1200)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    # name -> (draft, lean forward, prompt lookup beside the draft)
    configs = {"specfill default (draft + lookup, cost-aware)": (args.draft, True, True),
               "specfill draft model alone": (args.draft, True, False),
               "specfill ngram": ("ngram", True, True),
               "specfill none": ("none", True, True),
               "specfill none, transformers forward": ("none", False, True)}
    engines = {name: LocalEngine(EngineConfig(target=args.target, draft=d, max_sessions=1, lean=lean, lookup=lookup))
               for name, (d, lean, lookup) in configs.items()}
    drafted = engines["specfill default (draft + lookup, cost-aware)"]
    ref = engines["specfill none"]
    # transformers' generate runs transformers' models and tokenizers (the engines load their own)
    hf_target, tt = transformers_model(ref.target, "target")
    hf_draft, dt = transformers_model(drafted.draft, "draft") if drafted.draft else (None, None)
    counter = CallCounter(hf_target)
    prompts = held_out_prompts(args.prompts, args.prompt_chars)

    def hf_generate(ids, assistant):
        kw = dict(max_new_tokens=args.max_new_tokens, do_sample=False, eos_token_id=None,
                  pad_token_id=tt.pad_token_id or 0)
        if assistant is not None:
            kw.update(assistant_model=assistant)
            if dt is not None and dt.get_vocab() != tt.get_vocab():
                kw.update(tokenizer=tt, assistant_tokenizer=dt)
        x = torch.tensor([ids])
        out = hf_target.generate(x, attention_mask=torch.ones_like(x), **kw)
        return out[0, len(ids):].tolist()

    rows = {name: {"ms": [], "tokens": 0, "calls": 0, "same": 0} for name in
            list(configs) + ["transformers + assistant", "transformers plain"]}
    with torch.inference_mode():
        for prompt in prompts:
            t_ids, _ = prompt_ids(ref, prompt)
            plain = None
            for name in ("transformers plain", "transformers + assistant"):
                if name == "transformers + assistant" and hf_draft is None:
                    continue
                counter.calls = 0
                t0 = time.perf_counter()
                out = hf_generate(t_ids, hf_draft if "assistant" in name else None)
                rows[name]["ms"].append((time.perf_counter() - t0) * 1000)
                rows[name]["tokens"] += len(out)
                rows[name]["calls"] += counter.calls - 1  # minus the prefill
                plain = out if plain is None else plain
                rows[name]["same"] += out == plain
            for name, eng in engines.items():
                eng.clear_caches()  # no cross-prompt cache reuse: same footing as generate()
                _, d_ids = prompt_ids(eng, prompt)
                # specfill stops at special tokens; compare on the same stop rule as plain greedy
                r = eng.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=args.max_new_tokens))
                rows[name]["ms"].append(r.stats.latency_ms)
                rows[name]["tokens"] += r.stats.new_tokens
                rows[name]["calls"] += r.stats.target_calls - 1
                rows[name]["same"] += r.token_ids == plain[:len(r.token_ids)]

    base_ms = sum(rows["transformers plain"]["ms"]) / max(1, rows["transformers plain"]["tokens"])
    print(f"{len(prompts)} held-out prompts, {args.max_new_tokens} new tokens, threads={torch.get_num_threads()}")
    print("| configuration | tokens / target call | ms / token | p50 ms / request | speedup vs plain | same output |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        if not r["ms"]:
            continue
        ms_tok = sum(r["ms"]) / max(1, r["tokens"])
        print(f"| {name} | {r['tokens'] / max(1, r['calls']):.2f} | {ms_tok:.2f} | {statistics.median(r['ms']):.0f} "
              f"| {base_ms / ms_tok:.2f}x | {r['same']}/{len(prompts)} |")


if __name__ == "__main__":
    main()


def transformers_model(loaded, role: str):
    """An engine's model again as transformers' model and tokenizer (its generate needs them),
    in the precision the engine took."""
    from engine.load.models import load_model

    dtype = str(next(loaded.model.parameters()).dtype).removeprefix("torch.")
    again = load_model(loaded.name, role, device=str(loaded.device), dtype=dtype)
    return again.model, again.tokenizer
