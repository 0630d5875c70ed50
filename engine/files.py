"""Files in specfill's cache (kernel choices, quantized weights, tokenizers, datastore orders,
the compiled 16-bit kernel), written whole or not at all."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    """specfill's cache folder: $SPECFILL_CACHE, else ~/.cache/specfill."""
    return Path(os.environ.get("SPECFILL_CACHE") or Path.home() / ".cache" / "specfill")


def write_whole(path: Path, write: Callable[[str], None]) -> None:
    """Make `path` by `write(a temporary file's path)` in its folder, then rename that file into
    place: a reader never sees half a file, and a failed write leaves nothing behind. OSError where
    the folder cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
