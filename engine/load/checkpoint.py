"""A checkpoint's weights as the lean forward reads them, without transformers' model classes.

Importing transformers' modeling code costs seconds of a command line's start and memory, for
modules the engine never calls. So a local Llama, Qwen2 or GPTBigCode checkpoint loads here: its
config over each family's defaults, its safetensors weights into plain modules named as the
checkpoint names them, which the lean forward reads as it reads a transformers model. Anything
else loads through transformers (engine/load/models.py).
"""
from __future__ import annotations

import functools
import glob
import json
import os
import platform
from types import SimpleNamespace

import torch

# model_type -> the module holding the token embedding, as the checkpoint names it
LEAN_FAMILIES = {"llama": "model.embed_tokens", "qwen2": "model.embed_tokens", "gpt_bigcode": "transformer.wte"}


# Each family's config defaults for the fields the engine reads, as transformers' config classes
# set them (tests/unit/test_engine_checkpoint.py compares them with those classes).
DEFAULTS = {
    "llama": dict(hidden_act="silu", rms_norm_eps=1e-6, max_position_embeddings=2048, mlp_bias=False,
                  attention_bias=False, rope_theta=10000.0, tie_word_embeddings=False),
    "qwen2": dict(hidden_act="silu", rms_norm_eps=1e-6, max_position_embeddings=32768, use_sliding_window=False,
                  rope_theta=10000.0, tie_word_embeddings=False, num_key_value_heads=32),
    "gpt_bigcode": dict(activation_function="gelu_pytorch_tanh", layer_norm_epsilon=1e-5, n_positions=1024,
                        multi_query=True, scale_attn_weights=True, tie_word_embeddings=True),
}


# The sizes a config.json must give for `lite_config` to read it (else transformers reads it).
REQUIRED = {"llama": ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"),
            "qwen2": ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"),
            "gpt_bigcode": ("n_embd", "n_layer", "n_head", "vocab_size")}


class LiteConfig(SimpleNamespace):
    """A lean family's config.json over its defaults, with rotary positions as transformers
    gathers them (`rope_parameters`). Reading it imports nothing: transformers' config classes
    import its activation and kernel modules (about 1 s). Only default rotary positions:
    `lite_config` returns None for scaled ones (transformers' config class reads those)."""

    def to_dict(self) -> dict:
        return dict(vars(self))


def lite_config(path: str) -> LiteConfig | None:
    """The config of a LEAN_FAMILIES checkpoint at `path`, or None (another family, scaled
    rotary positions, no config.json)."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return None
    family = raw.get("model_type")
    if family not in DEFAULTS or any(raw.get(k) is None for k in REQUIRED[family]):
        return None
    fields = {**DEFAULTS[family], **raw}
    if family != "gpt_bigcode":
        rope = dict(fields.get("rope_parameters") or fields.get("rope_scaling") or {})
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            return None
        rope.setdefault("rope_theta", fields["rope_theta"])
        fields["rope_parameters"] = {"rope_theta": rope["rope_theta"], "rope_type": "default"}
        fields.setdefault("num_key_value_heads", fields["num_attention_heads"])
    else:     # the names transformers' GPTBigCode config answers to as well
        fields.update(hidden_size=fields["n_embd"], num_attention_heads=fields["n_head"],
                      num_hidden_layers=fields["n_layer"], max_position_embeddings=fields["n_positions"])
    return LiteConfig(**fields)


def weight_files(path: str) -> list[str]:
    """The checkpoint's safetensors files (one, or the shards its index names)."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(path, s) for s in shards]
    return sorted(glob.glob(os.path.join(path, "*.safetensors")))


