"""Held-out acceptance of draft models, measured through the real engine.

Every draft gets its own Engine (the same target, prompt lookup off, so the figures are the
draft model's) and the same positions; requests alternate between the drafts position by
position, so a busy machine slows them alike. Greedy, a fixed draft length (k = 4 by default).
Acceptance = accepted / drafted tokens; tokens per target call = new tokens / target forward
passes after the prefill.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from training.distill_data import fit, prompt_ids
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


@dataclass
class EvalResult:
    by_kind: dict = field(default_factory=dict)    # draft label -> kind -> Tally
    same_output: bool = True                        # every draft gave the same text (lossless)


def measure(target: str, drafts: dict[str, str], positions: list[Position],
            settings: EvalSettings, log=print) -> EvalResult:
    """Acceptance and tokens per target call of each draft (label -> model dir) at the positions
    (FIM in the editor's layout; `l2r` positions left to right)."""
    from completion.templates import load_template
    from engine import Engine, EngineConfig, GenerationSettings

    engines = {label: Engine(EngineConfig(target=target, draft=path, device=settings.device,
                                          threads=settings.threads, lookup=False, kv_reuse=False))
               for label, path in drafts.items()}
    first = next(iter(engines.values()))
    t_template = load_template(first.target.tokenizer)
    d_templates = {label: load_template(e.draft.tokenizer) for label, e in engines.items()}
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
            draft_ids = prompt_ids(d_templates[label], pos.prefix, pos.suffix, layout)
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
