"""Loading a causal LM and its tokenizer by hub id, local directory or "default"."""
from __future__ import annotations

import logging
import os
import re
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from .checkpoint import checkpoint_numel, lite_config, load_checkpoint, weight_files
from ..forward.forwards import model_max_positions
from ..forward.lean import lean_unsupported
from ..forward.precision import checkpoint_dtype, choose_dtype
from ..forward.quantize import QuantizeError
from .tokenizer import fast_tokenizer
from ..settings import DEVICE_PATTERN, DEVICES, DTYPES
from ..vocab import TokenVocab
from .vocab_tables import build_vocab
from .weight_cache import load_quantized

log = logging.getLogger("specfill.engine")

DEFAULT_PAIR_DIR = Path(__file__).parent.parent / "default_pair"


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message is one line naming the model and the cause."""


@dataclass
class LoadedModel:
    name: str
    model: torch.nn.Module
    tokenizer: object
    vocab: TokenVocab
    device: torch.device
    precision: str = ""     # the dtype it computes in and why (engine/forward/precision.py)
    parameters: int = 0     # values in its weights (0: not counted)

    @property
    def max_positions(self) -> int | None:
        return model_max_positions(self.model)


def resolve_name(name: str, role: str) -> str:
    """'default' -> the shipped model for this role (target or draft)."""
    if name == "default":
        path = DEFAULT_PAIR_DIR / role
        if not (path / "config.json").exists():
            raise ModelLoadError(f"default {role}: the built-in model is missing at {path} "
                                 "(train it with `python -m training.train`)")
        return str(path)
    return name


def pick_device(device: str) -> torch.device:
    """`auto`, `cpu`, `cuda`, `cuda:N` (one GPU of several) or `mps`."""
    if not re.fullmatch(DEVICE_PATTERN, device):
        raise ModelLoadError(f"device {device!r}: not one of {', '.join(DEVICES)} or cuda:N")
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    picked = torch.device(device)
    if picked.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device {device!r}: CUDA is not available on this machine")
        if picked.index is not None and picked.index >= torch.cuda.device_count():
            raise ModelLoadError(f"device {device!r}: this machine has "
                                 f"{torch.cuda.device_count()} CUDA device(s)")
    return picked


def check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r}: not one of {', '.join(DTYPES)}")


def own_memory(model: torch.nn.Module) -> None:
    """Give a CPU model's weights memory of their own. Loaded as stored, they are views of the
    checkpoint's memory-mapped file: every page read stays counted as the process's own while
    any weight of the file is alive, so a weight replaced later (fused, quantized) would go on
    weighing. Copied, the file's mapping goes with the last of its weights."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            tensor.data = tensor.data.clone()


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return (text[:300] + "...") if len(text) > 300 else text or type(e).__name__


HUB_PROBE_TIMEOUT_S = 3.0   # one connection attempt; the hub client's own retries take ~30 s


def hub_reachable(endpoint: str) -> str | None:
    """None when a TCP connection to the hub's host opens, else why it does not."""
    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=HUB_PROBE_TIMEOUT_S).close()
    except OSError as e:
        return _one_line(e)
    return None


def hub_files_only(name: str, role: str) -> bool:
    """For a hub id: True (load offline) when its config is in the local cache; False (may
    download) when it is not but the hub answers. Otherwise fail at once with one line, instead
    of the hub client's offline retries."""
    from huggingface_hub import constants, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return True
    where = f"not in the local Hugging Face cache ({constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        raise ModelLoadError(f"{role} model {name!r}: {where} and HF_HUB_OFFLINE is set")
    unreachable = hub_reachable(constants.ENDPOINT)
    if unreachable:
        raise ModelLoadError(f"{role} model {name!r}: {where} and {constants.ENDPOINT} "
                             f"cannot be reached ({unreachable})")
    return False


