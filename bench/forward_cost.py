"""What one forward pass costs: the shipped pair's decode (1 token) and verify (w tokens) steps
through a KV session, for the lean forward of this tree, the lean forward of an older commit
and the transformers forward, side by side in one run.

    python -m bench.forward_cost                      # 1 torch thread, context 300
    python -m bench.forward_cost --baseline HEAD~3 --context 500 --reps 9
    python -m bench.forward_cost --compile            # also: torch.compile start-up and gain
    python -m bench.forward_cost --baseline HEAD --prefill 64,150,250,400   # a prompt's prefill

Each step starts from the same cached context (the session crops back to it), so every
figure is one call at a fixed context length. Configurations are interleaved rep by rep, so
machine load hits them alike; figures are medians over reps. The bandwidth floor is the
model's weight bytes over this machine's measured read bandwidth (one thread). With --prefill,
the compute floor is the prefill's arithmetic (prefill_flops) at the best rate of a large fp32
matrix product on the same threads: where a prefill stands against what the CPU can do.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
import types
from pathlib import Path

import torch

from bench.replay import cpu_name
from bench.round_cost import commit_of, engine_at, module_of
from engine.forward.forwards import TransformersForward
from engine.kv import KVSession
from engine.forward.lean import LeanForward, make_lean
from engine.forward.matmul import ROWS, Kernels
from engine.load.models import load_model

# A lean forward with more tensor operations per step: the default reference.
DEFAULT_BASELINE = "951e2c1"
WIDTHS = (1, 2, 4, 6, 8, 12, 16)


def lean_module_at(ref: str, into: Path) -> types.ModuleType:
    """engine/forward/lean.py as it was at git `ref`, with the rest of that commit's engine package
    (lean.py imports its matmul kernels from it), imported under its own name, so the old and
    new forwards run in one process."""
    sha = commit_of(ref)
    if sha is None:
        raise SystemExit(f"--baseline {ref!r} names no commit here")
    return module_of(engine_at(sha, into), "forward.lean", "lean")


def read_bandwidth_gbs() -> float:
    """Best of a few passes summing 256 MB (beyond any cache)."""
    a = torch.ones(64 * 2**20)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    return a.numel() * 4 / best / 1e9


def matmul_peak_gflops() -> float:
    """Best of a few float32 products of two 1024 x 1024 matrices, on torch's threads: about
    what this CPU's fp32 arithmetic does at best (a prefill's bound, where a step's is bandwidth)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = float("inf")
    for _ in range(8):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * 1024 ** 3 / best / 1e9


def prefill_flops(model, n: int) -> tuple[float, float]:
    """Floating-point operations of a prefill of n tokens after one cached token, logits for the
    last: (the linear maps: every one but the output head on n rows, the head on one; causal
    attention: scores and weighted values, 4 * heads * head_dim a key a layer, over 2..n+1 keys)."""
    head = model.get_output_embeddings()
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    cfg = model.config
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    keys = sum(range(2, n + 2))
    return 2.0 * n * linear + 2.0 * head.weight.numel(), 4.0 * heads * head_dim * keys * cfg.num_hidden_layers


def weight_bytes(model) -> int:
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}   # tied once
    return sum(seen.values())


def forwards(model, baseline):
    """name -> a factory of fresh forwards for `model`; this tree's kernel note; what kernels the
    baseline took (its lean forward measures its own, where it has them)."""
    param = next(model.parameters())
    out = {"transformers": lambda: TransformersForward(model, param.device)}
    took = None
    if baseline is not None:
        old = baseline.make_lean(model)
        out["lean (baseline)"] = lambda: baseline.LeanForward(old, param.dtype, param.device)
        took = kernels_taken(getattr(old, "kernels", None))
    new = make_lean(model)
    out["lean (this tree)"] = lambda: LeanForward(new, param.dtype, param.device)
    return out, new.kernels.note, took


def kernels_taken(kernels) -> str:
    """'one rows, few rows, ...' from a lean model's Kernels (fixed kernels before they existed)."""
    if kernels is None:
        return "fixed (that commit measures none)"
    names = [f.name for f in dataclasses.fields(kernels) if f.name != "note"]
    return ", ".join(f"{n} {getattr(kernels, n)}" for n in names)


