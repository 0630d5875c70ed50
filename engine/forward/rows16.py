"""A few rows times a 16-bit weight, compiled here: engine/forward/rows16.c, the lean forward's third
kernel for one to a few rows (matmul.NATIVE) beside torch's own.

torch runs one row of a bfloat16 model through its matrix-vector kernel, and two or more through
oneDNN, which costs about twice as much at two rows. rows16.c reads the weight once for up to 8
rows, so a verify pass of a few tokens costs about what a decode step costs, and it adds each
row's sum in an order that does not depend on the other rows: a verify pass computes what single
steps would, bit for bit. Whether it runs faster than torch's kernels on a machine is measured
with them (matmul.choose_kernels).

The file is compiled with the system's C compiler (`cc`, or $CC) on first use, on Linux x86-64,
into specfill's cache (native/rows16-<hash>.so; the hash covers the source and the compiler), and
loaded with ctypes. Where there is no compiler, or the CPU lacks AVX2 with FMA and F16C, `load`
returns None, says why once in the log, and torch's kernels run as before (`specfill --version`
says which holds here).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import subprocess
from pathlib import Path

import torch

from .cpu import c_compiler, cpu_flags, rows16_unsupported
from ..files import cache_root, write_whole

log = logging.getLogger("specfill.engine")

SOURCE = Path(__file__).with_name("rows16.c")
KINDS = {torch.bfloat16: 0, torch.float16: 1}     # rows16.c's BF16, FP16
AVX512_BF16, AVX2 = 1, 2                           # rows16.c's isa argument


@functools.cache
def load() -> ctypes.CDLL | None:
    """rows16.c compiled and loaded, or None (the reason logged once)."""
    why = rows16_unsupported()
    if why is None:
        try:
            return _build_and_load()
        except (OSError, subprocess.SubprocessError) as e:
            why = " ".join(str(e).split())[:300]
    log.info("16-bit rows kernel not used: %s", why)
    return None


def _build_and_load() -> ctypes.CDLL:
    compiler = c_compiler()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    source = SOURCE.read_bytes()
    digest = hashlib.sha1(source + compiler.encode() + version.encode()).hexdigest()[:16]
    library = cache_root() / "native" / f"rows16-{digest}.so"
    if not library.exists():
        def compile_to(path: str) -> None:
            done = subprocess.run([compiler, "-O3", "-fopenmp", "-shared", "-fPIC", str(SOURCE), "-o", path],
                                  capture_output=True, text=True, timeout=300, check=False)
            if done.returncode:
                raise OSError(f"{compiler} failed on {SOURCE.name}: {(done.stderr or done.stdout).strip()[-300:]}")
        write_whole(library, compile_to)
        log.info("compiled %s into %s", SOURCE.name, library)
    lib = ctypes.CDLL(str(library))
    lib.rows16.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int, ctypes.c_long, ctypes.c_long, ctypes.c_int,
                                                  ctypes.c_int, ctypes.c_int]
    lib.rows16.restype = ctypes.c_int
    return lib


def isa_for(dtype: torch.dtype) -> int | None:
    """The build of rows16.c's loop for weights of `dtype` on this CPU, or None where none runs."""
    if dtype not in KINDS or load() is None:
        return None
    flags = cpu_flags()
    if dtype == torch.bfloat16 and {"avx512f", "avx512bw", "avx512_bf16"} <= flags:
        return AVX512_BF16
    return AVX2


def available(weight: torch.Tensor) -> bool:
    """Whether `product` runs with this weight here."""
    return weight.device.type == "cpu" and weight.is_contiguous() and isa_for(weight.dtype) is not None


def product(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """h [n, in] times weight [out, in] transposed, plus bias [out]: [n, out], in weight's dtype
    (each output's float32 sum rounded once). The weight must be `available`."""
    h = h.to(weight.dtype).contiguous()
    if bias is not None:
        bias = bias.to(weight.dtype).contiguous()
    n, width = h.shape
    outs = weight.shape[0]
    if width != weight.shape[1] or (bias is not None and bias.shape != (outs,)):
        raise ValueError(f"rows16: cannot multiply {tuple(h.shape)} by {tuple(weight.shape)}")
    out = torch.empty(n, outs, dtype=weight.dtype)
    if n and load().rows16(weight.data_ptr(), h.data_ptr(), None if bias is None else bias.data_ptr(),
                           out.data_ptr(), n, outs, width, KINDS[weight.dtype], isa_for(weight.dtype),
                           torch.get_num_threads()):
        raise ValueError(f"rows16: cannot multiply {tuple(h.shape)} by {tuple(weight.shape)}")
    return out
