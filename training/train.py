"""Train the shipped default pair from scratch: a Llama target and a GPTBigCode (multi-query) draft.

    python -m training.train --out engine/default_pair --minutes-target 45 --minutes-draft 12

One command, seeded: builds the corpus (training/corpus.py), trains both tokenizers
(training/tokenizers.py), pre-tokenizes left-to-right + FIM examples, trains the target, then
the draft, and saves both in float16 under --out/target and --out/draft. Checkpoints go to
--runs (ignored by git); running the same command again resumes where it stopped.
Budgets are wall-clock minutes (the learning-rate schedule follows the fraction of the budget
used) or, for bit-exact reruns, --tokens-target/--tokens-draft. A GPU is used when present.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, replace

import torch

from engine.load.models import pick_device
from training.corpus import Corpus, build_corpus, encoder, fim_format, token_stream
from training.tokenizers import train_bytelevel, train_sentencepiece_style


@dataclass
class ModelSpec:
    """Architecture of one model of the pair; every size knob in one place."""
    kind: str            # "llama" | "gptbigcode"
    vocab_size: int      # tokenizer vocabulary to train
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int = 1024


TARGET = ModelSpec("llama", vocab_size=4096, hidden=192, layers=7, heads=3, ffn=512)
DRAFT = ModelSpec("gptbigcode", vocab_size=2048, hidden=96, layers=2, heads=3, ffn=288)


@dataclass
class TrainSettings:
    """One training run's knobs; the budget (minutes or tokens) comes from the command line."""
    seq_len: int = 512           # tokens per training window
    batch_size: int = 8          # windows per step
    lr: float = 2e-3             # peak learning rate
    min_lr_ratio: float = 0.1    # cosine decays to lr * this
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    minutes: float = 45.0        # wall-clock budget (used when tokens == 0)
    tokens: int = 0              # token budget; overrides minutes when > 0
    checkpoint_minutes: float = 3.0
    log_every: int = 20


TARGET_SETTINGS = TrainSettings(lr=2e-3)
DRAFT_SETTINGS = TrainSettings(lr=3e-3)
# Distillation continues a trained draft: a lower peak and a short warmup.
DISTILL_SETTINGS = TrainSettings(lr=1e-3, warmup_steps=20)

CHUNK_CHARS = 1500       # documents are cut into chunks of this size before FIM (~512 tokens)
FIM_RATE = 0.5           # fraction of chunks turned into FIM examples (half PSM, half SPM)
TOKENIZER_SAMPLE_BYTES = 8_000_000


