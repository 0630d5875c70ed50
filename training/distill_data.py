"""On-policy distillation data: the target's own greedy completions at editor positions of the
user's code, and the same text written in the draft's own prompt format.

Each model's prompt is built by its completion template (completion/templates.py), exactly as
the editor builds it; the target's answer is shared as text (its tokens' bytes, as the engine
shares text between vocabularies) and re-encoded by the draft's tokenizer.
Samples are appended to a JSON-lines file as they are made, so a stopped run resumes.
"""
from __future__ import annotations

import itertools
import json
import os
import random
import time
from dataclasses import asdict, dataclass

import torch

from training.editor_positions import Position

GROUP = 4   # batches per group: prompts of a group are sorted by length so padding stays small


@dataclass
class Sample:
    kind: str
    layout: str      # "psm" | "spm" | "prefix" (left to right, no FIM sentinels)
    prefix: str
    suffix: str
    middle: str      # what the target wrote, as text
    ended: bool      # the target stopped by itself (an end token) within the budget


def prompt_ids(template, pos_prefix: str, pos_suffix: str, layout: str) -> list[int]:
    """A model's prompt in its own format: FIM through its template, or left to right."""
    if layout == "prefix":
        head = [template.bos_id] if template.bos_id is not None else []
        return head + template.encode(pos_prefix)
    return template.build(pos_prefix, pos_suffix, template.resolve_layout(layout))


def draft_prompt_ids(template, pos_prefix: str, pos_suffix: str, layout: str, cap: int | None,
                     count=None) -> list[int]:
    """The draft's prompt as the completion pipeline builds it: the text nearest the cursor
    within `cap` of its tokens (completion.pipeline.draft_window, the editor's budgets and
    window step), or all of it when `cap` is None. `count`: a TokenCounter to reuse."""
    if cap is None:
        return prompt_ids(template, pos_prefix, pos_suffix, layout)
    from completion.context import TokenCounter
    from completion.pipeline import nearest_text

    prefix, suffix = nearest_text(pos_prefix, pos_suffix, count or TokenCounter(template.encode_infill), cap)
    return prompt_ids(template, prefix, suffix, layout)


def pick_layout(template, kind: str, rng: random.Random) -> str:
    """Left to right for l2r; else the editor's layout two times in three, the other one the rest."""
    if kind == "l2r" or template.family == "plain":
        return "prefix"
    layouts = template.layouts
    if len(layouts) > 1 and rng.random() < 1 / 3:
        return layouts[1]
    return layouts[0]


def fit(template, pos: Position, layout: str, limit: int) -> tuple[Position, list[int]] | None:
    """Drop the prefix's first lines (then the suffix's last) until the prompt fits in `limit`."""
    prefix, suffix = pos.prefix, pos.suffix
    for _ in range(200):
        ids = prompt_ids(template, prefix, suffix, layout)
        if len(ids) <= limit:
            return Position(pos.kind, pos.path, prefix, suffix), ids
        if suffix.count("\n") > 1:
            suffix = suffix[:suffix.rstrip("\n").rfind("\n") + 1]
        elif "\n" in prefix:
            prefix = prefix[prefix.index("\n") + 1:]
        else:
            return None
    return None


def read_samples(path: str) -> list[Sample]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return [Sample(**json.loads(line)) for line in fh if line.strip()]


@torch.no_grad()
def generate_samples(target, template, make_positions, path: str, minutes: float, max_new_tokens: int,
                     batch: int, seed: int, max_samples: int = 0, log=print) -> list[Sample]:
    """Target's greedy answers at `make_positions(seed)` (an endless iterator) for `minutes`
    (or until `max_samples`), appended to `path`; resumes after the samples already there."""
    samples = read_samples(path)
    # A resumed run draws from a stream seeded by where the file ends: still deterministic.
    seed = seed + 1_000_003 * len(samples)
    rng = random.Random(seed)
    positions = make_positions(seed)
    model, vocab = target.model, target.vocab
    limit = min(target.max_positions or 4096, 4096) - max_new_tokens
    stops = sorted(template.stop_ids)
    pad = target.tokenizer.pad_token_id
    pad = pad if pad is not None else stops[0]
    t0 = last_log = time.time()
    tokens = 0
    start_count = len(samples)
    while time.time() - t0 < minutes * 60 and not (max_samples and len(samples) >= max_samples):
        group = []
        for pos in itertools.islice(positions, batch * GROUP):
            layout = pick_layout(template, pos.kind, rng)
            fitted = fit(template, pos, layout, limit)
            if fitted is not None:
                group.append((fitted[0], layout, fitted[1]))
        group.sort(key=lambda g: len(g[2]))
        made = []
        for i in range(0, len(group), batch):
            part = group[i:i + batch]
            width = max(len(ids) for _, _, ids in part)
            x = torch.tensor([[pad] * (width - len(ids)) + ids for _, _, ids in part], device=target.device)
            mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for _, _, ids in part],
                                device=target.device)
            out = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=stops, pad_token_id=pad)
            for (pos, layout, _), row in zip(part, out[:, width:].tolist()):
                ended = False
                for j, t in enumerate(row):
                    if t in template.stop_ids:
                        row, ended = row[:j], True
                        break
                tokens += len(row)
                middle = vocab.bytes_of(row).decode("utf-8", errors="replace")
                made.append(Sample(pos.kind, layout, pos.prefix, pos.suffix, middle, ended))
        with open(path, "a", encoding="utf-8") as fh:   # whole groups: a resume replays whole groups
            for s in made:
                fh.write(json.dumps(asdict(s)) + "\n")
        samples += made
        if time.time() - last_log > 20:
            last_log = time.time()
            rate = tokens / (last_log - t0)
            log(f"[data] {len(samples):,} samples, {tokens:,} target tokens this run, {rate:,.0f} tok/s, "
                f"{max(0.0, minutes - (last_log - t0) / 60):.1f} min left")
    log(f"[data] {len(samples):,} samples ({len(samples) - start_count:,} new, {tokens:,} target tokens) "
        f"in {(time.time() - t0) / 60:.1f} min")
    return samples


