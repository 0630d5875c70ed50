"""What this CPU computes natively, read without torch (`specfill --version` prints it)."""
from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux reports them (empty where /proc/cpuinfo is absent)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def native_16bit() -> tuple[str, ...]:
    """The 16-bit float types this CPU has instructions to compute with (not only convert):
    bfloat16 with AVX512-BF16 or AMX on x86, BF16 on Arm (Apple M2 and later report no flags);
    float16 with F16C on x86, on any Arm64."""
    flags = cpu_flags()
    arm = platform.machine().lower() in ("arm64", "aarch64")
    native = []
    if {"avx512_bf16", "amx_bf16", "bf16"} & flags or (not flags and arm and platform.system() == "Darwin"):
        native.append("bfloat16")
    if arm or "f16c" in flags:
        native.append("float16")
    return tuple(native)


def system_line() -> str:
    native = native_16bit()
    return "CPU 16-bit: " + (", ".join(native) + " natively" if native
                             else "none natively (16-bit checkpoints run in float32)")
