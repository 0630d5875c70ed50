"""Matmul kernel choices kept on disk, so a machine measures each model shape once.

engine/forward/matmul.py's choose_kernels times whole forward passes (1-2 s for the shipped target,
more for a real-sized model). The choice depends on the machine (CPU model and features, torch
build) and the model's shapes, dtype and threads, so it is stored under a key made of those,
in kernels.json of specfill's cache folder: $SPECFILL_CACHE, else ~/.cache/specfill.
SPECFILL_KERNEL_CACHE names another file, or `off` (measure in every process). A file that is
missing, unreadable or of another layout is measured over; writes go through a temporary file,
so processes loading at once never read half a file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
from dataclasses import asdict, fields
from pathlib import Path

import torch

from .matmul import ROW_CLASSES, Kernels
from .cpu import cpu_flags
from ..files import cache_root, write_whole

log = logging.getLogger("specfill.engine")

LAYOUT = 5     # the file's layout: entries of another are measured again


def cache_file() -> Path | None:
    chosen = os.environ.get("SPECFILL_KERNEL_CACHE")
    if chosen:
        return None if chosen == "off" else Path(chosen)
    return cache_root() / "kernels.json"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """What a measurement depends on besides the model: CPU, its features, the torch build."""
    flags = hashlib.sha1(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:12]
    return f"{_cpu_name()} | {platform.machine()} | flags {flags} | torch {torch.__version__}"


def _key(shape: tuple) -> str:
    return hashlib.sha1(repr((LAYOUT, machine(), shape)).encode()).hexdigest()


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load(shape: tuple) -> Kernels | None:
    """The kernels stored for this model shape on this machine, or None."""
    path = cache_file()
    if path is None:
        return None
    entry = _read(path).get(_key(shape))
    names = [f.name for f in fields(Kernels)]
    if not isinstance(entry, dict) or set(entry) != set(names) or not all(isinstance(entry[n], str) for n in names):
        return None
    kernels = Kernels(**entry)
    log.info("matmul kernels from %s: %s", path, ", ".join(f"{n} {getattr(kernels, n)}" for n, *_ in ROW_CLASSES))
    return kernels


def store(shape: tuple, kernels: Kernels) -> None:
    """Keep this measurement (best effort: a cache that cannot be written is only logged)."""
    path = cache_file()
    if path is None:
        return
    try:
        data = _read(path)
        data[_key(shape)] = asdict(kernels)
        write_whole(path, lambda tmp: Path(tmp).write_text(json.dumps(data, indent=1)))
    except OSError as exc:
        log.warning("matmul kernels not kept in %s: %s", path, exc)