@dataclass(frozen=True)
class DataJob:
    """What a data worker process rebuilds on its own (all picklable): the target, the training
    files (the same split as its command's) and the generation budget."""
    target: str
    device: str
    threads: int
    code: tuple[str, ...]
    eval_code: tuple[str, ...] | None
    ext: tuple[str, ...]
    held_out: float
    split_seed: int
    kinds: tuple[tuple[str, float], ...]
    minutes: float
    new_tokens: int
    batch: int


def shard_path(work: str, worker: int) -> str:
    """Worker 0 writes samples.jsonl (what a single-process run writes), worker i samples.i.jsonl."""
    return os.path.join(work, "samples.jsonl" if worker == 0 else f"samples.{worker}.jsonl")


def read_shards(work: str) -> list[Sample]:
    """The samples of every worker that wrote to `work`, worker by worker (a fixed order, so
    training picks the same examples on every run)."""
    out = read_samples(shard_path(work, 0))
    worker = 1
    while os.path.exists(shard_path(work, worker)):
        out += read_samples(shard_path(work, worker))
        worker += 1
    return out


def shard_max(max_samples: int, workers: int, worker: int) -> int:
    """Worker `worker`'s share of a --max-samples budget (0: no limit)."""
    if not max_samples:
        return 0
    return max_samples // workers + (worker < max_samples % workers)


def _data_worker(job: DataJob, work: str, worker: int, seed: int, max_samples: int) -> None:
    """One extra data process: its own target, the command's training files, its own seeded stream."""
    from completion.templates import load_template
    from engine import load_model
    from training.editor_positions import training_and_held_out

    torch.set_num_threads(max(1, job.threads))
    train_files, _ = training_and_held_out(list(job.code), list(job.eval_code) if job.eval_code else None,
                                           job.ext, job.held_out, job.split_seed)
    target = load_model(job.target, "target", device=job.device, dtype="float32")
    _generate_shard(job, target, load_template(target.tokenizer), train_files, work, worker, seed, max_samples,
                    lambda msg: print(f"{msg} (worker {worker})", flush=True))


def _generate_shard(job: DataJob, target, template, train_files, work: str, worker: int, seed: int,
                    max_samples: int, log) -> None:
    """generate_samples for one worker: positions of the job's kinds over the training files."""
    from training.editor_positions import random_positions

    kinds = dict(job.kinds)
    generate_samples(target, template, lambda s: random_positions(train_files, kinds, s), shard_path(work, worker),
                     job.minutes, job.new_tokens, job.batch, seed, max_samples, log)


class DataWorkerFailed(RuntimeError):
    """A data worker process ended with an error (its traceback went to stderr); what it wrote
    stays in its samples file, and a rerun of the command resumes it."""


def generate_in_workers(job: DataJob, workers: int, target, template, train_files, work: str, seed: int,
                        max_samples: int = 0, log=print) -> list[Sample]:
    """generate_samples in `workers` processes at once (on a CPU, one per core), at positions of
    the job's kinds over `train_files`. This process is worker 0, with the command's seed and
    samples.jsonl, so one worker writes exactly what generate_samples alone writes; worker i
    (seed + i) loads the target and the files again and appends to samples.i.jsonl. Each resumes
    its own file. Returns every worker's samples (read_shards)."""
    import multiprocessing

    procs = []
    threads = torch.get_num_threads()
    if workers > 1:
        torch.set_num_threads(max(1, job.threads))   # one core each, this process too
        ctx = multiprocessing.get_context("spawn")   # no forked torch state
        for i in range(1, workers):
            p = ctx.Process(target=_data_worker, args=(job, work, i, seed + i, shard_max(max_samples, workers, i)),
                            daemon=True)
            p.start()
            procs.append(p)
    try:
        _generate_shard(job, target, template, train_files, work, 0, seed, shard_max(max_samples, workers, 0), log)
    finally:
        torch.set_num_threads(threads)
    failed = []
    for i, p in enumerate(procs, start=1):
        p.join()
        if p.exitcode != 0:
            failed.append(f"worker {i} ({shard_path(work, i)}) exited with {p.exitcode}")
    if failed:
        raise DataWorkerFailed("data generation failed: " + "; ".join(failed)
                               + " (see the errors above; rerun to resume what was written)")
    samples = read_shards(work)
    if workers > 1:
        log(f"[data] {len(samples):,} samples from {workers} workers")
    return samples


def draft_example(template, sample: Sample, cap: int | None = None, count=None) -> tuple[list[int], list[int]]:
    """(ids, is_answer) of one sample in the draft's own format: its prompt (as the pipeline
    would build it: `draft_prompt_ids`), then the target's text in its tokens, then its end
    token where the target stopped."""
    prompt = draft_prompt_ids(template, sample.prefix, sample.suffix, sample.layout, cap, count)
    answer = template.encode_infill(sample.middle)
    if sample.ended:
        eos = template.tokenizer.eos_token_id
        end = eos if sample.layout == "prefix" or not template.stop_ids else template.stop_ids[0]
        if end is not None:
            answer = answer + [end]
    return prompt + answer, [0] * len(prompt) + [1] * len(answer)
