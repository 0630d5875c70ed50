"""Held-out acceptance of a pair's drafters at editor positions, the measurements behind the
model card's and docs/benchmarks.md's acceptance figures, on the evaluation set or the tuning set:

    python -m bench.acceptance [--files eval|tuning|DIR] [--positions 24] [--threads 1] [--out FILE]

Positions: the cursor at the end of a code line and on a fresh indented line, --positions of
each spread over the files (`training.distill.eval_positions`), each prompt FIM in the target's
default layout and trimmed at line ends to the target's window, greedy. Per drafter:

- the draft model alone (prompt lookup off), draft length 4, 32 new tokens, its prompt cut as
  the editor cuts it: `training.distill_eval` (`specfill distill`'s report);
- prompt lookup alone, without and with the target's datastore, 48 new tokens:
  `training.datastore.compare` (`specfill datastore`'s report). Its draft length is auto: the
  cost-aware controller cuts each proposal by the costs it measures, so these two rows move from
  run to run with the machine's timings (the draft model's, at a fixed length, do not).

Acceptance = accepted / drafted tokens; tokens per target call = new tokens / target passes
after the prefill. Prompt lookup's outputs with and without the datastore must be the same
(lossless), else the command fails.
`--files eval` (bench/eval) is code that no shipped model, datastore or tuning decision has
seen; `--files tuning` (bench/files) is the set they were chosen on, so its figures flatter them.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from bench.eval import file_set
from lsp.arguments import OneLineParser, number

PROG = "python -m bench.acceptance"
MODEL_TOKENS, MODEL_DRAFT_LENGTH = 32, 4      # training.distill_eval's defaults
LOOKUP_TOKENS = 48                            # training.datastore's --eval-tokens


def table(rows: list[tuple[str, object]]) -> list[str]:
    """Markdown rows of (drafter, Tally)."""
    lines = ["| drafter | positions | acceptance | tokens per target call |", "|---|---|---|---|"]
    lines += [f"| {label} | {t.positions} | {t.acceptance:.3f} | {t.tokens_per_call:.2f} |" for label, t in rows]
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--files", type=file_set, default=file_set("eval"),
                   help="eval (bench/eval, the default), tuning (bench/files) or a folder of .py files")
    p.add_argument("--target", default="default")
    p.add_argument("--draft", default="default")
    p.add_argument("--datastore", default="auto", help="auto (the target's own), or a file")
    p.add_argument("--positions", type=number(int, 1), default=24, help="positions of each kind")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=number(int, 0), default=1)
    p.add_argument("--out", type=Path, default=None, help="also write what is printed to this file")
    args = p.parse_args(argv)

    from engine.drafters.datastore import DatastoreError, resolve
    from engine.load.models import ModelLoadError, resolve_name
    from training.datastore import compare
    from training.distill import EVAL_KINDS, eval_positions, use_threads
    from training.distill_eval import EvalSettings, measure
    from training.editor_positions import read_sources

    try:
        sources = read_sources([str(args.files)])
        if not sources:
            raise FileNotFoundError(f"no usable .py files in {args.files}")
        store = resolve(args.datastore, resolve_name(args.target, "target"))
    except (FileNotFoundError, DatastoreError, ModelLoadError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    use_threads(args.threads, args.device)
    positions = eval_positions(sources, args.positions)
    where = args.files.resolve()
    where = where.relative_to(Path.cwd()) if where.is_relative_to(Path.cwd()) else where
    head = f"{len(positions)} positions ({', '.join(EVAL_KINDS)}) in {len(sources)} files of {where}"
    print(head, flush=True)
    t0 = time.perf_counter()
    model = measure(args.target, {"draft": args.draft}, positions,
                    EvalSettings(MODEL_DRAFT_LENGTH, MODEL_TOKENS, args.device, args.threads), log=lambda _: None)
    rows = [(f"draft model alone, k={MODEL_DRAFT_LENGTH}, {MODEL_TOKENS} tokens, {kind}", tally)
            for kind, tally in sorted(model.by_kind["draft"].items(), key=lambda kv: (kv[0] == "all", kv[0]))]
    if store is not None:
        lookup = compare(args.target, str(store), positions, LOOKUP_TOKENS, args.device, args.threads)
        rows += [(f"prompt lookup {label} the datastore, {LOOKUP_TOKENS} tokens", lookup[label])
                 for label in ("without", "with")]
    text = "\n".join([head, "", *table(rows), "",
                      f"{time.perf_counter() - t0:.0f} s, {args.threads} thread(s); `{' '.join([PROG, *argv])}`"])
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
