"""What a precision costs in quality: held-out bits per byte at each dtype and quantization.

    python -m bench.quality [--models default-target,default-draft,DIR] [--files eval]
                            [--settings float32,bfloat16,int8] [--max-files N]

Each model reads every file of the set (bench/eval by default: real code no shipped model was
trained or tuned on) in windows of its context, as the engine computes it (the lean forward on
the weights the setting gives: `float32` and `bfloat16` are dtypes, `int8` and `int4` quantize
the checkpoint's own precision), and the table gives bits per byte of text (lower is better)
and each setting's difference from float32. Speculative decoding is exact for each setting: a
setting changes the model, not how faithfully specfill follows it.
"""
from __future__ import annotations

import math
import sys

from bench.common import add_file_options, bench_parser
from bench.eval import file_set

SETTINGS = {"float32": dict(dtype="float32"), "bfloat16": dict(dtype="bfloat16"), "int8": dict(quantize="int8"),
            "int4": dict(quantize="int4")}
WINDOW_OVERLAP = 64       # tokens of context a window carries over from the one before


def bits_per_byte(loaded, pool, text: str) -> tuple[float, int]:
    """Total bits the model spends on `text`'s tokens after the first, and the text's bytes."""
    import torch

    ids = loaded.vocab.encode_text(text)
    context = min(x for x in (pool.max_tokens, loaded.max_positions or pool.max_tokens))
    step = context - WINDOW_OVERLAP - 1
    bits, start = 0.0, 0
    session = pool.session_for(ids[:1])
    while start < len(ids) - 1:
        first = max(0, start - WINDOW_OVERLAP)
        window = ids[first:start + step + 1]
        session.crop(0)
        with torch.inference_mode():
            logits = session.advance(window, n_logits=len(window))
        scored = start - first          # positions whose next token is new in this window
        logp = torch.log_softmax(logits[scored:-1].float(), dim=-1)
        targets = torch.tensor(window[scored + 1:])
        bits -= float(logp.gather(1, targets[:, None]).sum()) / math.log(2)
        start += step
    return bits, len(text.encode("utf-8"))


def measure(model: str, role: str, setting: str, texts: list[str]) -> float:
    from engine.kv import KVPool
    from engine.load.models import load_model

    kw = SETTINGS[setting]
    loaded = load_model(model, role, device="cpu", dtype=kw.get("dtype", "auto"), lean_only=True)
    pool = KVPool(loaded.model, 1, 2048, quantize=kw.get("quantize", "none"))
    total_bits = total_bytes = 0
    for text in texts:
        b, n = bits_per_byte(loaded, pool, text)
        total_bits, total_bytes = total_bits + b, total_bytes + n
    return total_bits / total_bytes


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser("python -m bench.quality", __doc__)
    ap.add_argument("--models", default="default-target,default-draft",
                    help="comma-separated: default-target, default-draft, or model directories")
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    add_file_options(ap, max_files_default=None)
    ap.set_defaults(files=file_set("eval"))
    args = ap.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting {unknown[0]!r} (one of {', '.join(SETTINGS)})")
    files = sorted(args.files.glob("*.py"))[:args.max_files]
    texts = [f.read_text(encoding="utf-8") for f in files]
    print(f"bits per byte on {len(files)} files of {args.files} ({sum(len(t.encode()) for t in texts)} bytes)")
    print("| model | " + " | ".join(settings) + " |")
    print("|---|" + "---|" * len(settings))
    for name in [m for m in args.models.split(",") if m]:
        model, role = ("default", name.split("-", 1)[1]) if name.startswith("default-") else (name, "target")
        values = {s: measure(model, role, s, texts) for s in settings}
        base = values.get("float32")
        cells = [f"{v:.4f}" + (f" ({v - base:+.4f})" if base is not None and s != "float32" else "")
                 for s, v in values.items()]
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
