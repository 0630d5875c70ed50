"""The evaluation set (bench/eval) is what its manifest says, small, and apart from everything
the shipped pair was trained or tuned on: no file of it is in the training corpus (this
interpreter's standard library and site-packages, as training/corpus.py reads them, whose
files the datastore's answers were written on too) or in the tuning set (bench/files), whole
or as a near-copy."""
import hashlib
import importlib.metadata
import os
from pathlib import Path

import pytest

from bench.eval import EVAL_FILES, HERE, TUNING_FILES, file_set, read_manifest
from training.corpus import NEAR_DUP_JACCARD, _walk_python_files, normalised_lines, source_roots

MAX_BYTES = 300_000
PERMISSIVE = {"MIT", "BSD-3-Clause", "BSD-2-Clause", "Apache-2.0", "ISC"}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def eval_sources() -> list[Path]:
    return sorted(EVAL_FILES.rglob("*.py"))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def test_the_manifest_names_every_file_with_its_hash_and_license():
    entries = read_manifest()
    assert {(HERE / e.path) for e in entries if e.path.startswith("files/")} == set(eval_sources())
    for e in entries:
        assert sha256(HERE / e.path) == e.sha256, e.path
        assert e.license in PERMISSIVE and (HERE / "licenses" / f"{e.package}.txt").is_file(), e
    assert len({e.package for e in entries}) >= 4
    assert sum(p.stat().st_size for p in eval_sources()) <= MAX_BYTES


def test_the_named_file_sets():
    assert file_set("eval") == EVAL_FILES and file_set("tuning") == TUNING_FILES
    assert file_set("some/folder") == Path("some/folder")


def corpus_candidates() -> list[str]:
    """Every file training/corpus.py may take into the training corpus on this machine."""
    found = []
    for _, root in source_roots():
        if os.path.isdir(root):
            found += _walk_python_files(os.path.realpath(root))
    return found


def test_no_file_is_in_the_training_corpus_or_the_tuning_set():
    packages = {e.package for e in read_manifest()}
    for name in packages:   # not installed: the corpus cannot hold the package itself
        with pytest.raises(importlib.metadata.PackageNotFoundError):
            importlib.metadata.distribution(name)
    evals = {p: p.read_bytes() for p in eval_sources()}
    lines = {p: normalised_lines(data.decode()) for p, data in evals.items()}
    hashes = {hashlib.sha256(data).hexdigest() for data in evals.values()}
    sizes = {len(data) for data in evals.values()}
    names = {Path(e.member).name for e in read_manifest()}     # as each file is named in its package
    candidates = corpus_candidates()
    assert len(candidates) > 100     # the standard library at least: the check looked somewhere
    for path in candidates:
        parts = Path(path).parts
        assert not packages & set(parts[:-1]), f"{path}: a copy of an evaluation package in the corpus"
        size = os.path.getsize(path)
        if size in sizes:        # the same content has the same size: hash only those
            with open(path, "rb") as fh:
                assert hashlib.sha256(fh.read()).hexdigest() not in hashes, f"{path} is an evaluation file"
        if Path(path).name in names:   # a vendored copy keeps its name: compare the code lines
            with open(path, encoding="utf-8", errors="replace") as fh:
                theirs = normalised_lines(fh.read())
            for p, mine in lines.items():
                assert jaccard(mine, theirs) < NEAR_DUP_JACCARD, (p, path)
    for tuned in TUNING_FILES.glob("*.py"):
        theirs = normalised_lines(tuned.read_text())
        for p, mine in lines.items():
            assert tuned.read_bytes() != evals[p] and jaccard(mine, theirs) < NEAR_DUP_JACCARD, (p, tuned)
