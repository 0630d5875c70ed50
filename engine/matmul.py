"""The lean forward's linear maps (engine/lean.py), and which matmul kernel each call takes.

A completion model multiplies a few rows at a time: 1 in a decode step, 2-31 in a verify pass,
hundreds in a prompt's prefill. Which kernel runs a given number of rows fastest depends on the
CPU, its libraries and the model's size, by far more than the noise, so a model measures its
candidates on the machine it loads on (`choose_kernels`: whole forward passes on a scratch cache)
for each class of row counts (ROW_CLASSES) and keeps the fastest. The choice is kept on disk
(engine/kernel_cache.py), so each machine measures a model shape once. Every kernel computes
the same products; they differ in rounding only (allclose).

The maps come in two layouts:
- packed (small models, whose products are too small to be bound by memory): copies of the
  weights owned here, the maps that share an input concatenated, in the layouts the kernels read:
  [in, out] for x @ W (ROWS; OPENBLAS reads it through numpy where torch runs on one thread),
  [out, in] for (W @ x^T)^T (TRANSPOSED), oneDNN's own packed layout (ONEDNN), and FBGEMM's
  float16 packing for weights that are float16 values (FP16: half the bytes a pass reads, and at
  2-8 rows it packs nothing per call where the BLAS libraries pack the weight in every product);
- plain (real-sized models, bound by reading their weights): the model's own weights, one copy.
  Maps that share an input are concatenated once and the model's modules are pointed at slices
  of the result, so one product serves them and no memory is added. In 16 bits, one row goes
  through torch's own matrix-vector kernel (GEMV: it reads the weight once, with float32 sums)
  rather than oneDNN's matrix product, which torch picks for bfloat16 and which costs about
  twice as much for one row; several rows take whichever of the two measures faster.
"""
from __future__ import annotations

import functools
import logging
import statistics
import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger("specfill.engine")

ROWS, TRANSPOSED, ONEDNN, OPENBLAS, FP16, GEMV = "rows", "transposed", "onednn", "openblas", "fp16", "gemv"

# The classes of row counts that share a kernel: (name, fewest rows, widths measured).
FEW_ROWS, VERIFY_ROWS, PREFILL_ROWS = 2, 4, 32
ROW_CLASSES = (("one", 1, (1,)), ("few", FEW_ROWS, (2, 3)), ("verify", VERIFY_ROWS, (4, 6, 9, 12, 16)),
               ("prefill", PREFILL_ROWS, (48, 160)))
# The cached tokens before each measured pass, and the rounds over each class's widths (one more
# warms up). A VM's stolen time makes single passes vary 2x, and the one-token step (most of
# a completion's passes) is where kernels differ least: with 5 rounds its median chose the slower
# kernel in 2 of 8 trials of the measurement on a 2-core VM, with 30 in none. Cheap passes get
# many rounds; prefill passes cost tens of steps, so fewer: with 3 a suite's no-draft server
# kept ROWS for prefill by under MIN_GAIN while the three others took oneDNN 3-12 % ahead.
MEASURE_CONTEXT = 128
CLASS_REPS = {"one": 30, "few": 10, "verify": 5, "prefill": 5}
# Another kernel replaces ROWS only when it is this much faster: near a tie, keep the plain one.
MIN_GAIN = 0.97


@dataclass
class Kernels:
    """The kernel of each class of row counts (ROW_CLASSES) for one model's packed maps.
    Before measuring: the choice tuned on the Intel VM (what a CUDA device keeps too)."""
    one: str = ROWS
    few: str = ROWS
    verify: str = TRANSPOSED
    prefill: str = ROWS
    note: str = "not measured"     # what choose_kernels timed

    def for_rows(self, n: int) -> str:
        return self.one if n < FEW_ROWS else self.few if n < VERIFY_ROWS else self.verify if n < PREFILL_ROWS \
            else self.prefill


def _onednn_ops():
    """oneDNN's packed-weight linear and its weight packing (private torch ops, which inductor's
    CPU path uses), or None where this torch build does not have them."""
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        return torch.ops.mkldnn._linear_pointwise, torch.ops.mkldnn._reorder_linear_weight
    except Exception:   # a private op: whatever its absence raises, there is none
        return None


