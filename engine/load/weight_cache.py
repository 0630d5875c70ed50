"""A checkpoint's quantized weights, made once and kept on disk (docs/design.md, "Quantized loads").

The first load reads the checkpoint's tensors two at a time and quantizes each map's weight as it
is read (so its 16-bit weights are never all in memory), then writes the rows, the other tensors
and the embedding tables to weights/<hash of the path>-<quantize>.safetensors in specfill's cache
folder ($SPECFILL_WEIGHT_CACHE names another, or `off`); later loads read that file, mapping the
tables. The file is used only when the key in its metadata matches (`cache_key`); another key, or a
file unreadable, truncated or missing a tensor, is rebuilt. Writes go through a temporary file.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from .checkpoint import (_DTYPES, TABLES, CheckpointModel, fusion_groups, header, map_tensor, read_into,
                         read_tensors, return_free_memory, weight_files, write_tensors)
from ..files import cache_root, write_whole
from ..forward.lean import lean_unsupported
from ..forward.quantize import INT4_GROUP, LAYOUT, QUANTIZED, QuantizedMap, QuantizeError, group_bias

log = logging.getLogger("specfill.engine")

PARTS = ("values", "scales")    # what quantize_rows makes of a weight


def cache_path(path: str, quantize: str) -> Path | None:
    chosen = os.environ.get("SPECFILL_WEIGHT_CACHE")
    if chosen == "off":
        return None
    folder = Path(chosen) if chosen else cache_root() / "weights"
    name = hashlib.sha1(os.path.realpath(path).encode()).hexdigest()[:16]
    return folder / f"{name}-{quantize}.safetensors"


def cache_key(path: str, quantize: str, dtype: torch.dtype | None) -> str:
    files = [(os.path.basename(f), s.st_size, s.st_mtime_ns) for f in weight_files(path) for s in [os.stat(f)]]
    return json.dumps({"checkpoint": os.path.realpath(path), "files": files, "quantize": quantize,
                       "layout": LAYOUT, "int4_group": INT4_GROUP, "dtype": str(dtype), "torch": torch.__version__})


def load_quantized(path: str, config, dtype: torch.dtype | None, quantize: str) -> CheckpointModel:
    """The checkpoint at `path` with its linear maps quantized to `quantize` (each module of a
    map keeps a QuantizedMap; its own weight is empty), other tensors in `dtype`."""
    family = config.model_type
    sources = {}      # name -> (file, where its data begins, its header entry)
    for file in weight_files(path):
        found, start, _ = header(file)
        sources.update((name, (file, start, info)) for name, info in found.items())
    quantized = [n for n, (_, _, info) in sources.items()
                 if n.endswith(".weight") and len(info["shape"]) == 2 and n not in TABLES[family]]
    if "lm_head.weight" not in sources:      # the output head is the embedding: quantized apart
        quantized.append("lm_head.weight")
    where, key = cache_path(path, quantize), cache_key(path, quantize, dtype)
    tensors = _read_cache(where, key, sources, quantized, family) if where is not None else None
    fresh = tensors is None
    if fresh:
        tensors = _quantize(sources, quantized, family, dtype, quantize)
    # a map's rows: in memory after quantizing, else read from the file as its map is made
    rows = {name: {part: tensors.pop(f"{name}#{part}") for part in PARTS} for name in quantized} if fresh else None
    for name in quantized:
        if name in sources:
            tensors[name] = torch.empty(0, dtype=dtype or _DTYPES[sources[name][2]["dtype"]])
    model = CheckpointModel(config, tensors)
    reason = lean_unsupported(model)
    if reason is not None:
        raise QuantizeError(f"quantize {quantize!r}: needs the lean forward, which this checkpoint does not have ({reason})")
    if fresh and where is not None:
        _write(where, key, rows, tensors, model, family)
    _make_maps(model, rows, where, quantized, family, quantize)
    model.specfill_quantized = quantize
    return model.eval()


def _quantize(sources: dict, quantized: list[str], family: str, dtype, quantize: str) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, read two at a time: a quantized map's weight as its rows
    (`name#values`, `name#scales`), the others in `dtype`."""
    make = QUANTIZED[quantize].quantize_rows
    head_of_table = "lm_head.weight" in quantized and "lm_head.weight" not in sources

    def one(name: str) -> dict[str, torch.Tensor]:
        file, start, info = sources[name]
        t = torch.empty(info["shape"], dtype=_DTYPES[info["dtype"]])
        read_into(file, start, info, t)
        if name in quantized:
            out = {f"{name}#{part}": v for part, v in make(t).items()}
        else:
            out = {name: t.to(dtype) if dtype is not None and t.is_floating_point() else t}
            if head_of_table and name == TABLES[family][0]:
                out.update((f"lm_head.weight#{part}", v) for part, v in make(t).items())
        del t
        return_free_memory()
        return out

    tensors = {}
    with ThreadPoolExecutor(2) as pool:
        for done in pool.map(one, sources):
            tensors.update(done)
    return tensors


