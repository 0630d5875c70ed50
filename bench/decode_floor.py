"""What bounds a decode step at a real shape: the bytes its linear maps read, the machine's read
rate, and the rate torch's kernels stream those maps at.

    python -m bench.decode_floor --shape qwen2.5-coder-0.5b

A decode step multiplies one row by every linear map of the model (each layer's attention and MLP
maps, then the output head) and reads each weight once, so its floor is the maps' bytes over the
machine's read bandwidth. This builds the shape's maps with random weights (distinct tensors, as a
model's are, so no map is still in a cache when it is read again), times one row through all of
them in model order with each kernel the engine can run them with, and prints the time, the rate
and the floor side by side:
- `bf16 gemv`: the engine's one-row kernel for a 16-bit model (engine/forward/matmul.py `gemv`);
- `int8`, `int4`: the engine's quantized maps (engine/forward/quantize.py), where this CPU runs them;
- the machine's read rate: the best of summing a 1 GB float32 tensor and a 512 MB bfloat16 one
  (torch's reductions on the same threads; a lower bound on what the memory delivers).
The rest of a decode step (attention, norms, the sampling) comes on top: `python -m
bench.vs_llamacpp` reports whole steps beside llama.cpp's on the same weights. Weights are random:
nothing here computes text.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings

import torch

from bench.real_shapes import SHAPES, Shape, scaled

PROG = "python -m bench.decode_floor"


def linear_maps(shape: Shape) -> list[tuple[int, int]]:
    """(outputs, inputs) of every map one decode step multiplies, in model order; the maps that
    share an input fused, as the engine runs them."""
    c = shape.config
    if shape.model_type == "gpt_bigcode":
        hidden, inner, layers = c["n_embd"], c.get("n_inner") or 4 * c["n_embd"], c["n_layer"]
        head_dim = hidden // c["n_head"]
        kv = 2 * head_dim if c.get("multi_query", True) else 2 * hidden
        layer = [(hidden + kv, hidden), (hidden, hidden), (inner, hidden), (hidden, inner)]
    else:
        hidden, inner, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
        head_dim = c.get("head_dim") or hidden // c["num_attention_heads"]
        kv = 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim
        layer = [(hidden + kv, hidden), (hidden, hidden), (2 * inner, hidden), (hidden, inner)]
    return layer * layers + [(c["vocab_size"], hidden)]


def best_ms(run, reps: int) -> float:
    run()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def read_rate_gbs(reps: int, mb: int = 1024) -> float:
    """The best rate of summing `mb` MB of float32 and half as many of bfloat16, GB/s."""
    floats = torch.ones(mb * 2**20 // 4)
    halves = torch.ones(mb * 2**20 // 4, dtype=torch.bfloat16)
    rates = [t.numel() * t.element_size() / best_ms(t.sum, reps) / 1e6 for t in (floats, halves)]
    return max(rates)


def kernels(maps: list[tuple[int, int]]) -> dict:
    """name -> (build(out, in) -> a callable on one row, the row's dtype, bytes per weight)."""
    from engine.forward.matmul import gemv
    from engine.forward.quantize import (
        INT4_GROUP,
        QuantizeError,
        check_quantize,
        quantize_linears,
    )

    def plain(out, width):
        weight = (torch.randn(out, width) * 0.02).to(torch.bfloat16)
        return lambda h: gemv(h, weight, None)

    def quantized(kind):
        def build(out, width):
            module = torch.nn.Linear(width, out, bias=False, dtype=torch.bfloat16)
            torch.nn.init.normal_(module.weight, std=0.02)
            return quantize_linears([module], set(), kind)
        return build

    found = {"bf16 gemv": (plain, torch.bfloat16, lambda out, width: 2 * out * width)}
    for kind, dtype, size in (("int8", torch.float32, lambda out, width: out * width + 4 * out),
                              ("int4", torch.bfloat16, lambda out, width: out * width // 2
                               + 4 * out * width // INT4_GROUP)):
        try:
            check_quantize(kind, torch.device("cpu"))
        except QuantizeError as exc:
            print(f"{PROG}: {kind} skipped: {exc}", file=sys.stderr)
            continue
        if kind == "int4" and any(width % INT4_GROUP for _, width in maps):
            print(f"{PROG}: int4 skipped: a map's inputs are not a multiple of {INT4_GROUP}", file=sys.stderr)
            continue
        found[kind] = (quantized(kind), dtype, size)
    return found


def step_ms(build, dtype, maps: list[tuple[int, int]], reps: int) -> float:
    """One row through every map, in order, with the kernel `build` makes: best ms."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = [build(out, width) for out, width in maps]
        rows = {width: torch.randn(1, width, dtype=dtype) for _, width in maps}
        return best_ms(lambda: [call(rows[width]) for call, (_, width) in zip(calls, maps)], reps)


def measure(shape: Shape, threads: int, reps: int, read_mb: int = 1024) -> str:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    maps = linear_maps(shape)
    timed = {name: (step_ms(build, dtype, maps, reps), sum(size(out, width) for out, width in maps))
             for name, (build, dtype, size) in kernels(maps).items()}
    # the read rate after the kernels (their weights freed) and again, the best taken: this
    # machine's rate moves between runs, so it is measured in the same run as the kernels
    rate = max(read_rate_gbs(reps, read_mb), read_rate_gbs(reps, read_mb))
    lines = [(f"{shape.name}: {len(maps)} linear maps a decode step, {threads} threads; "
              f"machine read rate {rate:.1f} GB/s (best of summing float32 and bfloat16)"),
             "| kernel | MB a step | maps ms | GB/s | floor ms at the read rate | maps / floor |",
             "|---|---|---|---|---|---|"]
    for name, (ms, nbytes) in timed.items():
        floor = nbytes / rate / 1e6
        lines.append(f"| {name} | {nbytes / 1e6:.0f} | {ms:.1f} | {nbytes / ms / 1e6:.1f} | {floor:.1f} | "
                     f"{ms / floor:.2f}x |")
    return "\n".join(lines)


def parse_args(argv):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="qwen2.5-coder-0.5b", help=f"one of {', '.join(SHAPES)}")
    p.add_argument("--small", action="store_true", help="the shape scaled down (checks the command only)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    if args.shape not in SHAPES:
        p.error(f"--shape {args.shape!r}: not one of {', '.join(SHAPES)}")
    if args.threads < 1 or args.reps < 1:
        p.error("--threads and --reps take positive integers")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    shape = scaled(args.shape) if args.small else SHAPES[args.shape]
    print(measure(shape, args.threads, args.reps, read_mb=16 if args.small else 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
