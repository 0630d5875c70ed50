"""How well the controller's plans come true: what each round was expected to give and cost,
against what it gave and cost.

    python -m bench.calibration            # the replays and real-file ends of lines, in process
    python -m bench.calibration --quick

The controller (engine/control.py) picks each round's drafter and length by expected new tokens
per millisecond, from its estimates. Where those are off for one kind of round, it picks that
kind too often or too seldom, and no timing shows which. This runs the shipped pair's completion
pipeline in process, as the server builds it (default settings), over the keystroke replays
(middle of files, end of files) and end-of-line positions of real files, and logs every round
it can price (none, lookup and pair rounds once a verify cost is measured):
  planned   the tokens the plan expected (its rate times its price) and the verify pass it priced
  got       the round's new tokens (accepted + the target's own) and its measured verify time
by round kind (draft model rounds are priced with its prefill and catch-up, and left out),
lookup class, whether lookup's other proposal parted from the one taken ("contested":
engine/control.py, CONTESTED) and whether the round came at the start of the answer (the target
had written fewer than START_TOKENS of its tokens). Then prompt lookup's chains (lookup and pair
rounds) by class, contested or not and start or not: how often the target wrote each of their
first tokens, given the ones before. Figures are means over rounds; a good estimate gives
got / planned near 1.
"""
from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass

from bench.common import DEFAULT_FILES, bench_parser

PROG = "python -m bench.calibration"
POSITIONS = 3     # first chain positions whose acceptance is printed
# A round at the start of an answer: the target had written fewer than START_TOKENS tokens of it
# (LookupOffer.written). Lookup's proposals there are right far less often, but the controller
# prices them with the rest of their class: priced apart, its plans came true and no request got
# faster (README, "Proposals at the start of an answer").
START_TOKENS = 2


@dataclass
class Round:
    kind: str
    k: int
    cls: str                # lookup class (engine.control.lookup_class), "-" without one
    contested: bool
    start: bool             # at the start of the answer (START_TOKENS)
    planned_tokens: float
    planned_ms: float
    got_tokens: int = 0
    got_ms: float = 0.0
    chain_accepted: int = 0   # of the lookup chain (a pair's: the proposal taken)


def planned(controller, plan) -> tuple[float, float] | None:
    """(expected tokens, priced verify ms) of a none, lookup or pair plan; None for others and
    for plans made before any cost was measured."""
    if plan.expected_rate <= 0 or plan.drafter not in ("none", "lookup", "pair"):
        return None
    if plan.drafter == "pair":   # a chain pass of its width and the extra a tree pass costs
        # (an engine before that extra: priced as a chain)
        ms = controller.verify(1 + plan.k + plan.other_k) + getattr(controller, "tree_extra_ms", 0.0)
    else:
        ms = controller.verify(plan.k + 1)
    return plan.expected_rate * ms, ms


def instrument(rounds: list[Round]):
    """Log every planned round of the engine package into `rounds`; returns an undo function."""
    from engine import control, generate
    from engine.kv import common_prefix_len

    plan_fn, record_fn = control.DraftController.plan, generate._record
    pending: dict = {}     # the last plan -> its Round (a round is recorded with its own plan)

    def plan(self, lookup, *args, **kwargs):
        p = plan_fn(self, lookup, *args, **kwargs)
        priced = planned(self, p)
        cls = control.lookup_class(p.lookup_match, p.lookup_source) if p.drafter != "none" else None
        contested = lookup.other_tokens > 0   # (as the plan tells the classes apart, CONTESTED)
        start = lookup.written < START_TOKENS
        pending.clear()
        if priced is not None:
            pending[id(p)] = (p, Round(p.drafter, p.k, cls or "-", contested, start, *priced))
        return p

    def record(prop, accepted, verify_ms, stats, memory, settings):
        p, r = pending.pop(id(prop.plan), (None, None))
        if r is not None and p is prop.plan:
            r.got_tokens, r.got_ms = len(accepted) + 1, verify_ms
            r.chain_accepted = common_prefix_len(accepted, prop.chains[0]) if r.kind == "pair" else len(accepted)
            rounds.append(r)
        return record_fn(prop, accepted, verify_ms, stats, memory, settings)

    control.DraftController.plan, generate._record = plan, record

    def undo():
        control.DraftController.plan, generate._record = plan_fn, record_fn
    return undo


