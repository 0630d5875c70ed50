"""The lean forward's linear maps (engine/forward/lean.py), and which matmul kernel each call takes.

A completion model multiplies a few rows at a time: 1 in a decode step, 2-31 in a verify pass,
hundreds in a prompt's prefill. Which kernel runs a given number of rows fastest depends on the
CPU and the model, so a model with a choice measures its candidates on the machine it loads on
(`choose_kernels`: whole forward passes on a scratch cache) for each class of row counts
(ROW_CLASSES) and keeps the faster; engine/forward/kernel_cache.py keeps the choice on disk.

The maps come in two layouts:
- packed (small models, whose products are too small to be bound by memory): float32 copies
  owned here, the maps that share an input concatenated, [in, out] for x @ W (ROWS); where every
  weight is a float16 value, also FBGEMM's float16 packing (FP16: exact, half the bytes, and at a
  few rows it packs nothing per call where BLAS packs the weight in every product);
- plain (real-sized models, bound by reading their weights): the model's own weights, one copy,
  the maps that share an input concatenated once with the modules pointed at slices of it. In 16
  bits torch hands products to oneDNN, which costs about twice torch's own matrix-vector kernel
  (GEMV) for one row. Up to 8 rows may also take rows16.c (NATIVE, engine/forward/rows16.py), which
  reads the weight once for all of them; each class of rows takes whichever measures fastest.
"""
from __future__ import annotations

import functools
import logging
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import rows16
from .quantize import group_bias, joined

log = logging.getLogger("specfill.engine")

ROWS, FP16, GEMV, NATIVE = "rows", "fp16", "gemv", "native"

# The classes of row counts that share a kernel: (name, fewest rows, widths measured, the
# kernels measured besides ROWS). Up to 8 rows have a choice to measure; a real-sized model's
# passes cost tens of milliseconds or more, so few rounds (one more warms up) over
# MEASURE_CONTEXT cached tokens.
FEW_ROWS, VERIFY_ROWS, MANY_ROWS = 2, 5, 9
ROW_CLASSES = (("one", 1, (1,), (GEMV, NATIVE)), ("few", FEW_ROWS, (2, 4), (GEMV, NATIVE)),
               ("verify", VERIFY_ROWS, (6, 8), (NATIVE,)), ("many", MANY_ROWS, (), ()))
MEASURE_CONTEXT = 128
REPS = {"one": 5, "few": 3, "verify": 3}
# Another kernel replaces ROWS only when it is this much faster: near a tie, keep the plain one.
MIN_GAIN = 0.97


@dataclass
class Kernels:
    """The kernel of each class of row counts (ROW_CLASSES) for one model's maps."""
    one: str = ROWS
    few: str = ROWS
    verify: str = ROWS
    many: str = ROWS               # 9 rows or more: wide verify passes, prefills
    note: str = "not measured"     # what choose_kernels timed

    def for_rows(self, n: int) -> str:
        return self.one if n < FEW_ROWS else self.few if n < VERIFY_ROWS else self.verify if n < MANY_ROWS \
            else self.many


@functools.cache
def fp16_available() -> bool:
    """Whether FBGEMM's float16 product (torch ops marked deprecated, kept by 2.13) runs here: in
    this torch build, on a CPU it supports (x86 with AVX2; elsewhere the ops raise)."""
    try:
        with warnings.catch_warnings():   # torch warns once a process that it deprecates them
            warnings.simplefilter("ignore")
            packed = torch.fbgemm_pack_gemm_matrix_fp16(torch.zeros(8, 8))
            torch.fbgemm_linear_fp16_weight_fp32_activation(torch.zeros(1, 8), packed, torch.zeros(8))
    except Exception as exc:   # absent, or a CPU it cannot run on: whatever it raises, not here
        log.debug("FBGEMM's float16 kernel is not available: %s", exc)
        return False
    return True


def fp16_exact(weight: torch.Tensor) -> bool:
    """Whether every value of a float32 CPU weight is a float16 value (its float16 copy is exact)."""
    return weight.dtype == torch.float32 and weight.device.type == "cpu" \
        and torch.equal(weight.detach().half().float(), weight.detach())


def weight_bytes(modules) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in modules)