def load_model(name: str, role: str = "target", device: str = "auto", dtype: str = "auto",
               trust_remote_code: bool = False, device_map: str | None = None,
               lean_only: bool = False, quantize: str = "none") -> LoadedModel:
    """Load a causal LM + tokenizer. Local directories load offline; a missing model, a model
    that is not a causal LM, or a missing tokenizer raises ModelLoadError. With `lean_only` (the
    engine, which runs the lean forward), a checkpoint of a family the lean forward computes
    loads its weights alone (engine/load/checkpoint.py: no transformers model class, whose import
    costs seconds), on other threads while the tokenizer loads, and with `quantize` on a CPU its
    linear maps quantized as they are read, or read quantized from the cache
    (engine/load/weight_cache.py); otherwise, and for training, a transformers model."""
    path = resolve_name(name, role)
    looks_like_path = os.path.isabs(path) or path.startswith((".", "~")) or path.count("/") > 1
    if looks_like_path and not os.path.isdir(path):  # hub ids are "name" or "org/name"
        raise ModelLoadError(f"{role} model {name!r}: no such directory")
    dev = pick_device(device)
    check_dtype(dtype)
    local = os.path.isdir(path) or hub_files_only(path, role)
    kw = dict(trust_remote_code=trust_remote_code, local_files_only=local)
    folder = local_folder(path) if local else None
    lean_checkpoint = lean_only and folder is not None and not device_map and not trust_remote_code
    # a lean checkpoint's config and tokenizer are read without transformers (seconds of imports)
    config = lite_config(folder) if lean_checkpoint and weight_files(folder) and \
        os.path.isfile(os.path.join(folder, "tokenizer.json")) else None
    model = weights = vocab = parameters = None
    if config is not None:
        parameters = checkpoint_numel(folder)
        precision = choose_dtype(dtype, dev, checkpoint_dtype(folder, config), 4 * parameters)
        quantized = quantize if dev.type == "cpu" else "none"
        with ThreadPoolExecutor(1) as pool:
            weights = pool.submit(_checkpoint_model, folder, config, precision.dtype, dev, quantized, name, role)
            try:
                tokenizer = _fast_tokenizer(folder, name, role)
                vocab = build_vocab(tokenizer)
            finally:
                model = weights.result()
        if model is None:    # a feature the lean forward lacks: transformers runs it
            config, _ = _transformers_config_and_tokenizer(path, kw, name, role, trust_remote_code, tokenizer=False)
    else:
        config, tokenizer = _transformers_config_and_tokenizer(path, kw, name, role, trust_remote_code)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError(f"{role} model {name!r}: needs a fast (tokenizers) tokenizer")
    if model is None:
        stored = checkpoint_dtype(folder or path, config)
        model, precision = _transformers_model(path, kw, config, name, role, dev, dtype, stored, device_map)
        parameters = sum(p.numel() for p in model.parameters())
    model.eval()
    model.requires_grad_(False)
    log.info("loaded %s model %s on %s in %s", role, name, dev, precision.reason)
    return LoadedModel(name=name, model=model, tokenizer=tokenizer, vocab=vocab or build_vocab(tokenizer),
                       device=next(model.parameters()).device, precision=precision.reason,
                       parameters=parameters)


def _checkpoint_model(folder, config, dtype, dev, quantize, name, role):
    """A lean family's checkpoint as its weights alone (quantized where asked), or None where
    the lean forward cannot run it."""
    try:
        if quantize != "none":
            return load_quantized(folder, config, dtype, quantize)
        model = load_checkpoint(folder, config, dtype, dev)
    except QuantizeError as e:
        raise ModelLoadError(f"{role} model {name!r}: {e}") from None
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{role} model {name!r}: weights could not be loaded ({_one_line(e)})") from None
    return model if lean_unsupported(model) is None else None


def _fast_tokenizer(folder: str, name: str, role: str):
    """The folder's tokenizer.json read by the `tokenizers` library (engine/load/tokenizer.py), or None."""
    try:
        return fast_tokenizer(folder)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{role} model {name!r}: tokenizer missing or unreadable ({_one_line(e)})") from None


def _transformers_config_and_tokenizer(path, kw, name, role, trust_remote_code, tokenizer=True):
    """The config (a causal LM's, checked) and the tokenizer through transformers' Auto classes."""
    from transformers import AutoConfig, AutoTokenizer
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr carries our own one-line messages and logs
    try:
        config = AutoConfig.from_pretrained(path, **kw)
    except Exception as e:  # noqa: BLE001 - every cause becomes one clear line
        raise ModelLoadError(f"{role} model {name!r}: not found or unreadable ({_one_line(e)})") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not trust_remote_code:
        raise ModelLoadError(f"{role} model {name!r}: {config.model_type!r} is not a causal language model")
    if not tokenizer:
        return config, None
    try:
        return config, AutoTokenizer.from_pretrained(path, **kw)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{role} model {name!r}: tokenizer missing or unreadable ({_one_line(e)})") from None


def _transformers_model(path, kw, config, name, role, dev, dtype, stored, device_map):
    """The checkpoint as a transformers model, and the precision it runs in."""
    from transformers import AutoModelForCausalLM

    # `auto` on a CPU decides from the weights: load them as stored, then convert if needed
    decide_later = dtype == "auto" and dev.type == "cpu"
    if decide_later:
        load_dtype = stored if stored is not None else torch.float32
    else:
        load_dtype = choose_dtype(dtype, dev, stored, None).dtype
    try:
        if device_map:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=load_dtype, device_map=device_map, **kw)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=load_dtype, **kw).to(dev)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(f"{role} model {name!r}: weights could not be loaded ({_one_line(e)})") from None
    float32_bytes = 4 * sum(p.numel() for p in model.parameters())
    precision = choose_dtype(dtype, dev, stored, float32_bytes)
    if decide_later and precision.dtype != load_dtype:
        model = model.to(precision.dtype)
    elif dev.type == "cpu":
        own_memory(model)
    return model, precision


def local_folder(path: str) -> str | None:
    """The folder holding a model's files: the directory itself, or a hub id's snapshot in the
    local Hugging Face cache (None where its config is not cached)."""
    if os.path.isdir(path):
        return path
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(path, "config.json")
    return os.path.dirname(config) if isinstance(config, str) else None