def _read_cache(where: Path, key: str, sources: dict, quantized: list[str], family: str) -> dict | None:
    """The cached tensors (tables mapped, the rest read), or None where the file is missing,
    of another key (logged) or unusable (one warning)."""
    if not where.is_file():
        log.info("quantizing the checkpoint's weights once; they are kept in %s", where)
        return None
    try:
        found, start, meta = header(str(where))
        if meta.get("key") != key:
            log.info("the checkpoint, its quantization or torch changed since %s was written: quantizing again", where)
            return None
        for name, (_, _, info) in sources.items():
            want = f"{name}#values" if name in quantized else name
            if want not in found or found[want]["shape"][0] != info["shape"][0]:
                raise ValueError(f"{want} is missing or of another size")
        if "lm_head.weight" in quantized and "lm_head.weight#values" not in found:
            raise ValueError("the output head is missing")
        if start + max((i["data_offsets"][1] for i in found.values()), default=0) != where.stat().st_size:
            raise ValueError("its size is not its header's")
        tables = {n: map_tensor(str(where), start, found[n]) for n in TABLES[family] if n in found}
        small = {n for n in found if n not in tables and "#" not in n}
        tensors = read_tensors(str(where), None, family, names=small)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        log.warning("quantized weights in %s unusable (%s): quantizing the checkpoint again", where, exc)
        return None
    log.info("quantized weights read from %s", where)
    return {**tensors, **tables}


def _write(where: Path, key: str, rows: dict, tensors: dict, model: CheckpointModel, family: str) -> None:
    """Keep the quantized checkpoint (best effort: a folder that cannot be written is only
    logged), then read the model's tables from the file written, mapped."""
    everything = {f"{name}#{part}": t for name, parts in rows.items() for part, t in parts.items()}
    everything.update((n, t) for n, t in tensors.items() if n not in rows)
    try:
        write_whole(where, lambda tmp: write_tensors(tmp, everything, {"key": key}))
    except OSError as exc:
        log.warning("quantized weights not kept in %s: %s", where, exc)
        return
    found, start, _ = header(str(where))
    with torch.no_grad():
        for name in TABLES[family]:
            if name in found:
                model.get_parameter(name).data = map_tensor(str(where), start, found[name])


def _make_maps(model: CheckpointModel, rows: dict | None, where: Path | None, quantized: list[str], family: str,
               quantize: str) -> None:
    """Each map's product (maps the forward fuses as one), kept on its modules. Two threads each
    take a map's rows (from `rows`, or read from the file side by side), pack them and free them."""
    singles = set(quantized)
    groups = fusion_groups(quantized, family)
    for group in groups:
        singles -= set(group)
    groups += [[name] for name in sorted(singles)]
    make = QUANTIZED[quantize].from_rows
    found, start, _ = header(str(where)) if rows is None else (None, None, None)

    def one(group: list[str]) -> None:
        modules = [model.get_submodule(name.removesuffix(".weight")) for name in group]
        if rows is not None:
            parts = [rows.pop(name) for name in group]
        else:     # each part of the group's maps read into one buffer: packing it copies nothing more
            parts = [{} for _ in group]
            for part in PARTS:
                infos = [found[f"{name}#{part}"] for name in group]
                buffer = torch.empty([sum(i["shape"][0] for i in infos), *infos[0]["shape"][1:]],
                                     dtype=_DTYPES[infos[0]["dtype"]])
                for into, t, info in zip(parts, buffer.split([i["shape"][0] for i in infos]), infos):
                    read_into(str(where), start, info, t)
                    into[part] = t
        bias = group_bias([m.bias for m in modules], [p["values"].shape[0] for p in parts])
        made = QuantizedMap(make(parts, bias), len(modules))
        for m in modules:
            m.quantized = made
        del parts
        return_free_memory()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, groups))