class Linear:
    """One or more linear maps of the same input, their outputs concatenated.

    Packed: one matmul on an [in, out] copy of the weights, concatenated; FP16 on a float16 copy
    packed for FBGEMM, made from the maps' own weights (before any `scale_inputs`, whose scale it
    applies to the input instead) where they are float16 values. Plain: the model's own weights
    (`fuse_in_place`); ROWS or GEMV. The model's Kernels (shared by all its maps) say which
    kernel a call of n rows takes."""

    def __init__(self, modules: list[torch.nn.Linear], packed: bool, kernels: Kernels):
        self.kernels = kernels
        self.bias = group_bias([m.bias for m in modules], [m.weight.shape[0] for m in modules])
        self.packed = packed
        self.weight_fp16 = None       # FBGEMM's float16 copy, once FP16 is chosen (`pack_fp16`)
        self.fp16_source = None       # the weight it is made from: float16 values, unscaled
        self.bias_fp16 = None         # FBGEMM's product takes a bias: the maps' own, or zeros
        self.input_scale = None       # `scale_inputs`' scale, which FP16 applies to its input
        if packed:
            self.weight = torch.cat([m.weight for m in modules]) if len(modules) > 1 else modules[0].weight
            self.weight_t = self.weight.t().contiguous()
            if fp16_exact(self.weight):
                self.fp16_source = self.weight.detach()
        else:
            self.weight = fuse_in_place(modules)
            self.weight_t = self.weight.t()

    def scale_inputs(self, scale: torch.Tensor) -> None:
        """Multiply the map's input features by `scale` inside its packed weights (W diag(scale)),
        so the caller need not scale its input. Packed maps only: their weights are copies."""
        assert self.packed
        self.input_scale = scale.detach()
        self.weight = self.weight * scale
        self.weight_t = self.weight.t().contiguous()

    def pack_fp16(self) -> None:
        """FBGEMM's float16 copy of the unscaled weight (half the weight's size); its source goes."""
        if self.fp16_source is None:
            raise ValueError("the fp16 kernel needs weights that are float16 values (fp16_exact), "
                             "packed before use_kernels drops their source")
        if not fp16_available():
            raise ValueError("the fp16 kernel does not run here (FBGEMM needs x86 with AVX2)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.weight_fp16 = torch.fbgemm_pack_gemm_matrix_fp16(self.fp16_source)
        self.bias_fp16 = (self.bias if self.bias is not None else self.weight.new_zeros(self.weight.shape[0])).detach()
        self.fp16_source = None

    def _fp16(self, h: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            h = h * self.input_scale
        return torch.fbgemm_linear_fp16_weight_fp32_activation(h, self.weight_fp16, self.bias_fp16)

    @staticmethod
    def extra_bytes(modules: list[torch.nn.Linear]) -> int:
        """Memory of the packed copies (FBGEMM's float16 one, when chosen, adds half of it)."""
        return weight_bytes(modules) * (2 if len(modules) > 1 else 1)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        kernel = self.kernels.for_rows(h.shape[0])
        if kernel == GEMV:
            return gemv(h, self.weight, self.bias)
        if kernel == NATIVE:
            return rows16.product(h, self.weight, self.bias)
        if kernel == FP16:
            return self._fp16(h)
        return torch.mm(h, self.weight_t) if self.bias is None else torch.addmm(self.bias, h, self.weight_t)

    def add_to(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x + self(h), one addmm where the kernel is ROWS and there is no bias."""
        if self.kernels.for_rows(h.shape[0]) != ROWS:
            return self(h).add_(x)
        return torch.addmm(x if self.bias is None else x + self.bias, h, self.weight_t)


def fuse_in_place(modules: list[torch.nn.Linear]) -> torch.Tensor:
    """The weights of `modules` as one [sum of outs, in] tensor, the modules' own weights made
    slices of it (the same values, so the model computes as before; no second copy stays). Maps
    fused before, or read side by side (engine/load/checkpoint.py), are read where they lie."""
    weights = [m.weight.detach() for m in modules]
    fused = joined(weights)
    if len(weights) == 1 or fused.untyped_storage().data_ptr() == weights[0].untyped_storage().data_ptr():
        return fused
    start = 0
    for m, w in zip(modules, weights):
        m.weight = torch.nn.Parameter(fused[start:start + w.shape[0]], requires_grad=m.weight.requires_grad)
        start += w.shape[0]
    return fused


def gemv(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear through torch's own matrix-vector kernel: torch hands 16-bit products to oneDNN
    while oneDNN is enabled, so it is switched off around the call (process-wide: the engine runs
    its forwards on one thread)."""
    enabled = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        return F.linear(h, weight, bias)
    finally:
        torch._C._set_mkldnn_enabled(enabled)


def fp16_ready(lean) -> bool:
    """Whether every packed map of `lean` can take FP16 (its weights are float16 values)."""
    return lean.packed and all(m.fp16_source is not None or m.weight_fp16 is not None for m in lean.linears())


def native_ready(lean) -> bool:
    """Whether NATIVE runs every map of `lean` here (engine/forward/rows16.py: compiled, 16-bit weights)."""
    return all(rows16.available(m.weight) for m in lean.linears())


def native_runs(lean, kernels: Kernels) -> bool:
    """Whether these kernels can run `lean` here as far as NATIVE goes: unused, or native_ready."""
    return NATIVE not in {getattr(kernels, name) for name, *_ in ROW_CLASSES} or native_ready(lean)


def use_kernels(lean, kernels: Kernels) -> None:
    """Give `lean` these kernels, packing FBGEMM's copies where a class uses FP16 and dropping
    them where none does."""
    if not native_runs(lean, kernels):
        raise ValueError("the native kernel does not run here (engine/forward/rows16.py: x86-64 Linux, a C compiler, "
                         "16-bit weights)")
    fp16 = FP16 in {getattr(kernels, name) for name, *_ in ROW_CLASSES}
    for linear in lean.linears():
        if fp16 and linear.weight_fp16 is None:
            linear.pack_fp16()
        elif not fp16:
            linear.weight_fp16 = None
        linear.fp16_source = None     # packed or not wanted: the unscaled copy need not stay
    for name, *_ in ROW_CLASSES:
        setattr(lean.kernels, name, getattr(kernels, name))
    lean.kernels.note = kernels.note


def fp16_kernels(lean) -> Kernels:
    """A packed model's kernels: FP16 for every class where its weights are float16 values and
    FBGEMM runs here (it beat ROWS at every class of row counts on every shape measured, the
    shipped pair's prefill by 1.04-1.2x), else ROWS."""
    if fp16_ready(lean) and fp16_available():
        return Kernels(FP16, FP16, FP16, FP16, "fp16: every weight is a float16 value")
    return Kernels(note="rows: one kernel here")


def measures_kernels(lean) -> bool:
    """Whether `lean` has kernels to choose between by measuring: plain 16-bit weights on a CPU."""
    param = lean.linears()[0].weight
    return not lean.packed and param.device.type == "cpu" and param.dtype in (torch.bfloat16, torch.float16)


def choose_kernels(lean, reps: int | None = None) -> Kernels:
    """Time `lean`'s forward passes on this machine with ROWS and each other kernel of a class
    of row counts (ROW_CLASSES: its widths after MEASURE_CONTEXT cached tokens, fewer where the
    model has fewer positions; kernels interleaved, the best of REPS rounds, or `reps`: other work
    only slows a pass, so each kernel's fastest pass is its least disturbed) and keep the fastest
    (ROWS unless another wins by MIN_GAIN). NATIVE is measured where it runs."""
    kernels = lean.kernels
    param = lean.linears()[0].weight
    cfg = lean.model.config
    positions = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1 << 30
    context = min(MEASURE_CONTEXT, positions // 2)
    vocab = lean.model.get_input_embeddings().weight.shape[0]
    kv = lean.new_cache(lean.compute_dtype, param.device)
    native = native_ready(lean)
    notes = []
    with torch.inference_mode():
        lean(torch.arange(context, device=param.device) * 53 % vocab, kv, 1)
        for name, _, widths, others in ROW_CLASSES:
            widths = [w for w in widths if context + w <= positions]
            candidates = [ROWS, *(k for k in others if k != NATIVE or native)]
            setattr(kernels, name, ROWS)
            if not widths or len(candidates) == 1:
                continue
            ids = torch.arange(context, context + max(widths), device=param.device) * 53 % vocab   # any ids do
            times = {k: [[] for _ in widths] for k in candidates}
            for rep in range((reps or REPS[name]) + 1):    # rep 0 warms up
                for i, w in enumerate(widths):
                    for k in candidates if rep % 2 else candidates[::-1]:
                        setattr(kernels, name, k)
                        kv.length = context
                        t0 = time.perf_counter()
                        lean(ids[:w], kv, w)
                        if rep:
                            times[k][i].append(time.perf_counter() - t0)
            ms = {k: 1000 * sum(min(t) for t in per_width) for k, per_width in times.items()}
            fastest = min(candidates[1:], key=ms.get)
            best = fastest if ms[fastest] < MIN_GAIN * ms[ROWS] else ROWS
            setattr(kernels, name, best)
            notes.append(f"{name} {best} (widths {'/'.join(map(str, widths))}: "
                         + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()) + ")")
    kernels.note = "; ".join(notes) if notes else "measured: only one kernel here"
    log.info("%s matmul kernels: %s", type(lean.model).__name__, kernels.note)
    return kernels
