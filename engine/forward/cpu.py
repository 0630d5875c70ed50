"""What this CPU computes natively, read without torch (`specfill --version` prints it)."""
from __future__ import annotations

import functools
import os
import platform
import shutil
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


def c_compiler() -> str | None:
    """The C compiler engine/forward/rows16.c is built with: $CC, else cc or gcc on the PATH."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def rows16_unsupported() -> str | None:
    """Why engine/forward/rows16.c cannot be built and run here, or None where it can."""
    if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return f"built for Linux on x86-64 only ({platform.system()} {platform.machine()})"
    if not {"avx2", "fma", "f16c"} <= cpu_flags():
        return "the CPU lacks AVX2, FMA or F16C"
    if c_compiler() is None:
        return "no C compiler (cc, gcc or $CC)"
    return None


def system_line() -> str:
    native = native_16bit()
    why_not = rows16_unsupported()
    build = "AVX-512 BF16" if {"avx512f", "avx512bw", "avx512_bf16"} <= cpu_flags() else "AVX2"
    rows = f"{build}, compiled on first use with {c_compiler()}" if why_not is None else f"none ({why_not})"
    return "CPU 16-bit: " + (", ".join(native) + " natively" if native
                             else "none natively (16-bit checkpoints run in float32)") + f"; 16-bit rows kernel: {rows}"
