"""How much text the draft model's prompt should hold, in the draft's own tokens.

    python -m bench.draft_window [--prompt-tokens own,window,auto,128,256,384] [--draft-length 4]
                                 [--per-file 6] [--max-files 3] [--target T] [--draft D]

At end-of-line positions of the held-out files in bench/files and of real held-out files (the
end-of-line workloads of `bench.suite`), the engine decodes with the draft model alone (prompt
lookup off, a fixed draft length, caches cleared before each position) once per draft prompt:

- `own`: cut to the draft's own token budgets (for the shipped pair about twice the target's
  text, the draft's context being 1024 positions and the target's 512);
- `window`: the lines and extra chunks of the target's window;
- `auto`: what the pipeline builds (`draftPromptTokens: auto`: the draft config's
  `specfill_draft_prompt_tokens`, else `window`);
- N: the N draft tokens nearest the cursor within the target's window (`draftPromptTokens: N`).

Prints acceptance, tokens per target call, the draft's prompt length, the time spent drafting
(its prefill included) and the request's engine time (means per position) for each, and checks
every prompt gives the target's text.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import add_model_options, bench_parser, usage_error
from completion.pipeline import MIN_DRAFT_PROMPT_TOKENS
from lsp.arguments import number
from training.distill_eval import Tally

PROG = "python -m bench.draft_window"


@dataclass
class Row:
    """One draft prompt's figures over the positions: acceptance and tokens per target call as
    the distillation report counts them, and what the prompt cost."""
    tally: Tally = field(default_factory=Tally)
    prompt_tokens: int = 0
    draft_ms: float = 0.0
    latency_ms: float = 0.0

    def add(self, stats, prompt_tokens: int) -> None:
        self.tally.add(stats)
        self.prompt_tokens += prompt_tokens
        self.draft_ms += stats.draft_ms
        self.latency_ms += stats.latency_ms

    def line(self, name: str) -> str:
        n = max(1, self.tally.positions)
        return (f"| {name} | {self.tally.acceptance:.3f} | {self.tally.tokens_per_call:.2f} | "
                f"{self.prompt_tokens / n:.0f} | {self.draft_ms / n:.1f} | {self.latency_ms / n:.0f} |")


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__)
    add_model_options(ap)
    ap.add_argument("--prompt-tokens", default="own,window,auto,128,256,384",
                    help="comma-separated draft prompts: own, window, auto or a token count")
    ap.add_argument("--draft-length", type=number(int, 1), default=4, help="tokens the draft proposes per round")
    ap.add_argument("--per-file", type=number(int, 1), default=6, help="end-of-line positions per file")
    ap.add_argument("--max-files", type=number(int, 1), default=3, help="files of each kind (bench/files, real)")
    ap.add_argument("--max-new-tokens", type=number(int, 1), default=64)
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.prompt_tokens.split(",") if v.strip()]
    bad = [v for v in variants if v not in ("own", "window", "auto") and not (v.isdigit() and int(v) >= MIN_DRAFT_PROMPT_TOKENS)]
    if bad or not variants:
        return usage_error(PROG, f"--prompt-tokens: expected own, window, auto or integers >= {MIN_DRAFT_PROMPT_TOKENS}, got {args.prompt_tokens!r}")

    import dataclasses

    from bench.end_of_line import positions_in, real_positions
    from completion.context import parse_document, uri_to_path
    from completion.pipeline import CompletionOptions, CompletionPipeline
    from engine import LocalEngine, EngineConfig, GenerationSettings
    from engine.forward.threads import set_threads

    try:
        engine = LocalEngine(EngineConfig(target=args.target, draft=args.draft, device="cpu", lookup=False))
    except Exception as err:   # an unknown model: one line, not a traceback
        return usage_error(PROG, err)
    if engine.draft is None:
        return usage_error(PROG, "--draft: a draft model is needed")
    set_threads(1, "cpu")
    pipe = CompletionPipeline(engine)
    base = CompletionOptions(max_new_tokens=args.max_new_tokens)
    gen = GenerationSettings(max_new_tokens=args.max_new_tokens, draft_length=args.draft_length)
    draft_template = pipe.template("draft")
    positions = (positions_in(Path(__file__).parent / "files", args.max_files, args.per_file)
                 + real_positions(args.max_files, args.per_file))
    names = {"own": "draft's own budgets", "window": "target's window",
             "auto": f"auto ({pipe.draft_prompt_tokens(base) or 'window'})"}
    rows = {v: Row() for v in variants}
    same = 0
    for i, pos in enumerate(positions):
        uri = f"file:///bench/draft-window/{i}/{pos.file}"
        cur = parse_document(pos.text, pos.line, pos.character)
        prompts = pipe.build_prompts(uri, cur, base)
        texts = set()
        for v, row in rows.items():
            if v == "own":
                draft_ids = pipe._prompt(draft_template, engine.draft, uri, cur, base, prompts.draft_layout,
                                         uri_to_path(uri))[0]
            else:
                cap = {"window": 1 << 20, "auto": "auto"}.get(v) or int(v)
                draft_ids = pipe.build_prompts(uri, cur, dataclasses.replace(base, draft_prompt_tokens=cap)).draft_ids()
            engine.clear_caches()
            out = engine.generate(prompts.target_ids, draft_ids, gen, stop_ids=prompts.target.stop_ids)
            row.add(out.stats, len(draft_ids))
            texts.add(tuple(out.token_ids))
        same += len(texts) == 1
    print(f"Draft prompt: end of line, {len(positions)} positions; target {args.target}, draft {args.draft}, "
          f"draft length {args.draft_length}, prompt lookup off\n")
    print("| draft prompt | acceptance | tokens / target call | draft prompt tokens | drafting ms | request ms |")
    print("|---|---|---|---|---|---|")
    for v, row in rows.items():
        print(row.line(names.get(v, f"{v} tokens")))
    print(f"\nsame output with every prompt: {same}/{len(positions)}")
    return 0 if same == len(positions) else 1


if __name__ == "__main__":
    sys.exit(main())
