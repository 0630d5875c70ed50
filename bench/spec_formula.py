"""What speculative decoding can gain at a real size: the formula's speed-up from measured costs.

    python -m bench.spec_formula [--target qwen2.5-coder-0.5b] [--draft ngram|SHAPE]
                                 [--set dtype=auto] [--acceptance 0.4,0.6,0.8] [--threads 2]

Random weights (bench/real_shapes.py) cannot show how often a real draft is right, so this
measures only what a round costs on the machine and prices it for given acceptance rates a:
the target's verify pass of w tokens after a prompt of about 400 (median of a few, w = 1 to 17),
and a draft step (the draft model's decode step at the same settings; prompt lookup's search,
about free). For each a it takes the draft length k with the most tokens per millisecond,

    speed-up(a, k) = E(a, k) x verify(1) / (verify(k + 1) + k x draft_step),
    E(a, k) = (1 - a^(k+1)) / (1 - a)     (tokens a round yields, the target's own one included),

against decoding alone at verify(1) a token. The engine's policy makes the same choice each
round from the costs and acceptance it measures (engine/policy.py).
"""
from __future__ import annotations

import statistics
import sys
import time

from bench.common import bench_parser, usage_error

WIDTHS = range(1, 18)
REPS = 5
LOOKUP_STEP_MS = 0.05      # prompt lookup's search, per token it proposes (engine/drafters/lookup.py): about free


def expected_tokens(a: float, k: int) -> float:
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def best_plan(a: float, verify: dict[int, float], draft_step: float) -> tuple[int, float]:
    """(k, speed-up) of the draft length with the most tokens per millisecond at acceptance a."""
    plans = [(k, expected_tokens(a, k) * verify[1] / (verify[k + 1] + k * draft_step)) for k in range(0, max(verify))]
    return max(plans, key=lambda p: p[1])


def _pool(shape: str, settings: dict):
    import torch  # noqa: F401  (loaded with the engine)
    from bench.real_shapes import model_dir
    from engine.kv import KVPool
    from engine.load.models import load_model

    loaded = load_model(str(model_dir(shape)), "target", dtype=settings.get("dtype", "auto"), lean_only=True)
    return loaded, KVPool(loaded.model, 1, 4096, quantize=settings.get("quantize", "none"))


def verify_costs(pool, prompt: list[int], widths=WIDTHS, reps: int = REPS) -> dict[int, float]:
    """Median ms of a pass of w new tokens (logits for all of them) after `prompt`, by w."""
    import torch

    session = pool.session_for(prompt)
    with torch.inference_mode():
        session.advance(prompt, n_logits=1)
        times = {w: [] for w in widths}
        for rep in range(reps + 1):        # round 0 warms up
            for w in widths:
                session.crop(len(prompt))
                t0 = time.perf_counter()
                session.append([(7 * i + rep) % 1000 + 100 for i in range(w)], n_logits=w)
                if rep:
                    times[w].append((time.perf_counter() - t0) * 1000)
    return {w: statistics.median(t) for w, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser("python -m bench.spec_formula", __doc__)
    ap.add_argument("--target", default="qwen2.5-coder-0.5b", help="the target's shape (bench/real_shapes.py)")
    ap.add_argument("--draft", default="ngram", help="ngram (prompt lookup) or a draft model's shape")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="dtype=... or quantize=..., for both models (repeatable)")
    ap.add_argument("--acceptance", default="0.4,0.6,0.8", help="comma-separated acceptance rates")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    from bench.real_shapes import SHAPES
    for shape in (args.target,) + (() if args.draft == "ngram" else (args.draft,)):
        if shape not in SHAPES:
            return usage_error(ap.prog, f"unknown shape {shape!r} (one of {', '.join(SHAPES)})")
    settings = {}
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in ("dtype", "quantize") or not value:
            return usage_error(ap.prog, f"--set {item!r}: dtype=VALUE or quantize=VALUE")
        settings[name] = value
    try:
        rates = [float(a) for a in args.acceptance.split(",")]
    except ValueError:
        return usage_error(ap.prog, f"--acceptance {args.acceptance!r}: numbers between 0 and 1")
    if not all(0 <= a <= 1 for a in rates):
        return usage_error(ap.prog, f"--acceptance {args.acceptance!r}: numbers between 0 and 1")

    import torch
    torch.set_num_threads(args.threads)
    prompt = [(37 * i) % 5000 + 200 for i in range(400)]
    loaded, pool = _pool(args.target, settings)
    verify = verify_costs(pool, prompt)
    del pool, loaded
    if args.draft == "ngram":
        draft_step, draft_name = LOOKUP_STEP_MS, "prompt lookup"
    else:
        _, draft_pool = _pool(args.draft, settings)
        draft_step, draft_name = verify_costs(draft_pool, prompt, widths=(1,))[1], args.draft
    shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
    print(f"{args.target} target, {draft_name} drafting ({shown}; {args.threads} threads). "
          "Random weights: acceptance is given, not measured; costs are measured here.")
    print("verify(w) ms: " + " ".join(f"{w}:{v:.1f}" for w, v in verify.items()))
    print(f"draft step: {draft_step:.2f} ms (target step verify(1): {verify[1]:.1f} ms)")
    print("| acceptance | best draft length | tokens a round | speed-up over decoding alone |")
    print("|---|---|---|---|")
    for a in rates:
        k, speedup = best_plan(a, verify, draft_step)
        print(f"| {a:.2f} | {k} | {expected_tokens(a, k):.2f} | {speedup:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
