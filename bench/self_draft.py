"""Self-draft benchmark: how much of a perfect draft's agreement the different-tokenizer path keeps.

    python -m bench.self_draft [--target DIR] [--max-new-tokens 40] [--per-ending 4]

The draft is the target itself with its vocabulary ids permuted (embedding and output rows
moved with the ids, a tokenizer whose ids are permuted the same way). It agrees with the
target on every text, yet the engine sees two vocabularies and drafts through text
(`TextDrafter`). Whatever acceptance is lost here is lost by the text-space bookkeeping, not by
the draft. Prints acceptance and tokens per round (k=4, ideal 5; and draftLength auto) for
prompts that end after a docstring line, in trailing indentation, mid-identifier, after a
CRLF, after emoji/CJK text and after a FIM middle sentinel, and checks every output equals the
target's own greedy output.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "bench" / "files"
ENDINGS = ("docstring", "indent", "mid-identifier", "crlf", "emoji-cjk", "fim-sentinel")

# HumanEval-style stubs: a signature and a one-line docstring.
STUBS = (
    'def count_vowels(text: str) -> int:\n    """Return how many vowels the text has."""\n',
    'def mean(values: list[float]) -> float:\n    """Average of the values; 0.0 for an empty list."""\n',
    'def is_palindrome(word: str) -> bool:\n    """True when the word reads the same backwards."""\n',
    'def flatten(rows):\n    """Concatenate the lists in rows into one list."""\n',
    'class Stack:\n    def push(self, item):\n        """Put an item on top."""\n',
    'def parse_pairs(line: str) -> dict:\n    """Parse key=value pairs separated by commas."""\n',
)
HARD_TEXT = ("计算总和", "🎉", "数据 ✅", "résumé 😀", "列表", "🚀 ok")


def permuted_copy(src: str | Path, out: str | Path, seed: int = 0) -> list[int]:
    """Save the model in `src` to `out` with its ordinary token ids permuted (special/added tokens
    keep theirs): perm[old id] = new id. Embedding rows (and an untied lm_head's rows) move with
    the ids, so the copy computes the same function of the text."""
    from transformers import AutoModelForCausalLM

    src, out = Path(src), Path(out)
    spec = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = spec["model"]["vocab"]
    fixed = {t["id"] for t in spec.get("added_tokens", [])}
    movable = sorted(i for i in vocab.values() if i not in fixed)
    gen = torch.Generator().manual_seed(seed)
    shuffled = [movable[j] for j in torch.randperm(len(movable), generator=gen).tolist()]
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    size = model.get_input_embeddings().weight.shape[0]
    perm = list(range(max(size, max(vocab.values()) + 1)))
    for old, new in zip(movable, shuffled):
        perm[old] = new
    spec["model"]["vocab"] = {piece: perm[i] for piece, i in vocab.items()}
    out.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and (f.name.startswith("tokenizer") or f.name == "special_tokens_map.json"):
            shutil.copy(f, out / f.name)
    (out / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    index = torch.tensor(perm[:size])
    with torch.no_grad():
        emb = model.get_input_embeddings().weight
        emb[index] = emb.clone()
        head = model.get_output_embeddings()
        if head is not None and head.weight.data_ptr() != emb.data_ptr():
            head.weight[index] = head.weight.clone()
            if getattr(head, "bias", None) is not None:
                head.bias[index] = head.bias.clone()
    model.save_pretrained(out)
    return perm


def _code_lines(text: str) -> list[int]:
    lines = text.split("\n")
    return [i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith(("#", '"""')) and i > 2]


def _tail(prefix: str, chars: int = 900) -> str:
    """The prefix's last lines, within the shipped target's 512-token context."""
    if len(prefix) <= chars:
        return prefix
    cut = prefix.find("\n", len(prefix) - chars)
    return prefix[cut + 1:]


def prompt_texts(per_ending: int, files: Path = FILES) -> dict[str, list[tuple[str, str | None]]]:
    """ending -> [(prefix, suffix or None for a left-to-right prompt)]."""
    sources = [p.read_text(encoding="utf-8") for p in sorted(files.glob("*.py"))]
    stubs = [STUBS[i % len(STUBS)] for i in range(per_ending)]
    cases: dict[str, list[tuple[str, str | None]]] = {e: [] for e in ENDINGS}
    cases["docstring"] = [(s, None) for s in stubs]
    cases["indent"] = [(s + re.match(r"\s*", s.split("\n")[-2]).group(0), None) for s in stubs]
    cases["emoji-cjk"] = [(s.rsplit('"""', 1)[0][:-1] + " " + HARD_TEXT[i % len(HARD_TEXT)], None)
                          for i, s in enumerate(stubs)]
    reps = -(-per_ending // len(sources))   # positions per file, spread over it
    for i in range(per_ending):
        text = sources[i % len(sources)]
        lines = text.split("\n")
        code = _code_lines(text)
        line_no = code[(len(code) * (2 * (i // len(sources)) + 1)) // (2 * reps)]
        start = sum(len(ln) + 1 for ln in lines[:line_no])
        words = [m for m in re.finditer(r"[A-Za-z_][A-Za-z0-9_]{5,}", lines[line_no])]
        cut = start + (words[0].start() + len(words[0].group(0)) // 2 if words else len(lines[line_no]) // 2)
        end = start + len(lines[line_no]) + 1
        cases["mid-identifier"].append((_tail(text[:cut]), None))
        cases["crlf"].append((_tail(text[:end]).replace("\n", "\r\n"), None))
        cases["fim-sentinel"].append((_tail(text[:end]), text[end:end + 300]))
    return cases


@dataclass
class EndingFigures:
    ending: str
    prompts: int = 0
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0
    new_tokens: int = 0
    same: int = 0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.new_tokens / self.rounds if self.rounds else 0.0


def target_ids(template, prefix: str, suffix: str | None) -> list[int]:
    """A prompt ending with the prefix text (`suffix` None) or at the FIM middle sentinel."""
    if suffix is None:   # the SPM layout puts the prefix last (what the editor sends), else plain
        if "spm" in template.layouts:
            return template.build(prefix, "", layout="spm")
        return ([template.bos_id] if template.bos_id is not None else []) + template.encode(prefix)
    return template.build(prefix, suffix, layout="psm")


def measure(target_engine, pair_engine, perm: list[int], cases, draft_length, max_new_tokens: int = 40,
            reference: dict | None = None) -> dict[str, EndingFigures]:
    """Figures per ending for `pair_engine` (target + permuted self-draft); `reference` caches
    the target-alone outputs across calls."""
    from completion.templates import load_template
    from engine import GenerationSettings

    template = load_template(target_engine.target.tokenizer)
    stops = template.stop_ids
    reference = {} if reference is None else reference
    figures = {}
    for ending, prompts in cases.items():
        fig = EndingFigures(ending)
        for prefix, suffix in prompts:
            ids = target_ids(template, prefix, suffix)
            key = (tuple(ids), max_new_tokens)
            if key not in reference:
                reference[key] = target_engine.generate(ids, settings=GenerationSettings(
                    max_new_tokens=max_new_tokens, draft_length=0), stop_ids=stops).token_ids
            out = pair_engine.generate(ids, [perm[i] for i in ids], settings=GenerationSettings(
                max_new_tokens=max_new_tokens, draft_length=draft_length), stop_ids=stops)
            s = out.stats
            fig.prompts += 1
            fig.drafted += s.drafted
            fig.accepted += s.accepted
            fig.rounds += s.rounds
            fig.new_tokens += s.new_tokens
            fig.same += out.token_ids == reference[key]
        figures[ending] = fig
    return figures


def engines(target: str, workdir: Path, seed: int = 0, threads: int = 1):
    """(target alone, target + its permuted self as a different-tokenizer draft, perm)."""
    from engine import LocalEngine, EngineConfig
    from engine.load.models import resolve_name

    target_dir = resolve_name(target, "target")
    perm = permuted_copy(target_dir, workdir / "self-draft", seed)
    alone = LocalEngine(EngineConfig(target=target_dir, draft="none", threads=threads, device="cpu"))
    pair = LocalEngine(EngineConfig(target=target_dir, draft=str(workdir / "self-draft"), lookup=False,
                               threads=threads, device="cpu"))
    assert pair.drafters.model.kind == "text", "the permuted copy must go through the text path"
    return alone, pair, perm


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.self_draft", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--target", default="default")
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--per-ending", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0, help="of the id permutation")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="specfill-self-draft-") as tmp:
        alone, pair, perm = engines(args.target, Path(tmp), args.seed, args.threads)
        cases = prompt_texts(args.per_ending)
        reference: dict = {}
        fixed = measure(alone, pair, perm, cases, 4, args.max_new_tokens, reference)
        auto = measure(alone, pair, perm, cases, "auto", args.max_new_tokens, reference)
    print(f"self-draft ({args.target} target, ids permuted), {args.per_ending} prompts per ending, "
          f"{args.max_new_tokens} new tokens")
    print("auto: the cost-aware controller (it drafts little: this draft costs as much as the target)")
    print("| prompt ends | k=4: acceptance | k=4: tokens per round (ideal 5) | auto: acceptance "
          "| auto: tokens per round | same as target |")
    print("|---|---|---|---|---|---|")
    for e in cases:
        f, a = fixed[e], auto[e]
        print(f"| {e} | {f.acceptance:.2f} | {f.tokens_per_round:.2f} | {a.acceptance:.2f} | "
              f"{a.tokens_per_round:.2f} | {f.same + a.same}/{f.prompts + a.prompts} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
