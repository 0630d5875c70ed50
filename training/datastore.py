"""Make a datastore of a target's own answers on your code (`specfill datastore`).

    specfill datastore --target T --code DIR --out FILE [--minutes 20]
    python -m training.datastore  (same options)

1. Split the source files under --code into training and held-out files, as `specfill distill`
   does (or --eval-code names the held-out files).
2. The target greedily completes editor positions of the training files (end of a code line,
   fresh indented line, mid-line, left to right), each prompt in its own format, for --minutes;
   samples go to --work/samples.jsonl (--gen-workers N: N processes, worker i > 0 writing
   samples.i.jsonl), so the same command continues them. Samples written by
   `specfill distill` (its OUT.work/samples.jsonl) can be added with --samples.
3. The answers, each after the last ids of its prompt, are written to --out (engine/drafters/datastore.py).
   Put it in the target's directory as datastore.npz, or name it in the `datastore` setting.
4. Report: tokens per target call and acceptance of prompt lookup at held-out positions,
   without and with the datastore (greedy, --eval-tokens new tokens), both in one run.

No training: the datastore is a table, ready as soon as the target has answered.
"""
from __future__ import annotations

import os
import sys
import time

from training.distill import data_job, eval_positions, log, use_threads


def parse_args(argv, prog: str):
    from lsp.arguments import OneLineParser, number

    p = OneLineParser(prog=prog, description="Make a datastore of a target's own answers on your code, "
                                             "for prompt lookup to draft from, and report what it brings.")
    p.add_argument("--target", default="default", help="hub id, local dir, or 'default'")
    p.add_argument("--code", action="append", required=True, help="folder of your source files (repeatable)")
    p.add_argument("--out", required=True, help="the datastore file to write (.npz)")
    p.add_argument("--work", default=None, help="the target's answers (default: OUT.work); rerun to add more")
    p.add_argument("--samples", action="append", default=[],
                   help="more answers: a samples.jsonl written by `specfill distill` for the same target")
    p.add_argument("--eval-code", action="append", default=None,
                   help="held-out folder(s) to evaluate on instead of a split of --code")
    p.add_argument("--ext", action="append", default=None, help="file endings to read (default .py)")
    p.add_argument("--held-out", type=number(float, 0, 1, low_open=True), default=0.15,
                   help="share of --code files held out for the report")
    p.add_argument("--minutes", type=number(float, 0), default=20.0, help="time the target spends answering")
    p.add_argument("--max-samples", type=number(int, 0), default=0, help="stop after this many answers (0 = time)")
    p.add_argument("--new-tokens", type=number(int, 1), default=48, help="target tokens per answer")
    p.add_argument("--gen-batch", type=number(int, 1), default=16)
    p.add_argument("--gen-workers", type=number(int, 1), default=1,
                   help="processes answering at once, each with its own target (a CPU: one per core)")
    p.add_argument("--eval-positions", type=number(int, 0), default=24, help="held-out positions per kind")
    p.add_argument("--eval-tokens", type=number(int, 1), default=48, help="new tokens per evaluation request")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=number(int, 0), default=0, help="torch CPU threads (0 = torch default)")
    args = p.parse_args(argv)
    args.work = args.work or args.out.rstrip("/\\") + ".work"
    args.ext = tuple(args.ext or (".py",))
    return args


def answer_ids(template, sample) -> tuple[list[int], list[int]]:
    """A sample as (the target's prompt ids, its answer's ids), re-encoded from the text."""
    from training.distill_data import prompt_ids

    prompt = prompt_ids(template, sample.prefix, sample.suffix, sample.layout)
    answer = template.encode(sample.middle) if sample.layout == "prefix" else template.encode_infill(sample.middle)
    return prompt, answer


def compare(target: str, store: str, positions, new_tokens: int, device: str, threads: int) -> dict:
    """Prompt lookup without and with the datastore at the positions: label -> Tally (the
    requests alternate between the two engines, so a busy machine slows both alike)."""
    from completion.templates import load_template
    from engine import LocalEngine, EngineConfig, GenerationSettings
    from training.distill_data import fit, prompt_ids
    from training.distill_eval import Tally

    engines = {label: LocalEngine(EngineConfig(target=target, draft="ngram", datastore=path, device=device,
                                          threads=threads, kv_reuse=False))
               for label, path in (("without", "none"), ("with", store))}
    template = load_template(engines["with"].target.tokenizer)
    limit = (engines["with"].target.max_positions or 4096) - new_tokens
    gen = GenerationSettings(max_new_tokens=new_tokens)
    tallies = {label: Tally() for label in engines}
    for pos in positions:
        layout = "prefix" if pos.kind == "l2r" else template.default_layout
        fitted = fit(template, pos, layout, limit)
        if fitted is None:
            continue
        ids = prompt_ids(template, fitted[0].prefix, fitted[0].suffix, layout)
        outs = set()
        for label, engine in engines.items():
            out = engine.generate(ids, None, gen, stop_ids=template.stop_ids)
            outs.add(tuple(out.token_ids))
            tallies[label].add(out.stats)
        if len(outs) != 1:   # lookup is lossless: a difference is a bug, never a figure
            raise AssertionError(f"outputs differ at a held-out position of {pos.path}")
    return tallies


def main(argv: list[str] | None = None, prog: str = "python -m training.datastore") -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv, prog)
    from training.editor_positions import training_and_held_out

    try:
        train_files, held = training_and_held_out(args.code, args.eval_code, args.ext, args.held_out, args.seed)
    except ValueError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    missing = [s for s in args.samples if not os.path.isfile(s)]
    if missing:
        print(f"{prog}: no such samples file: {missing[0]}", file=sys.stderr)
        return 2

    from completion.templates import load_template
    from engine import load_model
    from engine.drafters.datastore import save
    from engine.load.models import ModelLoadError
    from training.distill_data import DataWorkerFailed, generate_in_workers, read_samples

    use_threads(args.threads, args.device)
    os.makedirs(args.work, exist_ok=True)
    try:
        target = load_model(args.target, "target", device=args.device, dtype="float32")
    except ModelLoadError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    template = load_template(target.tokenizer)
    log(f"files: {len(train_files)} training, {len(held)} held out; work folder {args.work}")
    t0 = time.time()
    try:
        samples = generate_in_workers(
            data_job(args, args.minutes), args.gen_workers, target, template, train_files, args.work, args.seed,
            args.max_samples, log)
    except DataWorkerFailed as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    for path in args.samples:
        samples += read_samples(path)
    stored = save(args.out, [answer_ids(template, s) for s in samples], target.tokenizer.get_vocab())
    log(f"[store] {len(samples):,} answers, {stored:,} ids -> {args.out} "
        f"({os.path.getsize(args.out) / 1e6:.2f} MB, {(time.time() - t0) / 60:.1f} min)")

    positions = eval_positions(held, args.eval_positions)
    log(f"[eval] {len(positions)} held-out positions, prompt lookup without and with the datastore")
    tallies = compare(args.target, args.out, positions, args.eval_tokens, args.device, args.threads)
    print("| prompt lookup | positions | acceptance | tokens per target call |")
    print("|---|---|---|---|")
    for label, t in tallies.items():
        print(f"| {label} the datastore | {t.positions} | {t.acceptance:.3f} | {t.tokens_per_call:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
