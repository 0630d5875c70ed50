"""Distill a draft model on its target's own completions of your code (`specfill distill`).

    specfill distill --target T --draft D --code DIR --out OUT [--minutes 30]
    python -m training.distill  (same options)

1. Split the source files under --code into training and held-out files (seeded hash of the path;
   or --eval-code names the held-out files).
2. Data (on-policy): the target greedily completes editor positions of the training files (cursor
   at the end of a code line, on a fresh indented line, after a word mid-line: FIM in the layouts
   its template supports; and left to right), each prompt in the target's own format. The text it
   writes is put after the same position in the draft's own format. --gen-workers N runs N
   data processes at once (distill_data.generate_in_workers), each with its own target.
3. Training: the draft learns to write what the target wrote (sequence-level distillation: works
   across tokenizers); when both share one vocabulary, also token-level KL to the target's logits.
4. Report: held-out acceptance (k = 4) and tokens per target call of the draft before and after,
   through the real engine, both measured in one run.

Seeded. Time-bounded (--minutes, or --gen-minutes/--train-minutes) and resumable: samples and a
training checkpoint live in --work (default OUT.work); the same command continues them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

DEFAULT_KINDS = {"eol": 0.3, "fresh": 0.3, "mid": 0.2, "l2r": 0.2}
EVAL_KINDS = ("eol", "fresh")


@dataclass
class DistillSettings:
    """Training knobs (the budgets come from the command line)."""
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.1
    batch_size: int = 16          # examples per step
    grad_clip: float = 1.0
    prompt_weight: float = 0.0    # loss weight of the prompt's own tokens (the user's code) vs the answer's 1
    kd_weight: float = 0.5        # same vocabulary: share of the loss that is KL to the target's logits
    checkpoint_minutes: float = 2.0
    log_every: int = 20


def parse_args(argv, prog: str) -> argparse.Namespace:
    from lsp.arguments import OneLineParser, number

    p = OneLineParser(prog=prog, description="Distill a draft model on its target's completions of your code "
                                             "and report held-out acceptance before and after.")
    p.add_argument("--target", default="default", help="hub id, local dir, or 'default'")
    p.add_argument("--draft", default="default", help="the draft to start from: hub id, local dir, or 'default'")
    p.add_argument("--code", action="append", required=True, help="folder of your source files (repeatable)")
    p.add_argument("--out", required=True, help="folder for the distilled draft")
    p.add_argument("--work", default=None, help="samples and checkpoints (default: OUT.work); rerun to resume")
    p.add_argument("--eval-code", action="append", default=None,
                   help="held-out folder(s) to evaluate on instead of a split of --code")
    p.add_argument("--ext", action="append", default=None, help="file endings to read (default .py)")
    p.add_argument("--held-out", type=number(float, 0, 1, low_open=True), default=0.15,
                   help="share of --code files held out for the report")
    p.add_argument("--minutes", type=number(float, 0), default=30.0,
                   help="total budget: 2/3 writing target data, 1/3 training (evaluation comes on top)")
    p.add_argument("--gen-minutes", type=number(float, 0), default=None)
    p.add_argument("--train-minutes", type=number(float, 0), default=None)
    p.add_argument("--max-samples", type=number(int, 0), default=0, help="stop writing data after this many (0 = time)")
    p.add_argument("--max-steps", type=number(int, 0), default=0, help="stop training after this many steps (0 = time)")
    p.add_argument("--new-tokens", type=number(int, 1), default=32, help="target tokens per sample")
    p.add_argument("--gen-batch", type=number(int, 1), default=16)
    p.add_argument("--gen-workers", type=number(int, 1), default=1,
                   help="processes writing target data at once, each with its own target (a CPU: one per core)")
    p.add_argument("--batch-size", type=number(int, 1), default=DistillSettings.batch_size)
    p.add_argument("--lr", type=number(float, 0, low_open=True), default=DistillSettings.lr)
    p.add_argument("--eval-positions", type=number(int, 0), default=24, help="held-out positions per kind")
    p.add_argument("--eval-tokens", type=number(int, 1), default=32, help="new tokens per evaluation request")
    p.add_argument("--draft-length", type=number(int, 1), default=4, help="k of the report")
    p.add_argument("--out-dtype", default="auto", choices=("auto", "float32", "float16", "bfloat16"),
                   help="weights' dtype on disk (auto: as the draft was stored)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=number(int, 0), default=0, help="torch CPU threads (0 = torch default)")
    args = p.parse_args(argv)
    gen = args.gen_minutes if args.gen_minutes is not None else args.minutes * 2 / 3
    train = args.train_minutes if args.train_minutes is not None else args.minutes / 3
    args.gen_minutes, args.train_minutes = gen, train
    args.work = args.work or args.out.rstrip("/\\") + ".work"
    args.ext = tuple(args.ext or (".py",))
    return args


def data_job(args: argparse.Namespace, minutes: float):
    """The data workers' job from a command's arguments (training.distill and training.datastore)."""
    from training.distill_data import DataJob

    threads = max(1, args.threads // args.gen_workers)   # --threads shared out; 1 each when not set
    return DataJob(args.target, args.device, threads, tuple(args.code),
                   tuple(args.eval_code) if args.eval_code else None, args.ext, args.held_out, args.seed,
                   tuple(DEFAULT_KINDS.items()), minutes, args.new_tokens, args.gen_batch)


def log(msg: str) -> None:
    print(msg, flush=True)


def use_threads(threads: int, device: str) -> None:
    """torch's CPU threads for a training command: --threads, or the engine's own choice when 0."""
    import torch

    from engine.forward.threads import set_threads

    if threads:
        torch.set_num_threads(threads)
    else:
        set_threads(0, device)


def lr_at(s: DistillSettings, step: int, progress: float) -> float:
    if step < s.warmup_steps:
        return s.lr * (step + 1) / s.warmup_steps
    progress = min(max(progress, 0.0), 1.0)
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def make_batch(examples, pick: list[int], pad: int, prompt_weight: float):
    """Right-padded ids, next-token labels and per-label weights (answer 1, prompt prompt_weight, pad 0)."""
    import torch

    width = max(len(examples[i][0]) for i in pick)
    ids = torch.full((len(pick), width), pad, dtype=torch.long)
    weight = torch.zeros((len(pick), width))
    for row, i in enumerate(pick):
        x, is_answer = examples[i]
        ids[row, :len(x)] = torch.tensor(x)
        weight[row, :len(x)] = torch.tensor([1.0 if a else prompt_weight for a in is_answer])
    return ids[:, :-1], ids[:, 1:], weight[:, 1:]


def scored_logits(model, x, keep):
    """Logits at the positions `keep` selects, [n, vocab]: the base model's hidden states, then the
    output head on those rows only."""
    hidden = model.base_model(input_ids=x).last_hidden_state
    return model.get_output_embeddings()(hidden[keep])


def train_draft(draft, examples, target_model, s: DistillSettings, minutes: float, max_steps: int,
                seed: int, ckpt_path: str, device) -> dict:
    """Sequence-level distillation (weighted next-token loss on the target-written text), plus KL
    to the target's logits when it shares the vocabulary (target_model not None). Time-bounded,
    checkpointed, resumable."""
    import torch
    import torch.nn.functional as F

    model = draft.model
    model.requires_grad_(True).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=s.lr, betas=(0.9, 0.95))
    state = {"step": 0, "elapsed": 0.0, "examples": 0, "done": False}
    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        state = ckpt["state"]
        log(f"[train] resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min)")
        if state["done"] and state["elapsed"] < minutes * 60 and (not max_steps or state["step"] < max_steps):
            # A finished run given a bigger budget goes on as a new segment: warm-up and cosine
            # again over the added time, so the restart does not jump from the final lr to the peak.
            state.update(done=False, segment_step=state["step"], segment_elapsed=state["elapsed"])
            log(f"[train] continuing to {minutes:.1f} min as a new schedule segment")

    def save():
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "state": state}, ckpt_path + ".tmp")
        os.replace(ckpt_path + ".tmp", ckpt_path)

    if not examples:
        log("[train] no examples: the draft is left as it was")
        return state
    pad = draft.tokenizer.pad_token_id
    pad = pad if pad is not None else (draft.tokenizer.eos_token_id or 0)
    vocab = len(draft.tokenizer)
    budget = minutes * 60

    def progress() -> float:
        by_time = state["elapsed"] / budget if budget > 0 else 1.0
        return max(by_time, state["step"] / max_steps) if max_steps else by_time

    def schedule() -> tuple[int, float]:
        """(step, progress) within the current segment: the whole run unless it was extended."""
        s0, e0 = state.get("segment_step", 0), state.get("segment_elapsed", 0.0)
        by_time = (state["elapsed"] - e0) / (budget - e0) if budget > e0 else 1.0
        by_steps = (state["step"] - s0) / (max_steps - s0) if max_steps > s0 else 0.0
        return state["step"] - s0, max(by_time, by_steps)

    last_ckpt = window_t = time.time()
    window_loss, window_n = 0.0, 0
    while not state["done"] and progress() < 1.0:
        t0 = time.time()
        g = torch.Generator().manual_seed(seed * 1_000_003 + state["step"])
        pick = torch.randint(0, len(examples), (s.batch_size,), generator=g).tolist()
        x, y, w = (t.to(device) for t in make_batch(examples, pick, pad, s.prompt_weight))
        for group in opt.param_groups:
            group["lr"] = lr_at(s, *schedule())
        keep = w > 0      # logits only where the loss counts: the LM head is half the draft's cost
        logits = scored_logits(model, x, keep)[:, :vocab].float()
        w, y = w[keep], y[keep]
        loss = (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum()
        if target_model is not None:
            with torch.no_grad():
                t_logp = F.log_softmax(scored_logits(target_model, x, keep)[:, :vocab].float(), -1)
            kl = (t_logp.exp() * (t_logp - F.log_softmax(logits, -1))).sum(-1)
            loss = (1 - s.kd_weight) * loss + s.kd_weight * (kl * w).sum() / w.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["step"] += 1
        state["examples"] += len(pick)
        state["elapsed"] += time.time() - t0
        window_loss, window_n = window_loss + loss.item(), window_n + 1
        if state["step"] % s.log_every == 0:
            rate = window_n * s.batch_size / (time.time() - window_t)
            p = progress()
            eta = state["elapsed"] / max(p, 1e-9) * (1 - p)
            log(f"[train] step {state['step']} loss {window_loss / window_n:.3f} "
                f"lr {opt.param_groups[0]['lr']:.2e} {rate:.1f} examples/s ETA {eta / 60:.1f} min")
            window_t, window_loss, window_n = time.time(), 0.0, 0
        if time.time() - last_ckpt > s.checkpoint_minutes * 60:
            save()
            last_ckpt = time.time()
    state["done"] = True
    save()
    model.requires_grad_(False).eval()
    log(f"[train] done: {state['step']} steps, {state['examples']:,} examples, {state['elapsed'] / 60:.1f} min")
    return state


def save_draft(draft, out: str, dtype: str, info: dict) -> None:
    import torch

    os.makedirs(out, exist_ok=True)
    model = draft.model.to("cpu").to(getattr(torch, dtype))
    model.save_pretrained(out, safe_serialization=True)
    draft.tokenizer.save_pretrained(out)
    with open(os.path.join(out, "distill_info.json"), "w") as fh:
        json.dump(info, fh, indent=2, sort_keys=True)
    draft.model.to(torch.float32)


def stored_dtype(name: str) -> str:
    from transformers import AutoConfig

    from engine.load.models import resolve_name

    try:
        dtype = AutoConfig.from_pretrained(resolve_name(name, "draft")).dtype
    except Exception:  # noqa: BLE001 - unknown: keep full precision
        return "float32"
    dtype = str(dtype or "float32").replace("torch.", "")
    return dtype if dtype in ("float32", "float16", "bfloat16") else "float32"


def eval_positions(files, per_kind: int) -> list:
    from training.editor_positions import spread_positions

    per_file = max(1, math.ceil(per_kind / max(len(files), 1)))
    out = []
    for kind in EVAL_KINDS:
        got = [p for f in files for p in spread_positions(f, kind, per_file)]
        out += got[:per_kind]
    return out


def main(argv: list[str] | None = None, prog: str = "python -m training.distill") -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv, prog)
    from training.editor_positions import training_and_held_out

    try:
        train_files, held = training_and_held_out(args.code, args.eval_code, args.ext, args.held_out, args.seed)
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2

    import torch

    from completion.templates import load_template
    from engine import load_model
    from engine.engine import same_vocabulary
    from engine.load.models import ModelLoadError
    from completion.context import TokenCounter
    from completion.pipeline import draft_prompt_cap
    from training.distill_data import DataWorkerFailed, draft_example, generate_in_workers
    from training.distill_eval import EvalSettings, measure, report_lines

    use_threads(args.threads, args.device)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)
    log(f"files: {len(train_files)} training ({sum(len(f.text) for f in train_files):,} chars), "
        f"{len(held)} held out; work folder {args.work}")
    try:
        target = load_model(args.target, "target", device=args.device, dtype="float32")
        draft = load_model(args.draft, "draft", device=args.device, dtype="float32")
    except ModelLoadError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    if args.out_dtype == "auto":   # as the draft was stored (loading it for training set float32)
        args.out_dtype = stored_dtype(args.draft)
    t_template, d_template = load_template(target.tokenizer), load_template(draft.tokenizer)
    shared = same_vocabulary(target.tokenizer, draft.tokenizer)
    log(f"target {t_template.family} ({'/'.join(t_template.layouts)}), draft {d_template.family}; "
        f"{'same vocabulary: sequence + token-level KL' if shared else 'different tokenizers: sequence-level'}")

    t0 = time.time()
    try:
        samples = generate_in_workers(
            data_job(args, args.gen_minutes), args.gen_workers, target, t_template, train_files, args.work, args.seed,
            args.max_samples, log)
    except DataWorkerFailed as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    limit = draft.max_positions or 4096
    # the draft learns from the prompts the editor will give it (its config's prompt length)
    cap, count = draft_prompt_cap(draft.model), TokenCounter(d_template.encode_infill)
    examples = [ex for ex in (draft_example(d_template, s, cap, count) for s in samples) if len(ex[0]) <= limit]
    log(f"[data] {len(examples):,} draft examples, {sum(sum(m) for _, m in examples):,} answer tokens")

    settings = DistillSettings(lr=args.lr, batch_size=args.batch_size)
    state = train_draft(draft, examples, target.model if shared else None, settings, args.train_minutes,
                        args.max_steps, args.seed, os.path.join(args.work, "ckpt.pt"), draft.device)
    info = {"target": args.target, "started_from": args.draft, "code": args.code, "eval_code": args.eval_code,
            "training_files": len(train_files), "held_out_files": len(held), "samples": len(samples),
            "answer_tokens": sum(sum(m) for _, m in examples), "steps": state["step"],
            "train_minutes": round(state["elapsed"] / 60, 2), "seed": args.seed,
            "settings": asdict(settings), "same_vocabulary": shared}
    save_draft(draft, args.out, args.out_dtype, info)
    log(f"saved the distilled draft to {args.out} ({(time.time() - t0) / 60:.1f} min)")

    positions = eval_positions(held, args.eval_positions)
    log(f"[eval] {len(positions)} held-out positions ({', '.join(EVAL_KINDS)}), k={args.draft_length}")
    result = measure(args.target, {"before": args.draft, "after": args.out}, positions,
                     EvalSettings(args.draft_length, args.eval_tokens, args.device, args.threads), log)
    report = {label: {kind: t.as_dict() for kind, t in tallies.items()} for label, tallies in result.by_kind.items()}
    info["report"] = {"draft_length": args.draft_length, "eval_tokens": args.eval_tokens,
                      "same_output": result.same_output, **report}
    with open(os.path.join(args.out, "distill_info.json"), "w") as fh:
        json.dump(info, fh, indent=2, sort_keys=True)
    for line in report_lines(result, args.draft_length):
        log(line)
    if not result.same_output:
        log("warning: the drafts gave different outputs (the engine should be lossless)")
    before, after = result.by_kind["before"].get("all"), result.by_kind["after"].get("all")
    if before and after:
        log(f"held-out acceptance {before.acceptance:.3f} -> {after.acceptance:.3f}, tokens per target call "
            f"{before.tokens_per_call:.2f} -> {after.tokens_per_call:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
