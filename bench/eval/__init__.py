"""The evaluation set: real Python source that neither the shipped pair, its datastore nor any
tuning decision has seen, kept apart from `bench/files` (the tuning set).

Files of a few permissively licensed pure-Python packages from PyPI at pinned versions, none of
them installed where the pair was trained (its corpus is this interpreter's standard library and
site-packages: training/corpus.py), in one folder as the benchmarks' --files read it
(`files/<package>_<module>.py`), each package's license in `licenses/`. `MANIFEST.tsv` names, for
every stored file, its package, version, license, the wheel it comes from (with the wheel's
sha256), its path in the wheel, where it is stored and its own sha256; `python -m bench.eval.fetch` downloads the wheels again and checks or rewrites the files.
tests/unit/test_bench_eval_set.py checks the hashes and that no file is in the training corpus or
in the tuning set.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
MANIFEST = HERE / "MANIFEST.tsv"
EVAL_FILES = HERE / "files"            # the evaluation set's source files (a folder, as --files takes)
TUNING_FILES = HERE.parent / "files"   # bench/files: the set the shipped pair and its settings were tuned on
FILE_SETS = {"eval": EVAL_FILES, "tuning": TUNING_FILES}


@dataclass(frozen=True)
class Entry:
    package: str
    version: str
    license: str
    wheel_sha256: str
    member: str       # the file's path inside the wheel
    path: str         # where it is stored, relative to bench/eval
    sha256: str


def read_manifest(path: Path = MANIFEST) -> list[Entry]:
    with open(path, encoding="utf-8", newline="") as fh:
        return [Entry(**row) for row in csv.DictReader(fh, delimiter="\t")]


def file_set(name: str) -> Path:
    """A named set of source files (`eval`, `tuning`) or a folder given by path."""
    return FILE_SETS.get(name, Path(name))