def _fp16_ops():
    """FBGEMM's float16-weight packing and its product with float32 inputs (torch ops that torch
    marks deprecated, kept by 2.13), or None where this torch build lacks them: then FP16 is
    no candidate and the other kernels run."""
    pack = getattr(torch, "fbgemm_pack_gemm_matrix_fp16", None)
    linear = getattr(torch, "fbgemm_linear_fp16_weight_fp32_activation", None)
    return None if pack is None or linear is None else (pack, linear)


@functools.cache
def fp16_available() -> bool:
    """Whether FBGEMM's float16 product runs here: the ops in this torch build, and a CPU FBGEMM
    supports (x86 with AVX2; elsewhere the ops raise)."""
    ops = _fp16_ops()
    if ops is None:
        return False
    try:
        with warnings.catch_warnings():   # torch warns once a process that it deprecates them
            warnings.simplefilter("ignore")
            ops[1](torch.zeros(1, 8), ops[0](torch.zeros(8, 8)), torch.zeros(8))
    except Exception as exc:   # whatever a deprecated op raises where it cannot run: not here
        log.debug("FBGEMM's float16 kernel is not available: %s", exc)
        return False
    return True


def fp16_exact(weight: torch.Tensor) -> bool:
    """Whether every value of a float32 CPU weight is a float16 value (its float16 copy is exact)."""
    return weight.dtype == torch.float32 and weight.device.type == "cpu" \
        and torch.equal(weight.detach().half().float(), weight.detach())


def _openblas_ready(param: torch.Tensor) -> bool:
    """Whether numpy's BLAS may stand in for torch's matmul: float32 on the CPU, torch on one
    thread, and numpy's BLAS found and held to one thread too. With more, its own thread pool
    would spin on the cores torch's pool and the editor need (engine/threads.py); with one it
    runs in the calling thread. The limit is process-wide and only set where torch uses one
    thread, so it takes nothing torch's settings gave."""
    if param.device.type != "cpu" or param.dtype != torch.float32 or torch.get_num_threads() != 1:
        return False
    try:
        import threadpoolctl
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")
        blas = [lib for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]
    except Exception as exc:   # a BLAS threadpoolctl cannot drive: then not a candidate
        log.debug("numpy's BLAS is not used: %s", exc)
        return False
    return bool(blas) and all(lib["num_threads"] == 1 for lib in blas)


def _numpy_view(weight: torch.Tensor) -> np.ndarray | None:
    """The OPENBLAS kernel's weight: a numpy view of the [in, out] copy (float32 CPU only)."""
    return weight.detach().numpy() if weight.device.type == "cpu" and weight.dtype == torch.float32 else None


def _openblas(h: torch.Tensor, weight: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.matmul((h.detach() if h.requires_grad else h).numpy(), weight))


def _fused_bias(modules) -> torch.Tensor | None:
    if all(m.bias is None for m in modules):
        return None
    return torch.cat([m.bias if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in modules])


def weight_bytes(modules) -> int:
    return sum(m.weight.numel() * m.weight.element_size() for m in modules)


