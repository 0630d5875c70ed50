"""What speculative decoding can gain for real model shapes on the device this runs on: a
CodeLlama-13b-shaped target and a tiny_starcoder-shaped draft, with random weights (no model hub
here, and time per step does not depend on the weights' values).

    python -m bench.gpu_shapes                       # CUDA, bf16: target 13b, draft starcoder-164m
    python -m bench.gpu_shapes --target tiny --draft tiny --device cpu --dtype float32   # seconds

For each model it prints ms per call of the lean forward (engine/forward/lean.py), of its static mode
(StaticLeanForward: fixed shapes, attention over the whole reserved cache), on CUDA of that
static mode replayed as CUDA graphs, and of the transformers forward, at verify widths 1-16 after
`--context` cached tokens; the bandwidth floor (weight bytes over this device's measured read
bandwidth) and the largest logit difference between any lean forward and the transformers one. Then the speed-up the formula predicts,
E(a, k) x target(1) / (k x draft(1) + target(k + 1)) with E(a, k) = (1 - a^(k+1)) / (1 - a),
for a few acceptance rates at the best k. Random weights cannot say what acceptance a real pair
gets: that comes from `python -m bench.suite` on real models.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM, LlamaConfig, LlamaForCausalLM

from engine.forward.forwards import TransformersForward
from engine.kv import KVSession
from engine.forward.lean import LeanForward, StaticLeanForward, make_lean

# name -> (architecture, config keywords). 13b: CodeLlama-13b's shape (vocab 32016 with the FIM
# pieces); starcoder-164m: bigcode/tiny_starcoder_py's; tiny: a few-layer model for CPU tests.
SHAPES = {
    "13b": ("llama", dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                          num_attention_heads=40, num_key_value_heads=40, vocab_size=32016,
                          max_position_embeddings=16384, rope_theta=1e6)),
    "7b": ("llama", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=32, vocab_size=32016,
                         max_position_embeddings=16384, rope_theta=1e6)),
    "starcoder-164m": ("gpt_bigcode", dict(n_embd=768, n_inner=3072, n_layer=20, n_head=12,
                                           multi_query=True, vocab_size=49152, n_positions=8192,
                                           bos_token_id=0, eos_token_id=0)),
    "tiny": ("llama", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                           max_position_embeddings=2048)),
}
WIDTHS = (1, 2, 4, 8, 16)
ACCEPTANCE = (0.5, 0.6, 0.7, 0.8, 0.9)


def build(shape: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """A model of `shape` with random weights, made directly on `device` in `dtype` (a 13b in
    fp32 first would need twice the memory)."""
    arch, kw = SHAPES[shape]
    config = LlamaConfig(**kw) if arch == "llama" else GPTBigCodeConfig(**kw)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = (LlamaForCausalLM if arch == "llama" else GPTBigCodeForCausalLM)(config)
    finally:
        torch.set_default_dtype(old)
    return model.eval()


def read_bandwidth_gbs(device: torch.device) -> float:
    """Best of a few passes summing 1 GiB (256 MiB on a CPU): beyond any cache."""
    n = (2**28 if device.type == "cuda" else 2**26)
    a = torch.ones(n, device=device)
    best = float("inf")
    for _ in range(5):
        sync(device)
        t0 = time.perf_counter()
        a.sum()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return n * 4 / best / 1e9


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def weight_bytes(model) -> int:
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}   # tied once
    return sum(seen.values())


def step_ms(session: KVSession, context: list[int], width: int, calls: int, device) -> float:
    """ms per call that appends `width` tokens to `context` (the session crops back each time)."""
    ids = context + [7] * width
    sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        session.advance(ids, n_logits=width)
    sync(device)
    return (time.perf_counter() - t0) / calls * 1000


def measure(model, device, context_len: int, reps: int, calls: int) -> dict:
    """{forward name: {width: median ms}} and the largest |logit difference| lean vs transformers."""
    param = next(model.parameters())
    lean = make_lean(model)
    capacity = context_len + 64
    forwards = {"transformers": TransformersForward(model, device)}
    if lean is not None:
        forwards["lean"] = LeanForward(lean, param.dtype, device)
        forwards["static"] = StaticLeanForward(lean, param.dtype, device, capacity)
        if device.type == "cuda":   # each width captured on its first call (the warm-up below)
            forwards["graphs"] = StaticLeanForward(lean, param.dtype, device, capacity, cuda_graphs=True)
    vocab = model.config.vocab_size
    context = [(i * 37) % (vocab - 10) + 3 for i in range(context_len)]
    sessions = {name: KVSession(model, capacity, forward=f) for name, f in forwards.items()}
    logits = {}
    for name, s in sessions.items():
        logits[name] = s.advance(context + list(range(20, 28)), n_logits=8).float()
        for w in WIDTHS:
            step_ms(s, context, w, 3, device)   # warm up (and capture the graphs)
    err = max(float((x - logits["transformers"]).abs().max()) for x in logits.values())   # every lean forward
    samples = {name: {w: [] for w in WIDTHS} for name in sessions}
    for _ in range(reps):
        for w in WIDTHS:
            for name, s in sessions.items():   # interleaved: load hits them alike
                samples[name][w].append(step_ms(s, context, w, calls, device))
    return {name: {w: statistics.median(v) for w, v in by_w.items()} for name, by_w in samples.items()}, err


def expected_tokens(a: float, k: int) -> float:
    return float(k + 1) if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def best_speedup(a: float, target: dict[int, float], draft_step: float) -> tuple[float, int]:
    """(speed-up over plain decoding, k) at the best k whose verify width was measured."""
    best = (1.0, 0)
    for w in target:
        k = w - 1
        if k == 0:
            continue
        gain = expected_tokens(a, k) * target[1] / (k * draft_step + target[w])
        best = max(best, (gain, k))
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="13b", choices=sorted(SHAPES))
    ap.add_argument("--draft", default="starcoder-164m", choices=sorted(SHAPES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--context", type=int, default=1024, help="cached tokens before each step")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="calls per timed block")
    args = ap.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    gbs = read_bandwidth_gbs(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    print(f"{name}; torch {torch.__version__}; {args.dtype}; read bandwidth {gbs:.0f} GB/s; "
          f"context {args.context} tokens; median of {args.reps} x {args.calls} calls")
    by_role = {}
    for role, shape in (("target", args.target), ("draft", args.draft)):
        with torch.inference_mode():
            model = build(shape, device, dtype)
            ms, err = measure(model, device, args.context, args.reps, args.calls)
        nbytes = weight_bytes(model)
        print(f"\n{role} {shape}: {sum(p.numel() for p in model.parameters()) / 1e6:,.1f}M parameters, "
              f"{nbytes / 1e9:.2f} GB, bandwidth floor {nbytes / gbs / 1e6:.2f} ms/step; "
              f"max |logit lean - transformers| {err:.2e}")
        print(f"{'width':>6} " + " ".join(f"{n:>14}" for n in ms) + "   (ms per call)")
        for w in WIDTHS:
            print(f"{w:>6} " + " ".join(f"{ms[n][w]:>14.3f}" for n in ms))
        by_role[role] = ms
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    # the formula for the eager lean forward and, on CUDA, its graphs (both models the same way)
    names = [n for n in ("lean", "graphs") if all(n in ms for ms in by_role.values())] or ["transformers"]
    print("\nformula: speed-up over the target alone, " + "; ".join(
        f"{n}: draft step {by_role['draft'][n][1]:.3f} ms, target step {by_role['target'][n][1]:.3f} ms"
        for n in names))
    print("| acceptance | " + " | ".join(f"best k ({n}) | speed-up ({n})" for n in names) + " |")
    print("|---|" + "---|---|" * len(names))
    for a in ACCEPTANCE:
        cells = [best_speedup(a, by_role["target"][n], by_role["draft"][n][1]) for n in names]
        print(f"| {a:.1f} | " + " | ".join(f"{k} | {gain:.2f}x" for gain, k in cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
