"""Held-out acceptance of draft models, measured through the real engine.

Every draft gets its own LocalEngine (the same target, prompt lookup off, so the figures are the
draft model's) and the same positions; requests alternate between the drafts position by
position, so a busy machine slows them alike. Greedy, a fixed draft length (k = 4 by default).
Acceptance = accepted / drafted tokens; tokens per target call = new tokens / target forward
passes after the prefill. Each draft's prompt is cut as the editor cuts it (its config's
specfill_draft_prompt_tokens; `--prompt-tokens` overrides it for every draft).

    python -m training.distill_eval --eval-code DIR | --code DIR [--draft LABEL=DIR ...]
        [--prompt-tokens auto|none|N] [--eval-positions 24] [--draft-length 4] [--eval-tokens 32]

(the report of `python -m training.distill`, for drafts you already have: the positions are the
same for the same --code, --eval-code, --held-out and --seed).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from completion.pipeline import MIN_DRAFT_PROMPT_TOKENS, draft_prompt_cap
from training.distill_data import draft_prompt_ids, fit
from training.editor_positions import Position


@dataclass
class Tally:
    positions: int = 0
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0
    decode_calls: int = 0

    def add(self, stats) -> None:
        self.positions += 1
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.new_tokens += stats.new_tokens
        self.decode_calls += stats.target_calls - (1 if stats.prefill_tokens else 0)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_call(self) -> float:
        return self.new_tokens / self.decode_calls if self.decode_calls else 0.0

    def as_dict(self) -> dict:
        return {"positions": self.positions, "acceptance": round(self.acceptance, 3),
                "tokens_per_target_call": round(self.tokens_per_call, 3),
                "drafted": self.drafted, "accepted": self.accepted}


@dataclass
class EvalSettings:
    draft_length: int = 4
    max_new_tokens: int = 32
    device: str = "auto"
    threads: int = 0
    prompt_tokens: int | str = "auto"   # the draft prompts' length: auto (each draft's config), none (all the text) or N


@dataclass
class EvalResult:
    by_kind: dict = field(default_factory=dict)    # draft label -> kind -> Tally
    same_output: bool = True                        # every draft gave the same text (lossless)


def measure(target: str, drafts: dict[str, str], positions: list[Position],
            settings: EvalSettings, log=print) -> EvalResult:
    """Acceptance and tokens per target call of each draft (label -> model dir) at the positions
    (FIM in the editor's layout; `l2r` positions left to right)."""
    from completion.context import TokenCounter
    from completion.templates import load_template
    from engine import LocalEngine, EngineConfig, GenerationSettings

    engines = {label: LocalEngine(EngineConfig(target=target, draft=path, device=settings.device,
                                          threads=settings.threads, lookup=False, kv_reuse=False))
               for label, path in drafts.items()}
    first = next(iter(engines.values()))
    t_template = load_template(first.target.tokenizer)
    d_templates = {label: load_template(e.draft.tokenizer) for label, e in engines.items()}
    caps = {label: (draft_prompt_cap(e.draft.model) if settings.prompt_tokens == "auto"   # as the editor cuts it
                    else None if settings.prompt_tokens == "none" else settings.prompt_tokens)
            for label, e in engines.items()}
    counters = {label: TokenCounter(t.encode_infill) for label, t in d_templates.items()}
    gen = GenerationSettings(max_new_tokens=settings.max_new_tokens, draft_length=settings.draft_length)
    limit = (first.target.max_positions or 4096) - settings.max_new_tokens
    result = EvalResult({label: {} for label in drafts})
    for n, pos in enumerate(positions):
        layout = "prefix" if pos.kind == "l2r" else t_template.default_layout
        fitted = fit(t_template, pos, layout, limit)   # trimmed at line ends, as the editor budgets a prompt
        if fitted is None:
            continue
        pos, target_ids = fitted
        texts = set()
        for label, engine in engines.items():
            draft_ids = draft_prompt_ids(d_templates[label], pos.prefix, pos.suffix, layout,
                                         caps[label], counters[label])
            out = engine.generate(target_ids, draft_ids, gen, stop_ids=t_template.stop_ids)
            texts.add(tuple(out.token_ids))
            for kind in (pos.kind, "all"):
                result.by_kind[label].setdefault(kind, Tally()).add(out.stats)
        result.same_output &= len(texts) == 1
        if (n + 1) % 10 == 0:
            log(f"[eval] {n + 1}/{len(positions)} positions: " + ", ".join(
                f"{label} {t['all'].acceptance:.2f}" for label, t in result.by_kind.items()))
    return result


def report_lines(result: EvalResult, k: int) -> list[str]:
    kinds = sorted({kind for tallies in result.by_kind.values() for kind in tallies}, key=lambda k: (k == "all", k))
    lines = [f"| draft | positions | acceptance (k={k}) | tokens per target call |", "|---|---|---|---|"]
    for label, tallies in result.by_kind.items():
        for kind in kinds:
            t = tallies.get(kind)
            if t:
                lines.append(f"| {label}, {kind} | {t.positions} | {t.acceptance:.3f} | {t.tokens_per_call:.2f} |")
    return lines


def main(argv: list[str] | None = None, prog: str = "python -m training.distill_eval") -> int:
    import sys

    from lsp.arguments import OneLineParser, number
    from training.distill import EVAL_KINDS, eval_positions, use_threads
    from training.editor_positions import read_sources, training_and_held_out

    p = OneLineParser(prog=prog, description="Held-out acceptance of draft models at editor positions "
                                             "(the report of training.distill).")
    p.add_argument("--target", default="default")
    p.add_argument("--draft", action="append", default=None,
                   help="LABEL=DIR or DIR, repeatable (default: shipped=default)")
    p.add_argument("--code", action="append", default=None,
                   help="as given to training.distill (its held-out split; not needed with --eval-code)")
    p.add_argument("--eval-code", action="append", default=None, help="the held-out folder(s)")
    p.add_argument("--ext", action="append", default=None)
    p.add_argument("--held-out", type=number(float, 0, 1, low_open=True), default=0.15)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-positions", type=number(int, 1), default=24, help="held-out positions per kind")
    p.add_argument("--eval-tokens", type=number(int, 1), default=32)
    p.add_argument("--draft-length", type=number(int, 1), default=4)
    p.add_argument("--prompt-tokens", default="auto",
                   help="draft prompts: auto (each draft's config), none (the whole text) or a token count")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=number(int, 0), default=0)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    cap = args.prompt_tokens
    if cap not in ("auto", "none"):
        if not cap.isdigit() or int(cap) < MIN_DRAFT_PROMPT_TOKENS:
            p.error(f"--prompt-tokens: expected auto, none or an integer >= {MIN_DRAFT_PROMPT_TOKENS}, got {cap!r}")
        cap = int(cap)
    drafts = dict((d.split("=", 1) if "=" in d else (d, d)) for d in (args.draft or ["shipped=default"]))
    ext = tuple(args.ext or (".py",))
    if not args.code and not args.eval_code:
        p.error("give --eval-code, or --code to hold out a share of")
    try:
        held = (read_sources(args.eval_code, ext) if args.eval_code
                else training_and_held_out(args.code, None, ext, args.held_out, args.seed)[1])
        if not held:
            raise ValueError("no held-out files")
    except (ValueError, FileNotFoundError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    use_threads(args.threads, args.device)
    positions = eval_positions(held, args.eval_positions)
    print(f"{len(positions)} held-out positions ({', '.join(EVAL_KINDS)}), k={args.draft_length}, "
          f"draft prompts: {args.prompt_tokens}", flush=True)
    result = measure(args.target, drafts, positions,
                     EvalSettings(args.draft_length, args.eval_tokens, args.device, args.threads, cap))
    print("\n".join(report_lines(result, args.draft_length)))
    print(f"same output with every draft: {result.same_output}")
    return 0 if result.same_output else 1


if __name__ == "__main__":
    raise SystemExit(main())