class CheckpointModel(torch.nn.Module):
    """A checkpoint's weights as nested modules named like its tensors (numbered children as a
    ModuleList, in their numbers' order); `config` is its config. Not callable: only the lean
    forward computes it."""

    def __init__(self, config, tensors: dict[str, torch.Tensor]):
        super().__init__()
        self.config = config
        tree: dict = {}
        for name, tensor in tensors.items():
            *path, leaf = name.split(".")
            node = tree
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = tensor
        for key, child in tree.items():
            _attach(self, key, child)
        embed = self.get_submodule(LEAN_FAMILIES[config.model_type])
        if "lm_head.weight" not in tensors:     # the output head shares the embedding's weight
            self.add_module("lm_head", torch.nn.Module())
            self.lm_head.weight, self.lm_head.bias = embed.weight, None

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.get_submodule(LEAN_FAMILIES[self.config.model_type])

    def forward(self, *args, **kwargs):
        raise TypeError("a checkpoint loaded for the lean forward has no forward of its own")


def _attach(parent: torch.nn.Module, key: str, value) -> None:
    if isinstance(value, torch.Tensor):
        parent.register_parameter(key, torch.nn.Parameter(value, requires_grad=False))
        return
    if value and all(k.isdigit() for k in value):
        module = torch.nn.ModuleList()
        for k in sorted(value, key=int):
            module.append(torch.nn.Module())
            for name, leaf in value[k].items():
                _attach(module[-1], name, leaf)
    else:
        module = torch.nn.Module()
        for name, leaf in value.items():
            _attach(module, name, leaf)
        if "weight" in value and "bias" not in value:
            module.bias = None      # as a transformers Linear without a bias reads
    parent.add_module(key, module)


_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
           "BOOL": torch.bool}

