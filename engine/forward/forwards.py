"""The forwards a KV session (engine/kv.py) runs a model through, behind one interface
(`Forward`): the lean forward (lean.py) where the architecture has one, else the model's own
transformers forward; `make_forward` picks one.
"""
from __future__ import annotations

import inspect
from typing import Protocol

import torch

from .lean import LeanForward, LeanModel, StaticLeanForward


def model_max_positions(model) -> int | None:
    cfg = model.config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


class Forward(Protocol):
    """Runs new tokens through a model on top of the cache it holds."""

    def __call__(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        """Append `new_ids` to the cache; float logits [n_logits, V] for the last n_logits of
        them (all of them when there are fewer)."""

    def crop(self, length: int) -> None:
        """Keep the first `length` (> 0) cached tokens."""

    def reset(self) -> None:
        """Drop the cache and its memory."""

    def held(self) -> int:
        """Tokens the cache's memory holds room for now."""

    def held_after(self, total: int) -> int:
        """Tokens its memory will hold room for once it holds `total` tokens."""


def cache_argument(model: torch.nn.Module) -> str:
    """The name under which the model's forward takes its KV cache: `cache` in newer transformers
    5 releases, `past_key_values` before (5.17 has it). A forward ignores the name it does not know
    (it lands in **kwargs), and then runs without its cache: wrong logits, no error."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class TransformersForward:
    """The model's own forward with a transformers DynamicCache: every architecture."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model, self.device = model, device
        self.cache = None   # a transformers DynamicCache
        self.cache_arg = cache_argument(model)

    def __call__(self, new_ids: list[int], n_logits: int) -> torch.Tensor:
        if self.cache is None:
            from transformers import DynamicCache   # here: only models without a lean forward need it

            self.cache = DynamicCache()
        x = torch.tensor([new_ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=x, use_cache=True, logits_to_keep=n_logits, **{self.cache_arg: self.cache})
        self.cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        return out.logits[0].float()

    def crop(self, length: int) -> None:
        self.cache.crop(length - self.cache.get_seq_length())   # negative: tokens to drop

    def reset(self) -> None:
        self.cache = None

    def held(self) -> int:
        return self.cache.get_seq_length() if self.cache is not None else 0

    def held_after(self, total: int) -> int:
        return total


def make_forward(model: torch.nn.Module, lean: LeanModel | None, static_capacity: int | None = None,
                 cuda_graphs: bool = False, limit: int | None = None) -> Forward:
    """The lean forward when `lean` is given (see make_lean), else the transformers one. With
    `static_capacity`, the lean forward's static mode with that many cache slots (and, with
    `cuda_graphs`, replayed CUDA graphs: CUDA only). `limit`: the most tokens a session holds
    (the lean cache grows up to it, not past it)."""
    param = next(model.parameters())
    if lean is None:
        return TransformersForward(model, param.device)
    if static_capacity is not None:
        return StaticLeanForward(lean, lean.compute_dtype, param.device, static_capacity, cuda_graphs)
    return LeanForward(lean, lean.compute_dtype, param.device, limit)
