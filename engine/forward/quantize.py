"""Weight quantization for the lean forward (the `quantize` setting; docs/design.md, "Quantization").

`int8`: 8-bit integers with one scale per output row, through torch's int8 kernels (FBGEMM on
x86, QNNPACK on Arm). torch's dynamic kernel picks one scale for the whole input; scaling each
row to a largest magnitude of 1 and adding a +1 and a -1 column, whose weights are zero, gives
every call the same range, so a row's output is the same bit for bit whatever else is in the
call (a verify pass computes what single steps would).
`int4`: 4 bits in groups of INT4_GROUP inputs with a scale and an offset each (llama.cpp's q4_1),
through torch's CPU int4 kernel on bfloat16 inputs. Rows are independent there too.
The embedding table stays in the checkpoint's precision; a tied output head gets its own copy.
"""
from __future__ import annotations

import functools
import warnings

import torch

from .cpu import cpu_flags
from ..settings import QUANTIZE
QUANTIZE_ROWS = 8192    # rows of a weight converted at a time, and most rows of one int8 product
INT4_GROUP = 32         # input features sharing one int4 scale and offset
LAYOUT = 1              # the form quantize_rows gives a weight (engine/load/weight_cache.py keeps it on disk)


class QuantizeError(ValueError):
    """A model or device this quantization cannot serve; the message is one line."""


@functools.cache
def int8_engine() -> str | None:
    """The quantized engine torch's int8 product runs on here (fbgemm or x86 on x86, qnnpack on
    Arm), or None where this torch build or CPU has none that works."""
    supported = torch.backends.quantized.supported_engines
    for engine in ("x86", "fbgemm", "qnnpack"):
        if engine not in supported:
            continue
        try:
            torch.backends.quantized.engine = engine
            probe = Int8Linear.from_weight(torch.eye(8), None)
            if torch.allclose(probe(torch.eye(8)), torch.eye(8), atol=0.02):
                return engine
        except Exception:   # an engine listed but unusable on this CPU: try the next
            continue
    return None


def _reduce_range() -> bool:
    """7-bit inputs where the CPU sums u8 x s8 pairs in saturating 16 bits (x86 without VNNI)."""
    flags = cpu_flags()
    return bool(flags) and "avx2" in flags and not {"avx512_vnni", "avx_vnni"} & flags