# The maps the lean forward multiplies as one (engine/forward/lean.py): their tensors are read side by
# side into one buffer, so that fusing them copies nothing.
FUSED = {"llama": (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")),
         "qwen2": (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")), "gpt_bigcode": ()}
# The tables the forward looks rows up in (never quantized).
TABLES = {"llama": ("model.embed_tokens.weight",), "qwen2": ("model.embed_tokens.weight",),
          "gpt_bigcode": ("transformer.wte.weight", "transformer.wpe.weight")}


def header(file: str) -> tuple[dict, int, dict]:
    """A safetensors file's header (name -> dtype, shape, data offsets), where its data begins,
    and its metadata."""
    with open(file, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if size > os.path.getsize(file):
            raise ValueError(f"{file}: its header runs past the end of the file")
        found = json.loads(f.read(size))
    if not isinstance(found, dict):
        raise ValueError(f"{file}: not a safetensors header")
    return found, 8 + size, found.pop("__metadata__", None) or {}


def checkpoint_numel(path: str) -> int:
    """How many values the checkpoint's tensors hold, read from the files' headers."""
    total = 0
    for file in weight_files(path):
        for info in header(file)[0].values():
            n = 1
            for d in info["shape"]:
                n *= d
            total += n
    return total


def fusion_groups(names, family: str) -> list[list[str]]:
    """`names` in groups whose tensors the forward concatenates by rows (FUSED: the same tensor of
    sibling maps, as `model.layers.3.self_attn.{q,k,v}_proj.weight`), in the forward's order."""
    groups: dict[tuple, dict[int, str]] = {}
    for name in names:
        parts = name.split(".")
        for i, part in enumerate(parts):
            fused = next((g for g in FUSED.get(family, ()) if part in g), None)
            if fused is not None:
                key = (".".join(parts[:i]), fused, ".".join(parts[i + 1:]))
                groups.setdefault(key, {})[fused.index(part)] = name
                break
    return [[members[i] for i in range(len(key[1]))] for key, members in groups.items()
            if len(members) == len(key[1])]


def read_tensors(file: str, dtype: torch.dtype | None = None, family: str | None = None,
                 names=None) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors (those in `names`, else all), each read into memory of its own
    (no mapping of the file, whose pages would count as the process's while any tensor views
    them), floating ones in `dtype` (None: as stored); the maps `family`'s forward fuses read side
    by side into one buffer (fusion_groups). Two threads read (a file read releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    found, start, _ = header(file)
    wanted = [n for n in found if names is None or n in names]
    targets = {}     # name -> the slice of a group's buffer it is read into
    for group in fusion_groups(wanted, family) if family else []:
        infos = [found[n] for n in group]
        if len({(i["dtype"], tuple(i["shape"][1:])) for i in infos}) == 1:
            stored = _DTYPES[infos[0]["dtype"]]
            into = dtype if dtype is not None and stored.is_floating_point else stored
            buffer = torch.empty([sum(i["shape"][0] for i in infos), *infos[0]["shape"][1:]], dtype=into)
            targets.update(zip(group, buffer.split([i["shape"][0] for i in infos])))

    def read(name: str) -> tuple[str, torch.Tensor]:
        info = found[name]
        stored, into = _DTYPES[info["dtype"]], targets.get(name)
        t = into if into is not None and into.dtype == stored else torch.empty(info["shape"], dtype=stored)
        read_into(file, start, info, t)
        if into is not None and t is not into:
            into.copy_(t)
            return name, into
        return name, t.to(dtype) if dtype is not None and t.is_floating_point() and t.dtype != dtype else t

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(read, wanted))


def read_into(file: str, start: int, info: dict, t: torch.Tensor) -> None:
    """Read one tensor of a safetensors file (its header entry `info`, data from `start`) into `t`."""
    begin, end = info["data_offsets"]
    if list(t.shape) != list(info["shape"]) or end - begin != t.numel() * t.element_size():
        raise ValueError(f"{file}: a tensor's size does not match its shape")
    view = memoryview(t.view(-1).view(torch.uint8).numpy()) if end > begin else memoryview(b"")
    with open(file, "rb", buffering=0) as f:
        f.seek(start + begin)
        while view:
            got = f.readinto(view)
            if not got:
                raise ValueError(f"{file}: a tensor ends past the end of the file")
            view = view[got:]


def map_tensor(file: str, start: int, info: dict) -> torch.Tensor:
    """One tensor of a safetensors file as a private mapping of its bytes: only the pages read
    (rows looked up) become resident, and they stay the file's, shared with the page cache."""
    import numpy as np

    dtype = _DTYPES[info["dtype"]]
    begin, end = info["data_offsets"]
    raw = np.memmap(file, dtype=np.uint8, mode="c", offset=start + begin, shape=(end - begin,))
    return torch.from_numpy(raw).view(dtype).view(info["shape"])


def write_tensors(file: str, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """`tensors` (contiguous, on the CPU) as a safetensors file, written from their own memory."""
    names = {v: k for k, v in _DTYPES.items()}
    entries, offset = {"__metadata__": metadata}, 0
    for name, t in tensors.items():
        size = t.numel() * t.element_size()
        entries[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(entries).encode()
    head += b" " * (-len(head) % 8)
    with open(file, "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for t in tensors.values():
            if t.numel():
                f.write(memoryview(t.contiguous().view(-1).view(torch.uint8).numpy()))


def load_checkpoint(path: str, config, dtype: torch.dtype | None, device: torch.device) -> CheckpointModel:
    """The weights of a local checkpoint of a LEAN_FAMILIES model, in `dtype` (None: as stored)."""
    tensors = {}
    for file in weight_files(path):
        tensors.update((name, t.to(device)) for name, t in read_tensors(file, dtype, config.model_type).items())
    return CheckpointModel(config, tensors).eval()


def return_free_memory() -> None:
    """Hand memory freed while loading back to the system. Tensors freed on the loading threads
    (a map's rows once packed, a weight once quantized or fused) stay in the C allocator's heaps,
    which keep freed blocks resident; glibc's malloc_trim returns them. A no-op elsewhere."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.cache
def _libc():
    import ctypes
    import ctypes.util

    if platform.system() != "Linux":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None    # not glibc
    except OSError:
        return None
