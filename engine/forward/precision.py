"""Which precision a model computes in, and why (docs/design.md, "Precision").

`dtype: auto` keeps a checkpoint's own 16-bit precision where that is fast: on a GPU, and on a CPU
for a model past SMALL_MODEL_BYTES whose 16-bit type the CPU computes natively (decoding reads
every weight once a token: half the bytes is about half the time). A small model stays float32
(its products are too small to be bound by memory), and so does a float32 checkpoint.
`choose_dtype` returns the choice and one line saying why.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from .cpu import native_16bit

# Past this many bytes of float32 weights a model is "real-sized": its decode step is bound by
# reading the weights, and 16-bit weights pay. The shipped target is 16 MB in float32.
SMALL_MODEL_BYTES = 256 * 2**20


def real_sized(parameters: int) -> bool:
    """Whether a model of this many weights is real-sized (its decode step bound by memory)."""
    return 4 * parameters > SMALL_MODEL_BYTES


_SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_CONFIG_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class Precision:
    dtype: torch.dtype
    reason: str          # one line: why this dtype (logged at load)


def cpu_runs_natively(dtype: torch.dtype) -> bool:
    """Whether this CPU has instructions that compute with `dtype` (not only convert it)."""
    return dtype == torch.float32 or str(dtype).removeprefix("torch.") in native_16bit()


def checkpoint_dtype(path: str | Path, config=None) -> torch.dtype | None:
    """The dtype a checkpoint's weights are stored in: config.json's `dtype` (`torch_dtype` in
    older files), else the first tensor of its safetensors; None where neither says."""
    stored = None
    if config is not None:
        stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(stored, torch.dtype):
            return stored if stored in _CONFIG_DTYPES.values() else None
    if stored is None and Path(path, "config.json").is_file():
        raw = json.loads(Path(path, "config.json").read_text())
        stored = raw.get("dtype") or raw.get("torch_dtype")
    if isinstance(stored, str) and stored in _CONFIG_DTYPES:
        return _CONFIG_DTYPES[stored]
    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return None
    with open(files[0], "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    for name, info in header.items():
        if name != "__metadata__":
            return _SAFETENSORS_DTYPES.get(info.get("dtype"))
    return None


def choose_dtype(requested: str, device: torch.device, stored: torch.dtype | None,
                 float32_bytes: int | None, native=cpu_runs_natively) -> Precision:
    """The dtype a model computes in. `requested` is the setting (auto, float32, bfloat16,
    float16); `stored` the checkpoint's dtype; `float32_bytes` its weights' size in float32;
    `native(dtype)` whether this CPU computes in dtype."""
    if requested != "auto":
        dtype = getattr(torch, requested)
        note = ""
        if device.type == "cpu" and not native(dtype):
            note = f" (this CPU has no {requested} instructions: it converts every product, expect it slow)"
        return Precision(dtype, f"{requested}, as set{note}")
    if device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return Precision(dtype, f"{_name(dtype)}: the GPU's fast precision")
    if device.type == "mps":
        return Precision(torch.float16, "float16: the GPU's fast precision")
    stored_name = _name(stored) if stored is not None else "an unknown dtype"
    if stored not in (torch.bfloat16, torch.float16):
        return Precision(torch.float32, f"float32: the checkpoint is stored in {stored_name}")
    if float32_bytes is not None and float32_bytes <= SMALL_MODEL_BYTES:
        return Precision(torch.float32, f"float32: a small model ({float32_bytes / 2**20:.0f} MB in float32) "
                                        "is faster in float32 on a CPU")
    if not native(stored):
        return Precision(torch.float32, f"float32: the checkpoint is {stored_name} but this CPU has no "
                                        f"{stored_name} instructions, so {stored_name} would run slowly")
    return Precision(stored, f"{stored_name}: the checkpoint's own precision, which this CPU computes natively")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