class Linear:
    """One or more linear maps of the same input, their outputs concatenated.

    Packed (small models): one matmul on copies of the weights owned here, concatenated, in the
    layouts the kernels read: [out, in] (TRANSPOSED), [in, out] (ROWS, and OPENBLAS as a numpy
    view of it) and, once a measurement chose it, oneDNN's own (ONEDNN). The model's Kernels
    (shared by all its maps) say which one a call of n rows takes. A transposed result is
    returned as a view: the next matmul takes it transposed again, contiguous.
    FP16 reads a float16 copy packed for FBGEMM, made from the maps' own weights (before any
    `scale_inputs`, whose scale it applies to the input instead) where they are float16 values.
    Plain (real-sized models): the model's own weights, several maps concatenated once with
    the modules pointed at slices of the result (`fuse_in_place`: the same values, no copy
    kept); ROWS or GEMV by the number of rows."""

    def __init__(self, modules: list[torch.nn.Linear], packed: bool, kernels: Kernels):
        self.kernels = kernels
        self.bias = _fused_bias(modules)
        self.bias_column = None if self.bias is None else self.bias[:, None]
        self.packed = packed
        self.weight_onednn = None
        self.weight_fp16 = None       # FBGEMM's float16 copy, once FP16 is chosen (`pack_fp16`)
        self.fp16_source = None       # the weight it is made from: float16 values, unscaled
        self.bias_fp16 = None         # FBGEMM's product takes a bias: the maps' own, or zeros
        self.input_scale = None       # `scale_inputs`' scale, which FP16 applies to its input
        if packed:
            self.weight = torch.cat([m.weight for m in modules]) if len(modules) > 1 else modules[0].weight
            self.weight_t = self.weight.t().contiguous()
            self.weight_np = _numpy_view(self.weight_t)
            if fp16_exact(self.weight):
                self.fp16_source = self.weight.detach()
                self.bias_fp16 = self.bias.detach().float() if self.bias is not None \
                    else self.weight.new_zeros(self.weight.shape[0]).detach()
        else:
            self.weight = fuse_in_place(modules)
            self.weight_t = self.weight.t()

    def scale_inputs(self, scale: torch.Tensor) -> None:
        """Multiply the map's input features by `scale` inside its packed weights (W diag(scale)),
        so the caller need not scale its input. Packed maps only: their weights are copies
        owned here, never the model's."""
        assert self.packed
        self.input_scale = scale.detach()
        self.weight = self.weight * scale
        self.weight_t = self.weight.t().contiguous()
        self.weight_np = _numpy_view(self.weight_t)

    def pack_onednn(self) -> None:
        """oneDNN's copy of the packed weight (the weight's size again)."""
        with torch.no_grad():
            self.weight_onednn = _onednn_ops()[1](self.weight.detach().contiguous(), 16)

    def pack_fp16(self) -> None:
        """FBGEMM's float16 copy of the unscaled weight (half the weight's size); its source goes."""
        if self.fp16_source is None:
            raise ValueError("the fp16 kernel needs weights that are float16 values (fp16_exact), "
                             "packed before use_kernels drops their source")
        # (its probe also makes both ops' first calls, where torch warns once that it deprecates them)
        if not fp16_available():
            raise ValueError("the fp16 kernel does not run here (FBGEMM needs x86 with AVX2)")
        self.weight_fp16 = _fp16_ops()[0](self.fp16_source)
        self.fp16_source = None

    def _fp16(self, h: torch.Tensor) -> torch.Tensor:
        if self.input_scale is not None:
            h = h * self.input_scale
        return torch.fbgemm_linear_fp16_weight_fp32_activation(h, self.weight_fp16, self.bias_fp16)

    @staticmethod
    def extra_bytes(modules: list[torch.nn.Linear]) -> int:
        """Memory of the packed copies, before any kernel is chosen (not counted here: oneDNN's
        copy, when chosen, adds the weights' size once more; FBGEMM's float16 one half of it)."""
        return weight_bytes(modules) * (2 if len(modules) > 1 else 1)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        kernel = self.kernels.for_rows(h.shape[0])
        if kernel == GEMV:
            return gemv(h, self.weight, self.bias)
        if kernel == FP16:
            return self._fp16(h)
        if kernel == ONEDNN:
            return _onednn_linear(h, self.weight_onednn, self.bias)
        if kernel == OPENBLAS:
            out = _openblas(h, self.weight_np)
            return out if self.bias is None else out.add_(self.bias)
        if kernel == TRANSPOSED:
            if self.bias is None:
                return torch.mm(self.weight, h.t()).t()
            return torch.addmm(self.bias_column, self.weight, h.t()).t()
        return torch.mm(h, self.weight_t) if self.bias is None else torch.addmm(self.bias, h, self.weight_t)

    def add_to(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x + self(h), one addmm where there is no bias (single maps only)."""
        kernel = self.kernels.for_rows(h.shape[0])
        if kernel in (GEMV, FP16, ONEDNN, OPENBLAS):
            return self(h).add_(x)
        if self.bias is not None:
            x = x + self.bias
        if kernel == TRANSPOSED:
            return torch.addmm(x.t(), self.weight, h.t()).t()
        return torch.addmm(x, h, self.weight_t)


def fuse_in_place(modules: list[torch.nn.Linear]) -> torch.Tensor:
    """The weights of `modules` as one [sum of outs, in] tensor, the modules' own weights made
    slices of it (the same values, so the model computes as before; no second copy stays). Maps
    fused before (a second lean forward of the same model) are read where they lie."""
    weights = [m.weight.detach() for m in modules]
    if len(weights) == 1:
        return weights[0]
    first, rows = weights[0], sum(w.shape[0] for w in weights)
    offsets = [sum(w.numel() for w in weights[:i]) for i in range(len(weights))]
    if all(w.is_contiguous() and w.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
           and w.storage_offset() == first.storage_offset() + off for w, off in zip(weights, offsets)):
        return first.as_strided((rows, first.shape[1]), first.stride())
    fused = torch.cat(weights)
    for m, off, w in zip(modules, offsets, weights):
        m.weight = torch.nn.Parameter(fused[off // w.shape[1]:off // w.shape[1] + w.shape[0]],
                                      requires_grad=m.weight.requires_grad)
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


def _onednn_linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(h if h.is_contiguous() else h.contiguous(), weight, bias,
                                              "none", [], "")


def _probe_input(linear: Linear) -> torch.Tensor:
    """16 rows of input for a kernel's check against F.linear (the same every time)."""
    return torch.randn(16, linear.weight.shape[1], generator=torch.Generator().manual_seed(0),
                       dtype=linear.weight.dtype).to(linear.weight.device)


def _same_products(got: torch.Tensor, want: torch.Tensor) -> bool:
    return got.shape == want.shape and torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))


