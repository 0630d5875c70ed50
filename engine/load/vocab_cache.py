"""A tokenizer folder's load kept in the user's cache: its tokenizer.json in a form the
`tokenizers` library parses faster, and the engine's vocabulary tables
(engine/load/vocab_tables.py).

Loading Qwen's tokenizer.json takes the `tokenizers` library 0.3-0.6 s, holding the GIL all along
(the weights' threads wait), and building its vocabulary tables 0.2-0.25 s more. Kept here, a load
reads one file: the tokenizer.json with its merges written as "a b" strings (the library's other
form of them, which it parses in two thirds of the time; used only where no merged piece holds a
space) and the tables as `marshal` writes them.

The file is `<cache>/vocab/<hash of the folder's path>.vocab` (`SPECFILL_VOCAB_CACHE` names another
folder, or `off`): a first line of JSON with the key, the payload's size and CRC-32, then the
payload. The key is the tokenizer files' real paths, sizes and modification times, this layout's
version, the `tokenizers` version and Python's; a file of another key is rebuilt (one info line),
one that is unreadable, truncated or corrupt is rebuilt with one warning. Writes go through a
temporary file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import marshal
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..files import write_whole

log = logging.getLogger("specfill.engine")

LAYOUT = 1      # what the payload holds and how: a change here makes every kept file stale
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass
class VocabTables:
    """What engine.load.vocab_tables.build_vocab computes from a tokenizer, as kept on disk."""
    token_bytes: list[bytes]
    special_ids: list[int]
    bytes_to_id: dict[bytes, int]
    byte_pieces: dict[int, int]
    max_token_len: int


@dataclass
class CachedTokenizer:
    tokenizer_json: str             # the folder's tokenizer.json, in the form that parses fastest
    tables: VocabTables


@dataclass
class KeptTokenizer:
    """A FastTokenizer's link to its kept load: the tables read (or None: build_vocab builds them
    and hands them to `keep`, which writes the file)."""
    folder: str
    key: str
    tables: VocabTables | None = None
    source: str | None = None       # tokenizer.json's text, until the file is written

    def keep(self, tables: VocabTables) -> None:
        self.tables = tables
        if self.source is not None:
            write(self.folder, self.key, CachedTokenizer(fast_form(self.source), tables))
            self.source = None


def cache_folder() -> Path | None:
    chosen = os.environ.get("SPECFILL_VOCAB_CACHE")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    return Path(os.environ.get("SPECFILL_CACHE") or Path.home() / ".cache" / "specfill") / "vocab"


def cache_key(folder: str) -> str:
    """The tokenizer files' identity (real path, size, modification time), the layout, and the
    versions of what reads the payload."""
    import tokenizers

    parts = [f"layout {LAYOUT}", f"tokenizers {tokenizers.__version__}",
             f"python {sys.version_info[0]}.{sys.version_info[1]} marshal {marshal.version}"]
    for name in TOKENIZER_FILES:
        path = os.path.realpath(os.path.join(folder, name))
        try:
            st = os.stat(path)
            parts.append(f"{path} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            parts.append(f"{path} absent")
    return "\n".join(parts)


def cache_path(folder: str) -> Path | None:
    where = cache_folder()
    if where is None:
        return None
    name = hashlib.sha256(os.path.realpath(folder).encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return where / f"{name}.vocab"


def read(folder: str) -> tuple[CachedTokenizer | None, str | None]:
    """The kept load of the tokenizer folder `folder` and its key; (None, key) where there is
    none or it is stale or unusable (logged); (None, None) where the cache is off."""
    where = cache_path(folder)
    if where is None:
        return None, None
    key = cache_key(folder)
    try:
        with open(where, "rb") as f:
            head = json.loads(f.readline())
            if head.get("key") != key:
                log.info("tokenizer files, layout or versions changed since %s was written: building it again", where)
                return None, key
            payload = f.read()
        if len(payload) != head["size"] or zlib.crc32(payload) != head["crc32"]:
            raise ValueError("its size or checksum is not its header's")
        data = marshal.loads(payload)
        return CachedTokenizer(data["tokenizer_json"], VocabTables(**data["tables"])), key
    except FileNotFoundError:
        return None, key
    except (OSError, ValueError, KeyError, TypeError, EOFError, AttributeError) as exc:
        log.warning("tokenizer cache %s unusable (%s): building it again", where, exc)
        return None, key


def write(folder: str, key: str, cached: CachedTokenizer) -> None:
    """Keep `cached` for the folder (best effort: a folder that cannot be written is logged)."""
    where = cache_path(folder)
    if where is None:
        return
    payload = marshal.dumps({"tokenizer_json": cached.tokenizer_json, "tables": dict(vars(cached.tables))})
    head = json.dumps({"key": key, "size": len(payload), "crc32": zlib.crc32(payload)}).encode() + b"\n"
    try:
        write_whole(where, lambda tmp: Path(tmp).write_bytes(head + payload))
    except OSError as exc:
        log.warning("tokenizer cache not kept in %s: %s", where, exc)


def fast_form(text: str) -> str:
    """tokenizer.json's text with a BPE model's merges as "a b" strings (where no merged piece
    holds a space, which that form could not tell apart) and no whitespace between tokens: the
    same tokenizer, parsed faster."""
    spec = json.loads(text)
    model = spec.get("model") or {}
    merges = model.get("merges")
    if model.get("type") == "BPE" and isinstance(merges, list) and merges and isinstance(merges[0], list):
        if all(len(m) == 2 and " " not in m[0] and " " not in m[1] for m in merges):
            model["merges"] = [f"{a} {b}" for a, b in merges]
    return json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
