"""Which proposal prompt lookup should take: the text's or the datastore's.

    python -m bench.lookup_choice                        # the suite's workloads, in process
    python -m bench.lookup_choice --datastore FILE --quick

Prompt lookup has two candidates each round: a copy of what followed the last tokens in the
text at hand (the prompt, recent completions, the documents) and the target's datastore's
majority continuation. This runs the suite's workloads in process (`generate` on held-out
prompts; the completion pipeline at ends of lines and at every keystroke of the two replays),
prompt lookup alone, and at every proposal keeps both candidates. Once the request is done, each
candidate is scored by how many of its tokens the target then wrote. Printed per workload, the
mean over proposals:
  text, store    always that candidate (the other where it has none)
  store < 6      the store wherever the text matched fewer than 6 tokens (the rule until
                 2026-12-01 evening)
  longer match   the store only where its match is the longer (engine/lookup.py now)
  best if they differ   the better one where the two differ at their first token, else the
                 longer match: what pairs that branch at the root reach at most
  best of both   the better candidate each time: what verifying both chains as a tree (a pair
                 round, engine/generate.py, wherever the two part) reaches at most
and how many proposals had both candidates, and of those how many differed at their first token
(where a tree of the two would branch at its root).
The decoding itself is the engine's as shipped (its choices set which positions are visited).
"""
from __future__ import annotations

import threading
from pathlib import Path

from bench.common import DEFAULT_FILES, bench_parser, held_out_prompts, usage_error
from lsp.arguments import number

PROG = "python -m bench.lookup_choice"
RULES = ("text", "store", "store < 6", "longer match", "best if differ", "best of both")


def _written(tokens: list[int], truth: list[int]) -> int:
    n = 0
    while n < len(tokens) and n < len(truth) and tokens[n] == truth[n]:
        n += 1
    return n


def scores(text, stored, truth: list[int]) -> dict[str, int]:
    """Tokens the target wrote of the candidate each rule takes (a candidate is a Draft or None)."""
    t = _written(text.tokens, truth) if text else 0
    s = _written(stored.tokens, truth) if stored else 0
    longer = s if stored and (text is None or stored.match > text.match) else t
    differ = bool(text and stored and text.tokens[0] != stored.tokens[0])
    return {"text": t if text else s, "store": s if stored else t,
            "store < 6": s if stored and (text is None or text.match < 6) else t,
            "longer match": longer, "best if differ": max(t, s) if differ else longer,
            "best of both": max(t, s)}


class Recorder:
    """Wraps a lookup drafter's `candidates` to keep both of every proposal; the drafter
    proposes as it would anyway."""

    def __init__(self, drafter):
        self.drafter, self.requests = drafter, []
        candidates = drafter.candidates

        def recording(seq, k):
            text, stored = candidates(seq, k)
            if self.requests:
                self.requests[-1].append((list(seq), text, stored))
            return text, stored

        drafter.candidates = recording

    def tally(self) -> tuple[int, dict[str, int], tuple[int, int]]:
        """Proposals, tokens the target wrote by rule, and (proposals with both candidates, of
        those differing at the first token), over the requests recorded; a request's truth is the
        longest sequence it proposed after."""
        n, total, both, differ = 0, dict.fromkeys(RULES, 0), 0, 0
        for request in self.requests:
            if not request:
                continue
            final = max((seq for seq, _, _ in request), key=len)
            for seq, text, stored in request:
                truth = final[len(seq):]
                if truth and (text or stored):
                    n += 1
                    for rule, v in scores(text, stored, truth).items():
                        total[rule] += v
                    if text and stored:
                        both += 1
                        differ += text.tokens[0] != stored.tokens[0]
        return n, total, (both, differ)


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--datastore", default="auto", help="the store (default: the target's own)")
    ap.add_argument("--files", type=Path, default=DEFAULT_FILES, help="held-out .py files")
    ap.add_argument("--quick", action="store_true", help="a few requests of each workload")
    ap.add_argument("--prompts", type=number(int, 1), default=12)
    args = ap.parse_args(argv)

    import torch

    from bench.end_of_line import positions_in
    from bench.keystrokes import END, MIDDLE
    from bench.replay import load_scripts, request_points
    from engine import GenerationSettings, ModelLoadError
    from lsp.backend import completion_options, completion_request, load_backend
    from lsp.settings import Settings, parse_settings

    torch.set_num_threads(1)
    settings = parse_settings({"targetModel": "default", "draftModel": "ngram", "device": "cpu",
                               "dtype": "float32", "datastore": args.datastore, "debounceMs": 0}, Settings())
    try:
        loaded = load_backend(settings)
    except ModelLoadError as exc:      # a --datastore that is missing or not a store
        return usage_error(PROG, f"--datastore: {exc}")
    engine, options = loaded.engine, completion_options(settings)
    recorder = Recorder(engine.drafters.lookup)

    def complete(uri: str, text: str, line: int, character: int) -> None:
        recorder.requests.append([])
        loaded.pipeline.complete(completion_request(uri, text, line, character), options, cancel=threading.Event())

    print(f"{'workload':16} {'proposals':>9}  " + "  ".join(f"{r:>12}" for r in RULES) + f"  {'both':>6} {'differ':>6}")

    def report(workload: str) -> None:
        n, total, (both, differ) = recorder.tally()
        print(f"{workload:16} {n:9d}  " + "  ".join(f"{total[r] / max(1, n):12.2f}" for r in RULES)
              + f"  {both:6d} {differ:6d}", flush=True)
        recorder.requests.clear()

    vocab = engine.target.vocab
    for prompt in held_out_prompts(3 if args.quick else args.prompts, 1200):
        recorder.requests.append([])
        engine.generate([engine.target.tokenizer.bos_token_id] + vocab.encode_text(prompt), None,
                        GenerationSettings(max_new_tokens=48))
    report("generate")
    for i, pos in enumerate(positions_in(args.files, 3, 1 if args.quick else 4)):
        complete(f"file:///choice/eol/{i}/{pos.file}", pos.text, pos.line, pos.character)
    report("end-of-line")
    for name, where, lines in (("replay", MIDDLE, 12), ("replay-append", END, 8)):
        for script in load_scripts(args.files, 2 if args.quick else lines, 0, 1 if args.quick else 3, 0.0, where):
            for _, text, line, col in request_points(script):
                complete(f"file:///choice/{name}/{script.name}", text, line, col)
        report(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