def _onednn_agrees(linear: Linear) -> bool:
    """Whether oneDNN's kernel gives this map's products (the torch build's op may differ)."""
    h = _probe_input(linear)
    with torch.no_grad():
        try:
            linear.pack_onednn()
            got = _onednn_linear(h, linear.weight_onednn, linear.bias)
        except Exception as exc:   # a private op may refuse in many ways: then not a candidate
            log.debug("oneDNN's linear is not used: %s", exc)
            linear.weight_onednn = None
            return False
        want = F.linear(h, linear.weight, linear.bias)
    return _same_products(got, want)


def _fp16_agrees(linear: Linear) -> bool:
    """Whether FBGEMM's float16 kernel gives this map's products (its weight must be float16
    values, and the op there and working on this CPU). The copy is made here, and dropped by
    use_kernels where FP16 is not chosen."""
    if linear.fp16_source is None or not fp16_available():
        return False
    h = _probe_input(linear)
    with torch.no_grad():
        try:
            want = F.linear(h * linear.input_scale if linear.input_scale is not None else h,
                            linear.fp16_source, linear.bias)
            linear.pack_fp16()
            got = linear._fp16(h)
        except Exception as exc:   # a deprecated op, and FBGEMM needs x86 with AVX2: whatever it raises, none
            log.debug("FBGEMM's float16 kernel is not used: %s", exc)
            return False
    return _same_products(got, want)


def fp16_ready(lean) -> bool:
    """Whether every packed map of `lean` can take FP16 (its weights are float16 values)."""
    return lean.packed and all(m.fp16_source is not None or m.weight_fp16 is not None for m in lean.linears())


def use_kernels(lean, kernels: Kernels) -> None:
    """Give `lean` these kernels, packing oneDNN's and FBGEMM's copies (packed maps) where a
    class uses them and dropping them where none does."""
    chosen = {getattr(kernels, name) for name, _, _ in ROW_CLASSES}
    for linear in lean.linears():
        if ONEDNN in chosen and linear.weight_onednn is None:
            linear.pack_onednn()
        elif ONEDNN not in chosen:
            linear.weight_onednn = None
        if FP16 in chosen and linear.weight_fp16 is None:
            linear.pack_fp16()
        elif FP16 not in chosen:
            linear.weight_fp16 = None
        linear.fp16_source = None     # packed or not wanted: the unscaled copy need not stay
    for name, _, _ in ROW_CLASSES:
        setattr(lean.kernels, name, getattr(kernels, name))
    lean.kernels.note = kernels.note


# A real-sized model's passes cost tens of milliseconds or more: fewer widths and rounds, and
# GEMV (one weight read per row) is a candidate for the classes of one or a few rows only.
PLAIN_WIDTHS = {"one": (1,), "few": (2, 3)}
PLAIN_REPS = {"one": 5, "few": 3}