def time_steps(session: KVSession, context: list[int], width: int, calls: int) -> float:
    """ms per call that appends `width` tokens to `context` (cropped back before each)."""
    ids = context + [7] * width
    t0 = time.perf_counter()
    for _ in range(calls):
        session.advance(ids, n_logits=width)
    return (time.perf_counter() - t0) / calls * 1000


def time_prefill(session: KVSession, n: int, calls: int) -> float:
    """ms per prefill of n prompt tokens after one cached token (the server keeps its cache; the
    first token stays, so no call allocates one), logits for the last."""
    ids = [(i * 53) % 1000 + 3 for i in range(n + 1)]
    session.advance(ids[:1])
    t0 = time.perf_counter()
    for _ in range(calls):
        session.crop(1)
        session.advance(ids)
    return (time.perf_counter() - t0) / calls * 1000


def measure(model, factories, sizes, reps: int, time_one) -> dict:
    """(forward name, size) -> median ms of `time_one(session, size)` (a step's width, or a
    prompt's length), forwards interleaved rep by rep. Each session is warmed up first by one
    call at the largest size (cache allocated, tables built)."""
    sessions = {name: KVSession(model, 4096, forward=make()) for name, make in factories.items()}
    for s in sessions.values():
        time_one(s, max(sizes))
    samples = {(name, n): [] for name in sessions for n in sizes}
    for _ in range(reps):
        for n in sizes:
            for name, s in sessions.items():
                samples[(name, n)].append(time_one(s, n))
    return {key: statistics.median(v) for key, v in samples.items()}


def exactness(model, factories, context: list[int]) -> float:
    """Largest |logit difference| between each forward and the transformers one (width 8)."""
    ids = context + list(range(20, 28))
    outs = {}
    for name, make in factories.items():
        s = KVSession(model, 4096, forward=make())
        s.advance(context)
        outs[name] = s.advance(ids, n_logits=8)
    ref = outs["transformers"]
    return max(float((o - ref).abs().max()) for o in outs.values())


class CompiledLean:
    """A lean model whose forward runs under torch.compile. Shapes are left to dynamo's automatic
    dynamic mode (a length that changes is made symbolic on the second compile): with
    dynamic=True, torch 2.13's inductor fails on the Llama forward (a symbolic multiply with
    three arguments). The forward calls small helpers once per layer, so the recompile limit is
    raised above the default 8 (else dynamo gives up and runs them eagerly)."""

    def __init__(self, lean):
        import torch._dynamo
        torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)
        self.new_cache = lean.new_cache
        self.forward = torch.compile(lean.__call__)

    def __call__(self, ids, kv, n_logits):
        return self.forward(ids, kv, n_logits)


def compile_cost(model, context: list[int], calls: int,
                 kernels: Kernels | None = None) -> tuple[float, float, float, float]:
    """(start-up seconds, eager ms with the kernels measured here (or `kernels`), eager ms with
    plain float32 products, compiled ms) for decode steps of the lean forward with torch.compile
    around it (dynamic shapes: the cache length changes every step). The compiled copy takes the
    plain products (ROWS): dynamo cannot trace FBGEMM's float16 kernel or oneDNN's packed one (no
    fake tensor implementation), so the eager step with the same products is shown beside it."""
    lean = make_lean(model, kernels=kernels)
    param = next(model.parameters())
    eager = KVSession(model, 4096, forward=LeanForward(lean, param.dtype, param.device))
    plain = make_lean(model, kernels=Kernels(one=ROWS, few=ROWS, verify=ROWS, many=ROWS, note="plain"))
    eager_plain = KVSession(model, 4096, forward=LeanForward(plain, param.dtype, param.device))
    compiled_fwd = LeanForward(plain, param.dtype, param.device)
    compiled_fwd.lean = CompiledLean(plain)
    compiled = KVSession(model, 4096, forward=compiled_fwd)
    eager.advance(context)
    eager_plain.advance(context)
    t0 = time.perf_counter()
    compiled.advance(context)
    for w in (1, 2):   # first calls of both shapes pay the compile
        compiled.advance(context + [7] * w, n_logits=w)
    startup = time.perf_counter() - t0
    e = min(time_steps(eager, context, 1, calls) for _ in range(5))
    p = min(time_steps(eager_plain, context, 1, calls) for _ in range(5))
    c = min(time_steps(compiled, context, 1, calls) for _ in range(5))
    return startup, e, p, c


