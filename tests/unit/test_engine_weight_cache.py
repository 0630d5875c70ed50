"""A checkpoint loaded quantized (engine/load/weight_cache.py): its maps quantized as they are read
compute what the same model quantized by its lean forward computes, bit for bit; the result is
kept on disk and read on later loads; a changed checkpoint, or a broken file, is quantized again;
the embedding is read from that file mapped, not copied."""
import logging
import os

import pytest
import torch
from transformers import AutoTokenizer

from engine.load import weight_cache
from engine.load.checkpoint import CheckpointModel
from engine.kv import KVPool
from engine.forward.lean import LeanForward, make_lean
from engine.load.models import load_model
from engine.forward.quantize import int8_engine
from tests.tiny_models import tiny_model, tiny_pair_dirs

CPU = torch.device("cpu")
IDS = list(range(3, 70))
MODES = ["int4"] + (["int8"] if int8_engine() is not None else [])


def _save(path, kind: str, seed: int = 0, tied: bool = False) -> str:
    model = tiny_model(kind, 700, seed)
    if tied:
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.get_input_embeddings().weight
    model.to(torch.bfloat16).save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_pair_dirs()[0]).save_pretrained(path)
    return str(path)


def _logits(model, quantize: str) -> torch.Tensor:
    lean = KVPool(model, 1, 256, quantize=quantize).lean_model
    with torch.no_grad():
        return LeanForward(lean, lean.compute_dtype, CPU)(IDS, len(IDS)).float()


def _quantized_by_the_forward(path: str, quantize: str) -> torch.Tensor:
    """The logits of the checkpoint loaded in 16 bits and quantized by its lean forward."""
    model = load_model(path, lean_only=True, dtype="bfloat16").model
    lean = make_lean(model, quantize=quantize)
    with torch.no_grad():
        return LeanForward(lean, lean.compute_dtype, CPU)(IDS, len(IDS)).float()


def _load(path: str, quantize: str, caplog) -> tuple[torch.Tensor, str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="specfill.engine"):
        loaded = load_model(path, lean_only=True, dtype="bfloat16", quantize=quantize)
    assert isinstance(loaded.model, CheckpointModel) and loaded.model.specfill_quantized == quantize
    return _logits(loaded.model, quantize), caplog.text


def _mapped_from(t: torch.Tensor) -> str | None:
    """The file whose mapping holds t's first byte, from /proc/self/maps."""
    address = t.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            span, *rest = line.split()
            low, high = (int(x, 16) for x in span.split("-"))
            if low <= address < high:
                return rest[4] if len(rest) > 4 else None
    return None


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "weights"
    monkeypatch.setenv("SPECFILL_WEIGHT_CACHE", str(folder))
    return folder


@pytest.mark.parametrize("quantize", MODES)
@pytest.mark.parametrize("kind, tied", [("llama", False), ("qwen2", True), ("bigcode", True)])
def test_a_checkpoint_quantized_while_read_and_then_from_the_cache_computes_what_its_forward_quantizes(
        tmp_path, cache, caplog, kind, tied, quantize):
    path = _save(tmp_path / "model", kind, tied=tied)
    want = _quantized_by_the_forward(path, quantize)
    first, log = _load(path, quantize, caplog)
    assert "quantizing the checkpoint's weights once" in log
    kept = weight_cache.cache_path(path, quantize)
    assert kept.is_file() and kept.parent == cache
    written = kept.stat().st_mtime_ns
    second, log = _load(path, quantize, caplog)
    assert f"quantized weights read from {kept}" in log and kept.stat().st_mtime_ns == written
    assert torch.equal(first, want) and torch.equal(second, want)


def test_the_embedding_is_read_mapped_from_the_cache(tmp_path, cache, caplog):
    path = _save(tmp_path / "model", "qwen2", tied=True)
    for _ in range(2):     # written, then read
        model = load_model(path, lean_only=True, dtype="bfloat16", quantize="int4").model
        assert _mapped_from(model.model.embed_tokens.weight) == str(weight_cache.cache_path(path, "int4"))
        # the layers' own weights are gone: their products hold them
        assert model.model.layers[0].mlp.up_proj.weight.numel() == 0


@pytest.mark.parametrize("quantize", MODES)
def test_a_changed_checkpoint_is_quantized_again(tmp_path, cache, caplog, quantize):
    path = _save(tmp_path / "model", "llama", seed=0)
    old, _ = _load(path, quantize, caplog)
    _save(tmp_path / "model", "llama", seed=1)          # new weights in the same files
    want = _quantized_by_the_forward(path, quantize)
    got, log = _load(path, quantize, caplog)
    assert "changed since" in log and torch.equal(got, want) and not torch.equal(got, old)
    again, log = _load(path, quantize, caplog)
    assert "read from" in log and torch.equal(again, want)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "emptied"])
def test_a_broken_cache_file_is_rebuilt_with_one_warning(tmp_path, cache, caplog, damage):
    path = _save(tmp_path / "model", "qwen2", tied=True)
    want, _ = _load(path, "int4", caplog)
    kept = weight_cache.cache_path(path, "int4")
    data = kept.read_bytes()
    kept.write_bytes({"truncated": data[:len(data) - 100], "garbage": b"\x07" * 64 + data[64:],
                      "emptied": b""}[damage])
    got, log = _load(path, "int4", caplog)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and f"quantized weights in {kept} unusable" in warnings[0].getMessage()
    assert "\n" not in warnings[0].getMessage()
    assert torch.equal(got, want) and kept.stat().st_size == len(data)
    _, log = _load(path, "int4", caplog)
    assert "read from" in log


def test_the_cache_can_be_turned_off(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SPECFILL_WEIGHT_CACHE", "off")
    path = _save(tmp_path / "model", "llama")
    got, _ = _load(path, "int4", caplog)
    assert weight_cache.cache_path(path, "int4") is None and torch.equal(got, _quantized_by_the_forward(path, "int4"))
    assert not any(name.endswith(".safetensors") for name in os.listdir(tmp_path))