class Int8Linear:
    """One or more linear maps of the same input as one int8 product (the Linear interface of
    engine/forward/matmul.py: __call__ and add_to, float32 in and out). A map of more than QUANTIZE_ROWS
    outputs (an output head) is several products of QUANTIZE_ROWS rows each: torch packs a
    weight in time that grows faster than its size (a 151,936-row head took 4x as long whole as
    in blocks of 8,192), and a block's output is the same either way. The rows' scales multiply
    the product's output: torch packs a weight of one scale 1.4x faster than one with a scale a
    row, which it reads one tensor element at a time."""

    def __init__(self, packed: list, scales: torch.Tensor, bias: torch.Tensor | None, reduce_range: bool):
        self.packed, self.scales, self.bias, self.reduce_range = packed, scales, bias, reduce_range
        self.pins = None     # the +1 / -1 columns, grown to the widest call

    @staticmethod
    def quantize_rows(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """`values`: int8 [out, in + 2], each row at 127 levels of its largest magnitude, and two
        zero columns for the +1 / -1 inputs; `scales`: float32 [out], each row's level."""
        out, width = weight.shape
        values = torch.zeros(out, width + 2, dtype=torch.int8)
        scales = torch.empty(out, dtype=torch.float32)
        # a block of rows at a time (a float32 copy of a whole output head would be twice its bfloat16 size)
        for start in range(0, out, QUANTIZE_ROWS):
            rows = weight[start:start + QUANTIZE_ROWS].detach().to(torch.float32, copy=True)
            scale = rows.abs().amax(dim=1).clamp_min_(1e-12).div_(127)
            values[start:start + rows.shape[0], :width] = rows.div_(scale[:, None]).round_().to(torch.int8)
            scales[start:start + rows.shape[0]] = scale
        return {"values": values, "scales": scales}

    @classmethod
    def from_rows(cls, rows: list[dict], bias: torch.Tensor | None) -> "Int8Linear":
        """The product of maps quantized by quantize_rows, their outputs concatenated."""
        values, scales = joined([r["values"] for r in rows]), joined([r["scales"] for r in rows])
        packed = []
        with warnings.catch_warnings():   # torch marks its quantized tensor types deprecated
            warnings.simplefilter("ignore")
            for start in range(0, values.shape[0], QUANTIZE_ROWS):
                q = torch._make_per_tensor_quantized_tensor(values[start:start + QUANTIZE_ROWS], 1.0, 0)
                packed.append(torch.ops.quantized.linear_prepack(q, None))
        # the bias is added after the rows are scaled back (inside the product it would be scaled too)
        return cls(packed, scales, None if bias is None else bias.detach().float(), _reduce_range())

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> "Int8Linear":
        return cls.from_rows([cls.quantize_rows(weight)], bias)

    def _pinned(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h's rows scaled to a largest magnitude of 1, with the +1 and -1 columns; the scales."""
        n = h.shape[0]
        if self.pins is None or self.pins.shape[0] < n:
            self.pins = torch.tensor([[1.0, -1.0]]).expand(max(n, 16), 2).contiguous()
        top = h.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30)
        return torch.cat([h / top, self.pins[:n]], dim=1), top

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        x, top = self._pinned(h.float())
        outs = [torch.ops.quantized.linear_dynamic(x, p, self.reduce_range) for p in self.packed]
        out = (outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)).mul_(top).mul_(self.scales)
        return out if self.bias is None else out.add_(self.bias)

    def add_to(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self(h).add_(x)


class Int4Linear:
    """One or more linear maps of the same input as one int4 product (bfloat16 in and out)."""

    def __init__(self, packed: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, out: int):
        self.packed, self.scales, self.bias, self.out = packed, scales, bias, out

    @staticmethod
    def quantize_rows(weight: torch.Tensor) -> dict[str, torch.Tensor]:
        """`values`: uint8 [out, in], each weight's level (0-15) in its group of INT4_GROUP inputs;
        `scales`: bfloat16 [out, groups, 2], each group's (scale, offset) as the kernel reads them."""
        out, width = weight.shape
        if width % INT4_GROUP:
            raise QuantizeError(f"quantize 'int4': a map's {width} inputs are not a multiple of {INT4_GROUP}")
        values = torch.empty(out, width, dtype=torch.uint8)
        scales = torch.empty(out, width // INT4_GROUP, 2, dtype=torch.bfloat16)
        for start in range(0, out, QUANTIZE_ROWS):
            end = min(start + QUANTIZE_ROWS, out)
            block = weight[start:end].detach().float().reshape(end - start, width // INT4_GROUP, INT4_GROUP)
            low, high = block.amin(dim=-1), block.amax(dim=-1)
            step = (high - low).clamp_min_(1e-8).div_(15)
            q = ((block - low[..., None]) / step[..., None]).round_().clamp_(0, 15)
            values[start:end] = q.reshape(end - start, width).to(torch.uint8)
            # the kernel computes (q - 8) * scale + offset
            scales[start:end] = torch.stack([step, low + 8 * step], dim=-1)
        return {"values": values, "scales": scales}

    @classmethod
    def from_rows(cls, rows: list[dict], bias: torch.Tensor | None) -> "Int4Linear":
        values, scales = joined([r["values"] for r in rows]), joined([r["scales"] for r in rows])
        out, width = values.shape
        padded = -(-out // 16) * 16     # the kernel takes outputs by 16: zero rows pad the last ones
        levels = torch.zeros(padded, width, dtype=torch.int32)
        levels[:out] = values
        groups = torch.zeros(width // INT4_GROUP, padded, 2, dtype=torch.bfloat16)
        groups[:, :out] = scales.transpose(0, 1)
        packed = torch._convert_weight_to_int4pack_for_cpu(levels, 2)
        return cls(packed, groups, None if bias is None else bias.detach().to(torch.bfloat16), out)

    @classmethod
    def from_weight(cls, weight: torch.Tensor, bias: torch.Tensor | None) -> "Int4Linear":
        return cls.from_rows([cls.quantize_rows(weight)], bias)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        out = torch._weight_int4pack_mm_for_cpu(h.to(torch.bfloat16), self.packed, INT4_GROUP, self.scales)
        if out.shape[1] != self.out:
            out = out[:, :self.out]
        return out if self.bias is None else out.add_(self.bias)

    def add_to(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self(h).add_(x)


QUANTIZED = {"int8": Int8Linear, "int4": Int4Linear}
COMPUTE_DTYPES = {"int8": torch.float32, "int4": torch.bfloat16}   # what each kernel takes and returns


def joined(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Tensors concatenated along their first dimension: a view where they lie side by side in
    one storage, in order (engine/load/checkpoint.py reads maps the forward fuses that way), else a copy."""
    first = tensors[0]
    offset = first.storage_offset()
    for t in tensors:
        if not (t.is_contiguous() and t.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
                and t.storage_offset() == offset and t.shape[1:] == first.shape[1:]):
            return torch.cat(tensors)
        offset += t.numel()
    return first.as_strided((sum(t.shape[0] for t in tensors), *first.shape[1:]), first.stride())


def group_bias(biases: list[torch.Tensor | None], rows: list[int]) -> torch.Tensor | None:
    """The biases of maps fused by output (zeros for a map without one), or None if none has one."""
    if all(b is None for b in biases):
        return None
    like = next(b for b in biases if b is not None)
    return joined([b if b is not None else like.new_zeros(n) for b, n in zip(biases, rows)])


class QuantizedMap:
    """A quantized product made at load (engine/load/weight_cache.py) for `members` modules fused by
    output, kept on each of them; quantize_linears hands it to the forward that asks for them."""

    def __init__(self, linear, members: int):
        self.linear, self.members = linear, members


def quantize_linears(modules: list[torch.nn.Linear], keep: set[int], quantize: str):
    """The `quantize` product of these maps (concatenated by output): the one made at load, or
    one made now, after which each module's own weight is freed unless the model reads it
    elsewhere (its data pointer is in `keep`: a tied embedding)."""
    made = getattr(modules[0], "quantized", None)
    if made is not None:
        if made.members != len(modules) or any(getattr(m, "quantized", None) is not made for m in modules):
            raise QuantizeError(f"quantize {quantize!r}: the maps quantized at load are not fused as the forward fuses them")
        return made.linear
    rows = [QUANTIZED[quantize].quantize_rows(m.weight) for m in modules]
    linear = QUANTIZED[quantize].from_rows(rows, group_bias([m.bias for m in modules], [m.weight.shape[0] for m in modules]))
    for m in modules:
        if m.weight.data_ptr() not in keep:
            m.weight = torch.nn.Parameter(m.weight.new_empty(0), requires_grad=False)
    return linear


def check_quantize(quantize: str, device: torch.device) -> None:
    """One line where `quantize` cannot run on `device` here; nothing where it can."""
    if quantize not in QUANTIZE:
        raise QuantizeError(f"quantize {quantize!r}: not one of {', '.join(QUANTIZE)}")
    if quantize == "none":
        return
    if device.type != "cpu":
        raise QuantizeError(f"quantize {quantize!r}: runs on a CPU; on {device.type} use dtype bfloat16 or float16")
    if quantize == "int4":
        if not hasattr(torch, "_weight_int4pack_mm_for_cpu"):
            raise QuantizeError("quantize 'int4': this torch build has no CPU int4 kernel")
        return
    if int8_engine() is None:
        raise QuantizeError(f"quantize {quantize!r}: this torch build has no int8 kernel that runs on this CPU "
                            f"(engines: {', '.join(torch.backends.quantized.supported_engines) or 'none'})")