def prompt_lengths(value: str) -> list[int]:
    """--prefill's value: positive integers, comma-separated."""
    try:
        lengths = [int(n) for n in value.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {value!r}")
    return lengths


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default=DEFAULT_BASELINE,
                    help="git ref whose engine/forward/lean.py runs alongside ('none' to skip)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--context", type=int, default=300, help="cached tokens before each step")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--calls", type=int, default=40, help="calls per timed block")
    ap.add_argument("--compile", action="store_true", help="also measure torch.compile")
    ap.add_argument("--prefill", type=prompt_lengths, default=[],
                    help="comma-separated prompt lengths: time a prompt's prefill instead of steps "
                         "(calls // 10 prefills per timed block)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    work = tempfile.TemporaryDirectory(prefix="forward_cost_")   # the baseline's engine package
    baseline = None if args.baseline == "none" else lean_module_at(args.baseline, Path(work.name))
    gbs = read_bandwidth_gbs()
    peak = matmul_peak_gflops() if args.prefill else None
    print(f"{cpu_name()}, torch {torch.__version__}, {args.threads} thread(s), context {args.context} tokens, "
          f"read bandwidth {gbs:.1f} GB/s" + (f", fp32 matmul peak {peak:.0f} GFLOP/s" if peak else "")
          + f", baseline lean.py at {args.baseline}")
    for role, widths in (("target", WIDTHS), ("draft", (1, 2, 6))):
        m = load_model("default", role, device="cpu").model
        context = [(i * 37) % 1000 + 3 for i in range(args.context)]
        factories, kernels, baseline_took = forwards(m, baseline)
        if args.prefill:
            widths = args.prefill
        with torch.inference_mode():
            err = exactness(m, factories, context)
            if args.prefill:   # a tenth as many calls: a prefill costs tens of steps
                prefills = max(1, args.calls // 10)
                ms = measure(m, factories, widths, args.reps, lambda s, n: time_prefill(s, n, prefills))
            else:
                ms = measure(m, factories, widths, args.reps, lambda s, w: time_steps(s, context, w, args.calls))
        nbytes = weight_bytes(m)
        print(f"\n{role}: {type(m).__name__}, {sum(p.numel() for p in m.parameters()) / 1e6:.2f}M "
              f"parameters, {nbytes / 1e6:.1f} MB, bandwidth floor {nbytes / gbs / 1e6:.2f} ms/step; "
              f"max |logit - transformers| {err:.1e}; this tree's matmul kernels: {kernels}"
              + (f"; the baseline's: {baseline_took}" if baseline_took else ""))
        names = list(factories)
        label = "prompt" if args.prefill else "width"
        floor = "   compute floor (floor / this tree's lean)" if args.prefill else ""
        print(f"{label:>6} " + " ".join(f"{n:>18}" for n in names) + "   (ms per call)" + floor)
        for w in widths:
            row = f"{w:>6} " + " ".join(f"{ms[(n, w)]:>18.3f}" for n in names)
            if args.prefill:   # the arithmetic at the matmul peak: how close a prefill is to its bound
                least = sum(prefill_flops(m, w)) / peak / 1e6
                row += f"   {least:>8.3f} ({least / ms[('lean (this tree)', w)]:.0%})"
            print(row)
        if baseline is not None:
            gain = [ms[("lean (baseline)", w)] / ms[("lean (this tree)", w)] for w in widths]
            tag = "n" if args.prefill else "w"
            print("this tree vs baseline: " + ", ".join(f"{tag}{w} {g:.2f}x" for w, g in zip(widths, gain)))
        if args.compile:
            with torch.inference_mode():
                startup, e, p, c = compile_cost(m, context, args.calls)
            print(f"torch.compile: start-up {startup:.1f} s, decode {e:.3f} ms eager (kernels measured here), "
                  f"{p:.3f} ms eager with float32 products, {c:.3f} ms compiled (float32 products)")


if __name__ == "__main__":
    main()