def build_model(spec: ModelSpec, tok) -> torch.nn.Module:
    from transformers import (GPTBigCodeConfig, GPTBigCodeForCausalLM, LlamaConfig,
                              LlamaForCausalLM)
    vocab = len(tok)
    if spec.kind == "llama":
        cfg = LlamaConfig(vocab_size=vocab, hidden_size=spec.hidden, intermediate_size=spec.ffn,
                          num_hidden_layers=spec.layers, num_attention_heads=spec.heads,
                          num_key_value_heads=spec.heads, max_position_embeddings=spec.max_positions,
                          tie_word_embeddings=True, bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
        return LlamaForCausalLM(cfg)
    cfg = GPTBigCodeConfig(vocab_size=vocab, n_embd=spec.hidden, n_layer=spec.layers,
                           n_head=spec.heads, n_inner=spec.ffn, n_positions=spec.max_positions,
                           multi_query=True, bos_token_id=tok.eos_token_id,
                           eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    return GPTBigCodeForCausalLM(cfg)


def draft_spec(size: str) -> ModelSpec:
    """DRAFT, or DRAFT at another width: "HIDDEN,HEADS,FFN" (HIDDEN a multiple of HEADS)."""
    if not size:
        return DRAFT
    try:
        hidden, heads, ffn = (int(v) for v in size.split(","))
    except ValueError:
        raise SystemExit(f"--draft-size: {size!r} is not HIDDEN,HEADS,FFN (e.g. 160,5,640)") from None
    if min(hidden, heads, ffn) <= 0 or hidden % heads:
        raise SystemExit(f"--draft-size: {size!r}: positive numbers, HIDDEN a multiple of HEADS")
    return replace(DRAFT, hidden=hidden, heads=heads, ffn=ffn)


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def prepare_tokenizers(corpus: Corpus, run_dir: str):
    """Train (or reload) both tokenizers on a fixed sample of the training files."""
    from transformers import AutoTokenizer
    paths = {name: os.path.join(run_dir, f"tokenizer_{name}") for name in ("target", "draft")}
    if all(os.path.isdir(p) for p in paths.values()):
        return AutoTokenizer.from_pretrained(paths["target"]), AutoTokenizer.from_pretrained(paths["draft"])
    sample, size = [], 0
    for f in corpus.train:
        if size >= TOKENIZER_SAMPLE_BYTES:
            break
        sample.append(f.text)
        size += len(f.text)
    target_tok = train_sentencepiece_style(sample, TARGET.vocab_size)
    draft_tok = train_bytelevel(sample, DRAFT.vocab_size)
    target_tok.save_pretrained(paths["target"])
    draft_tok.save_pretrained(paths["draft"])
    return target_tok, draft_tok


def prepare_stream(name: str, texts: list[str], tok, seed: int, run_dir: str) -> torch.Tensor:
    """Pre-tokenized training stream for one model, cached in the run folder."""
    path = os.path.join(run_dir, f"stream_{name}.pt")
    if os.path.exists(path):   # cached: the corpus it was built from is in stream_<name>.json
        return torch.load(path)
    ids = token_stream(texts, fim_format(tok), encoder(tok), seed, CHUNK_CHARS, FIM_RATE)
    stream = torch.tensor(ids, dtype=torch.int32)
    torch.save(stream, path)
    with open(os.path.join(run_dir, f"stream_{name}.json"), "w") as fh:
        json.dump({"files": len(texts), "bytes": sum(len(t.encode()) for t in texts),
                   "tokens": len(stream)}, fh)
    return stream


def stream_source(name: str, run_dir: str, texts: list[str]) -> dict:
    """Files and bytes the cached stream was built from (the installed packages may have changed)."""
    path = os.path.join(run_dir, f"stream_{name}.json")
    if os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    return {"files": len(texts), "bytes": sum(len(t.encode()) for t in texts), "tokens": None}


def get_batch(stream: torch.Tensor, step: int, seed: int, s: TrainSettings, device: str,
              loss_mask: torch.Tensor | None = None):
    """Random windows and their labels, a pure function of (seed, step): resuming replays the
    same data. Labels are -100 where loss_mask is False (distillation prompts)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - s.seq_len, (s.batch_size,), generator=g).tolist()
    x = torch.stack([stream[i:i + s.seq_len] for i in starts]).long()
    labels = x.clone()
    if loss_mask is not None:
        keep = torch.stack([loss_mask[i:i + s.seq_len] for i in starts])
        labels[~keep] = -100
    return x.to(device), labels.to(device)


def lr_at(progress: float, step: int, s: TrainSettings) -> float:
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    progress = min(max(progress, 0.0), 1.0)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def estimate_loss(model, stream: torch.Tensor, s: TrainSettings, device: str, batches: int = 4) -> float:
    model.eval()
    losses = []
    for i in range(batches):
        x, labels = get_batch(stream, 10_000_000 + i, 1, s, device)
        losses.append(model(input_ids=x, labels=labels).loss.item())
    model.train()
    return sum(losses) / len(losses)


def train_model(name: str, model, train_stream, val_stream, s: TrainSettings, seed: int,
                run_dir: str, device: str, loss_mask: torch.Tensor | None = None) -> dict:
    """nanoGPT-style loop with a wall-clock or token budget and resumable checkpoints."""
    ckpt_path = os.path.join(run_dir, f"ckpt_{name}.pt")
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=s.lr, betas=(0.9, 0.95))
    state = {"step": 0, "tokens": 0, "elapsed": 0.0, "done": False}
    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        state = ckpt["state"]
        print(f"[{name}] resumed at step {state['step']}, {state['tokens']:,} tokens, "
              f"{state['elapsed'] / 60:.1f} min", flush=True)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device == "cuda"
                else torch.autocast("cpu", enabled=False))
    budget_s = s.minutes * 60

    def progress() -> float:
        return state["tokens"] / s.tokens if s.tokens > 0 else state["elapsed"] / budget_s

    def save():
        tmp = ckpt_path + ".tmp"
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": state}, tmp)
        os.replace(tmp, ckpt_path)

    tokens_per_step = s.batch_size * s.seq_len
    last_ckpt = time.time()
    window_t, window_tokens = time.time(), 0
    while not state["done"] and progress() < 1.0:
        t0 = time.time()
        lr = lr_at(progress(), state["step"], s)
        for group in opt.param_groups:
            group["lr"] = lr
        x, labels = get_batch(train_stream, state["step"], seed, s, device, loss_mask)
        with autocast:
            loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["tokens"] += tokens_per_step
        state["elapsed"] += time.time() - t0
        window_tokens += tokens_per_step
        if state["step"] % s.log_every == 0:
            tps = window_tokens / (time.time() - window_t)
            p = progress()
            eta = (state["elapsed"] / max(p, 1e-9)) * (1 - p)
            print(f"[{name}] step {state['step']} loss {loss.item():.3f} lr {lr:.2e} "
                  f"{tps:,.0f} tok/s tokens {state['tokens']:,} ETA {eta / 60:.1f} min", flush=True)
            window_t, window_tokens = time.time(), 0
        if time.time() - last_ckpt > s.checkpoint_minutes * 60:
            save()
            last_ckpt = time.time()
    state["done"] = True
    state["val_loss"] = estimate_loss(model, val_stream, s, device)
    save()
    print(f"[{name}] done: {state['step']} steps, {state['tokens']:,} tokens, "
          f"{state['elapsed'] / 60:.1f} min, held-out loss {state['val_loss']:.3f} nats/token", flush=True)
    return state


def save_shipped(model, tok, out_dir: str, info: dict) -> None:
    """float16 safetensors + tokenizer; the engine upcasts to float32 on CPU."""
    os.makedirs(out_dir, exist_ok=True)
    model = model.to("cpu").to(torch.float16)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "training_info.json"), "w") as fh:
        json.dump(info, fh, indent=2, sort_keys=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="engine/default_pair", help="where target/ and draft/ are written")
    ap.add_argument("--runs", default="runs/default_pair", help="checkpoints and caches (resumable)")
    ap.add_argument("--minutes-target", type=float, default=45.0)
    ap.add_argument("--minutes-draft", type=float, default=12.0)
    ap.add_argument("--tokens-target", type=int, default=0, help="token budget (overrides minutes)")
    ap.add_argument("--tokens-draft", type=int, default=0, help="token budget (overrides minutes)")
    ap.add_argument("--corpus-mb", type=float, default=40.0, help="cap on training source bytes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto | cpu | cuda | mps (as the engine picks)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    ap.add_argument("--only", choices=["both", "target", "draft"], default="both")
    ap.add_argument("--draft-size", default="", metavar="HIDDEN,HEADS,FFN",
                    help=f"another draft width (default {DRAFT.hidden},{DRAFT.heads},{DRAFT.ffn}; "
                         f"{DRAFT.layers} layers either way)")
    ap.add_argument("--distill-gen-minutes", type=float, default=0.0,
                    help="minutes the target spends writing completions for draft distillation")
    ap.add_argument("--distill-minutes", type=float, default=0.0,
                    help="minutes of draft training on target completions + corpus (0 = no distillation)")
    ap.add_argument("--distill-control", action="store_true",
                    help="also continue the plain draft for the same minutes on the corpus only")
    args = ap.parse_args(argv)
    draft = draft_spec(args.draft_size)     # a bad size stops here, before the corpus is built

    if args.threads:
        torch.set_num_threads(args.threads)
    device = str(pick_device(args.device))
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    os.makedirs(args.runs, exist_ok=True)

    t0 = time.time()
    corpus = build_corpus(seed=args.seed, max_train_bytes=int(args.corpus_mb * 1e6))
    texts = [f.text for f in corpus.train]
    held = [f.text for f in corpus.held_out]
    print(f"corpus: {len(corpus.train)} training files ({corpus.train_bytes() / 1e6:.1f} MB), "
          f"{corpus.dropped_duplicates} near-duplicates dropped, {len(corpus.held_out)} held-out files "
          f"({time.time() - t0:.0f}s)", flush=True)
    target_tok, draft_tok = prepare_tokenizers(corpus, args.runs)
    print(f"tokenizers: target {len(target_tok)} tokens, draft {len(draft_tok)} tokens", flush=True)

    specs = {"target": (TARGET, target_tok, replace(TARGET_SETTINGS, minutes=args.minutes_target,
                                                    tokens=args.tokens_target)),
             "draft": (draft, draft_tok, replace(DRAFT_SETTINGS, minutes=args.minutes_draft,
                                                 tokens=args.tokens_draft))}
    counts = {name: param_count(build_model(spec, tok)) for name, (spec, tok, _) in specs.items()}
    print(f"parameters: target {counts['target']:,}, draft {counts['draft']:,} "
          f"(ratio {counts['target'] / counts['draft']:.1f})", flush=True)

    streams = {}
    for name in (["target", "draft"] if args.only == "both" else [args.only]):
        spec, tok, settings = specs[name]
        stream = prepare_stream(name, texts, tok, args.seed, args.runs)
        val = prepare_stream(f"{name}_heldout", held, tok, args.seed + 1, args.runs)
        streams[name] = (stream, val)
        print(f"[{name}] training stream {len(stream):,} tokens "
              f"({len(stream) / corpus.train_bytes():.3f} tokens/byte), held-out {len(val):,}", flush=True)
        source = stream_source(name, args.runs, texts)
        torch.manual_seed(args.seed)
        model = build_model(spec, tok)
        state = train_model(name, model, stream, val, settings, args.seed, args.runs, device)
        info = {"spec": asdict(spec), "settings": asdict(settings), "parameters": param_count(model),
                "tokens_seen": state["tokens"], "steps": state["step"],
                "train_minutes": round(state["elapsed"] / 60, 2), "device": device,
                "threads": torch.get_num_threads(), "seed": args.seed,
                "corpus_train_files": source["files"], "corpus_train_bytes": source["bytes"],
                "stream_tokens": len(stream), "heldout_loss_nats_per_token": state["val_loss"]}
        save_shipped(model, tok, os.path.join(args.out, name), info)
        if name == "draft" and args.distill_minutes > 0:   # keep the undistilled draft for comparison
            save_shipped(model, tok, os.path.join(args.runs, "draft_plain"), info)
        print(f"[{name}] saved to {os.path.join(args.out, name)}", flush=True)

    if args.distill_minutes > 0 and args.only == "both":
        distill_draft(args, texts, target_tok, draft_tok, streams["draft"], device)


def distill_draft(args, texts, target_tok, draft_tok, draft_streams, device) -> None:
    """Continue the draft on target-written completions (ships to --out/draft); optional control."""
    from training.corpus_distill import draft_stream_from_samples, load_or_generate, mixed_stream
    target = build_model(TARGET, target_tok)
    target.load_state_dict(torch.load(os.path.join(args.runs, "ckpt_target.pt"), map_location="cpu")["model"])
    samples = load_or_generate(os.path.join(args.runs, "distill_samples.pt"), target, target_tok, texts,
                               args.seed + 2, args.distill_gen_minutes, CHUNK_CHARS, device)
    kd = draft_stream_from_samples(samples, draft_tok)
    corpus_stream, val = draft_streams
    variants = [("draft_kd", *mixed_stream(kd, corpus_stream, args.seed))]
    if args.distill_control:
        variants.append(("draft_control", corpus_stream, None))
    base = torch.load(os.path.join(args.runs, "ckpt_draft.pt"), map_location="cpu")
    for name, stream, loss_mask in variants:
        model = build_model(DRAFT, draft_tok)
        model.load_state_dict(base["model"])
        settings = replace(DISTILL_SETTINGS, minutes=args.distill_minutes)
        state = train_model(name, model, stream, val, settings, args.seed, args.runs, device, loss_mask)
        info = {"spec": asdict(DRAFT), "settings": asdict(settings), "parameters": param_count(model),
                "continued_from": "draft", "base_tokens_seen": base["state"]["tokens"],
                "tokens_seen": base["state"]["tokens"] + state["tokens"],
                "distill_samples": len(samples), "distill_tokens": sum(kd[1]),
                "train_minutes": round((base["state"]["elapsed"] + state["elapsed"]) / 60, 2),
                "device": device, "threads": torch.get_num_threads(), "seed": args.seed,
                "heldout_loss_nats_per_token": state["val_loss"]}
        out = os.path.join(args.out, "draft") if name == "draft_kd" else os.path.join(args.runs, name)
        save_shipped(model, draft_tok, out, info)
        print(f"[{name}] saved to {out}", flush=True)


if __name__ == "__main__":
    main()