def plan_table(rounds: list[Round]) -> list[str]:
    groups = defaultdict(list)
    for r in rounds:
        groups[(r.kind, r.cls, r.contested, r.start)].append(r)
    lines = ["| round | class | contested | start | rounds | k | tokens planned | got | got / planned "
             "| verify ms priced | measured |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (kind, cls, contested, start), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        n = len(rs)
        p, g = sum(r.planned_tokens for r in rs) / n, sum(r.got_tokens for r in rs) / n
        lines.append(f"| {kind} | {cls} | {_yes(contested)} | {_yes(start)} | {n} | {sum(r.k for r in rs) / n:.1f} "
                     f"| {p:.2f} | {g:.2f} | {g / p:.2f} | {sum(r.planned_ms for r in rs) / n:.2f} "
                     f"| {sum(r.got_ms for r in rs) / n:.2f} |")
    return lines


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def chain_acceptance(rounds: list[Round]) -> dict[tuple[str, bool, bool], list[tuple[int, int]]]:
    """(class, contested, start) -> [(chains that reached position i, of them accepted there)] for
    the first POSITIONS positions of lookup's chains (a position is reached when the ones before
    it were accepted and the chain has it)."""
    out: dict = defaultdict(lambda: [(0, 0)] * POSITIONS)
    for r in rounds:
        if r.kind not in ("lookup", "pair") or r.cls == "-":
            continue
        counts = out[(r.cls, r.contested, r.start)]
        for i in range(min(r.k, POSITIONS, r.chain_accepted + 1)):
            reached, ok = counts[i]
            counts[i] = (reached + 1, ok + (i < r.chain_accepted))
    return dict(out)


def acceptance_table(rounds: list[Round]) -> list[str]:
    by = chain_acceptance(rounds)
    head = " | ".join(f"position {i + 1}" for i in range(POSITIONS))
    lines = [f"| lookup class | contested | start | {head} |", "|---|---|---|" + "---|" * POSITIONS]
    for (cls, contested, start), counts in sorted(by.items()):
        cells = " | ".join(f"{ok / n:.2f} ({n})" if n else "-" for n, ok in counts)
        lines.append(f"| {cls} | {_yes(contested)} | {_yes(start)} | {cells} |")
    return lines


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--quick", action="store_true", help="one file of each workload, a few lines")
    args = ap.parse_args(argv)

    import torch

    from bench.end_of_line import end_of_line_positions, real_files
    from bench.keystrokes import END, MIDDLE
    from bench.replay import load_scripts, request_points
    from lsp.backend import completion_options, completion_request, load_backend
    from lsp.settings import Settings, parse_settings

    torch.set_num_threads(1)
    settings = parse_settings({"targetModel": "default", "device": "cpu", "debounceMs": 0}, Settings())
    loaded = load_backend(settings)
    options = completion_options(settings)
    torch.set_num_threads(1)     # after the load, as the suite's engines
    rounds: list[Round] = []
    undo = instrument(rounds)
    files, lines = (1, 3) if args.quick else (3, 12)

    def complete(uri: str, text: str, line: int, character: int) -> None:
        loaded.pipeline.complete(completion_request(uri, text, line, character), options, cancel=threading.Event())

    try:
        for name, where, typed in (("replay", MIDDLE, lines), ("replay-append", END, max(2, lines * 2 // 3))):
            for script in load_scripts(DEFAULT_FILES, typed, 0, files, 0.0, where):
                for _, text, line, col in request_points(script):
                    complete(f"file:///calibration/{name}/{script.name}", text, line, col)
        for i, pos in enumerate(p for f in real_files(files) for p in end_of_line_positions(f, 4 if args.quick else 6)):
            complete(f"file:///calibration/eol/{i}/{pos.file}", pos.text, pos.line, pos.character)
    finally:
        undo()
    print(f"{len(rounds)} rounds (none, lookup and pair rounds with a price), shipped pair, in process\n")
    print("\n".join(plan_table(rounds)))
    print()
    print("\n".join(acceptance_table(rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