def measures_kernels(lean) -> bool:
    """Whether `lean` has kernels to choose between on its device: packed maps, or plain
    16-bit weights (GEMV or oneDNN's product) on a CPU."""
    param = lean.linears()[0].weight
    return param.device.type == "cpu" and (lean.packed or param.dtype in (torch.bfloat16, torch.float16))


def _candidates(lean, name: str, onednn: bool, openblas: bool, fp16: bool) -> list[str]:
    if not lean.packed:
        return [ROWS, GEMV] if name in PLAIN_WIDTHS else [ROWS]
    return [ROWS] + ([TRANSPOSED] if name == "verify" else []) + ([ONEDNN] if onednn else []) \
        + ([OPENBLAS] if openblas else []) + ([FP16] if fp16 else [])


def choose_kernels(lean, reps: int | None = None) -> Kernels:
    """Time `lean`'s forward passes on this machine with each kernel for each class of row
    counts (ROW_CLASSES: its widths after MEASURE_CONTEXT cached tokens, fewer where the model
    has fewer positions; kernels interleaved, medians over CLASS_REPS rounds, or `reps` for
    every class) and keep the fastest of each (ROWS unless another wins by MIN_GAIN). Packed
    maps: oneDNN is a candidate for float32 weights where the torch build has its kernel and it
    gives the same products; numpy's BLAS for float32 weights on the CPU where torch runs on one
    thread (_openblas_ready); FBGEMM's float16 product where the weights are float16 values
    (FP16). Plain 16-bit maps: ROWS (oneDNN's product) and GEMV, for one or a few rows
    (PLAIN_WIDTHS, PLAIN_REPS).
    The shipped target measures in 1.4-1.9 s on a 2-core VM: engine/kernel_cache.py keeps the
    result, so a machine pays it once per model shape."""
    kernels = lean.kernels
    param = lean.linears()[0].weight
    cfg = lean.model.config
    positions = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 1 << 30
    context = min(MEASURE_CONTEXT, positions // 2)
    linears = lean.linears()
    packed = lean.packed
    onednn = packed and param.dtype == torch.float32 and _onednn_ops() is not None and all(map(_onednn_agrees, linears))
    openblas = packed and _openblas_ready(param)
    fp16 = packed and fp16_ready(lean) and all(map(_fp16_agrees, linears))
    vocab = lean.model.get_input_embeddings().weight.shape[0]
    kv = lean.new_cache(lean.compute_dtype, param.device)
    notes = []
    with torch.inference_mode():
        lean(torch.arange(context, device=param.device) * 53 % vocab, kv, 1)
        for name, _, widths in ROW_CLASSES:
            widths = [w for w in (widths if packed else PLAIN_WIDTHS.get(name, ())) if context + w <= positions]
            candidates = _candidates(lean, name, onednn, openblas, fp16)
            if not widths or len(candidates) == 1:
                setattr(kernels, name, ROWS)
                continue
            ids = torch.arange(context, context + max(widths), device=param.device) * 53 % vocab   # any ids do
            times = {k: [[] for _ in widths] for k in candidates}
            rounds = reps if reps is not None else (CLASS_REPS if packed else PLAIN_REPS)[name]
            for rep in range(rounds + 1):    # rep 0 warms up
                order = candidates[rep % len(candidates):] + candidates[:rep % len(candidates)]
                for i, w in enumerate(widths):
                    for k in order:
                        setattr(kernels, name, k)
                        kv.length = context
                        t0 = time.perf_counter()
                        lean(ids[:w], kv, w)
                        if rep:
                            times[k][i].append(time.perf_counter() - t0)
            ms = {k: 1000 * sum(statistics.median(t) for t in per_width) for k, per_width in times.items()}
            best = min(ms, key=ms.get)
            best = best if ms[best] < MIN_GAIN * ms[ROWS] else ROWS
            setattr(kernels, name, best)
            notes.append(f"{name} {best} (widths {'/'.join(map(str, widths))}: "
                         + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()) + ")")
    use_kernels(lean, kernels)   # drops oneDNN's and FBGEMM's copies where no class took them
    kernels.note = "; ".join(notes) if notes else "measured: only one kernel here"
    log.info("%s matmul kernels: %s", type(lean.model).__name__, kernels.note)
    return kernels
