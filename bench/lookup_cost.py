"""What prompt lookup costs per round, for this tree's engine and an older commit's, side by side.

    python -m bench.lookup_cost                       # against DEFAULT_BASELINE
    python -m bench.lookup_cost --baseline HEAD~1 --files 40 --reps 5

The free drafters propose every round: prompt lookup searches the sequence and the recent
answers (`LookupDrafter.near`), the datastore of the target's answers its store
(`Datastore.find`). This walks held-out pygls source token by token, as decoding grows a
sequence (a 480-token window, a proposal of up to 16 tokens at each position), and times both
proposals ("propose") and the two searches, each engine on its own drafters and its own copy of
the shipped datastore (the datastore keeps what it voted, so each starts empty and the walk
meets each position once). The two engines take turns file by file; figures are medians over
reps of the mean per call. The proposals are compared across the engines, the one that matched
more ids before it taken (the text's among equals), as a fixed draft length takes it.

A request's first search also reads the documents beyond the prompt (`BlockIndex.corpus`):
"documents read" times that at keystrokes on one line of a long file (DOC_LINES lines of the
same held-out source), whose blocks are already tokenized, per engine, alternating by rep.
"first read" times a file's first request, the cursor at the end of its middle line, for each
held-out file of 8-40 KB: with nothing tokenized yet, and ("first read, opened") after the
server indexed the document when it was opened (`BlockIndex.warm`; an engine without it shows
"-"), each engine tokenizing as the engine wires its index (in batches where it can).
"""
from __future__ import annotations

import importlib
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import bench_parser, usage_error
from bench.round_cost import commit_of, engine_at
from lsp.arguments import number

PROG = "python -m bench.lookup_cost"
# The engine before lookup's search ran on the ids as bytes and the datastore kept its votes.
DEFAULT_BASELINE = "ea8d66d"
WINDOW = 480      # tokens of sequence before each position, about a completion prompt
STEPS = 200       # positions walked per file
DRAFT = 16        # tokens asked per proposal (the engine's longest draft)
DOC_LINES = 6000  # a long document (the held-out files one after another), typed into ...
WINDOW_LINES = 80  # ... with a prompt of this many lines around the cursor ...
KEYSTROKES = 20   # ... this many keystrokes, each timed for lookup's read of the documents


def walks(encode, n_files: int, seed: int) -> list[list[int]]:
    """Token ids of held-out source files (pygls, not in the shipped pair's training data)."""
    import pygls
    files = sorted(p for p in Path(pygls.__file__).parent.rglob("*.py") if p.stat().st_size > 4000)
    rng = random.Random(seed)
    return [[1] + encode(f.read_text(encoding="utf-8")) for f in rng.sample(files, min(n_files, len(files)))]


def lookup_modules(pkg):
    """(its prompt lookup module, its datastore module, its documents module) for an engine
    package with the drafters in engine/drafters/ or, in older commits, in the engine itself."""
    try:
        return tuple(importlib.import_module(f"{pkg.__name__}.drafters.{m}") for m in ("lookup", "datastore", "documents"))
    except ModuleNotFoundError:
        lookup = importlib.import_module(pkg.__name__ + ".lookup")
        return lookup, importlib.import_module(pkg.__name__ + ".datastore"), lookup


def drafters_of(pkg, special, store):
    """(propose(seq, k): the free proposal taken, near(seq, k): the sequence search) of an engine."""
    lookup, store_mod, _ = lookup_modules(pkg)
    if hasattr(lookup, "NgramDrafter"):      # the datastore inside prompt lookup
        d = lookup.NgramDrafter(special_ids=special, datastore=store)
        return (lambda seq, k: d.propose(seq, b"", k, None)), (lambda seq, k: d._near(seq, k))
    text, stored = lookup.LookupDrafter(special_ids=special), store_mod.DatastoreDrafter(store, special)

    def propose(seq, k):
        a, b = text.propose(seq, b"", k, None), stored.propose(seq, b"", k, None)
        return b if b.tokens and b.match > a.match else a
    return propose, text.near


def time_walk(pkg, ids: list[int], special, path: Path, vocab) -> tuple[dict[str, float], list]:
    """Per-call ms of propose, the sequence search and the datastore search over one walk."""
    _, store_mod, _ = lookup_modules(pkg)
    store = store_mod.Datastore.load(path, vocab)
    propose, near = drafters_of(pkg, special, store)
    start = max(WINDOW, len(ids) - STEPS - 1) if len(ids) > WINDOW + STEPS else min(len(ids) - 1, WINDOW)
    seq = ids[start - min(start, WINDOW):start]
    ms = {"propose": 0.0, "sequence search": 0.0, "datastore search": 0.0}
    out = []
    for t in ids[start:start + STEPS]:
        t0 = time.perf_counter()
        found = propose(seq, DRAFT)
        t1 = time.perf_counter()
        near(seq, DRAFT)
        t2 = time.perf_counter()
        ms["propose"] += t1 - t0
        ms["sequence search"] += t2 - t1
        out.append((found.tokens, found.match, found.source))
        seq.append(t)
    # the datastore's first search at each position, on a fresh store: what a round pays
    store = store_mod.Datastore.load(path, vocab)
    seq = ids[start - min(start, WINDOW):start]
    for t in ids[start:start + STEPS]:
        t0 = time.perf_counter()
        store.find(seq, DRAFT, special)
        ms["datastore search"] += time.perf_counter() - t0
        seq.append(t)
    n = max(1, len(out))
    return {k: v / n * 1000 for k, v in ms.items()}, out


def document_lines(limit: int = DOC_LINES) -> list[str]:
    """The held-out pygls files' lines one after another, up to `limit`: one long document."""
    import pygls
    lines: list[str] = []
    for f in sorted(Path(pygls.__file__).parent.rglob("*.py")):
        lines += f.read_text(encoding="utf-8").split("\n")
        if len(lines) >= limit:
            break
    return lines[:limit]


def time_documents(pkg, lines: list[str], encode, dummy_prefix: bool) -> float:
    """ms of lookup's read of the documents (`BlockIndex.corpus`) at a keystroke on the cursor
    line in the middle of `lines`, the prompt holding the WINDOW_LINES around it: each keystroke
    is a new copy of the lines, as a new text from the editor is. Requests before fill the index
    (its tokenizing is not what is timed here)."""
    lookup = lookup_modules(pkg)[2]
    index = lookup.BlockIndex(encode, dummy_prefix=dummy_prefix)
    mid = len(lines) // 2
    window = (mid - WINDOW_LINES // 2, mid + WINDOW_LINES // 2)
    for _ in range(8):
        index.corpus([lookup.LookupText(list(lines), (mid, 0), window)])
    total = 0.0
    for i in range(KEYSTROKES):
        typed = list(lines)
        typed[mid] = lines[mid] + "x" * (i + 1)
        t0 = time.perf_counter()
        index.corpus([lookup.LookupText(typed, (mid, len(typed[mid])), window)])
        total += time.perf_counter() - t0
    return total / KEYSTROKES * 1000


def first_read_files() -> list[list[str]]:
    """The lines of the held-out pygls files of 8-40 KB (real files, longer than a prompt)."""
    import pygls
    files = sorted(p for p in Path(pygls.__file__).parent.rglob("*.py") if 8_000 <= p.stat().st_size <= 40_000)
    return [f.read_text(encoding="utf-8").split("\n") for f in files]


def time_first_reads(pkg, docs: list[list[str]], vocab) -> dict[str, float | None]:
    """Median ms of a document's first read at the end of its middle line: on a fresh index, and
    on a fresh index that `warm`ed the whole document first (None where the engine has no warm)."""
    import inspect
    lookup = lookup_modules(pkg)[2]
    batched = "encode_many" in inspect.signature(lookup.BlockIndex).parameters
    extra = {"encode_many": vocab.encode_texts} if batched else {}
    cold, opened = [], []
    for lines in docs:
        mid = len(lines) // 2
        text = [lookup.LookupText(lines, (mid, len(lines[mid])))]
        index = lookup.BlockIndex(vocab.encode_text, dummy_prefix=vocab.dummy_prefix, **extra)
        t0 = time.perf_counter()
        index.corpus(text)
        cold.append((time.perf_counter() - t0) * 1000)
        if hasattr(lookup.BlockIndex, "warm"):
            index = lookup.BlockIndex(vocab.encode_text, dummy_prefix=vocab.dummy_prefix, **extra)
            index.warm([lookup.LookupText(lines)])
            t0 = time.perf_counter()
            index.corpus(text)
            opened.append((time.perf_counter() - t0) * 1000)
    return {"first read": statistics.median(cold),
            "first read, opened": statistics.median(opened) if opened else None}


def main(argv=None) -> int:
    ap = bench_parser(PROG, __doc__, description="What prompt lookup costs per round, this tree's engine "
                                                "beside an older commit's.")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref whose engine runs alongside ('none' to skip)")
    ap.add_argument("--files", type=number(int, 1), default=24, help="held-out files walked")
    ap.add_argument("--reps", type=number(int, 1), default=3)
    args = ap.parse_args(argv)
    sha = None
    if args.baseline != "none":
        sha = commit_of(args.baseline)
        if sha is None:
            return usage_error(PROG, f"--baseline: {args.baseline!r} names no git commit here")
    import engine as this_pkg
    from engine.drafters.datastore import resolve
    from engine.load.models import load_model, resolve_name
    target = load_model("default", "target", device="cpu")
    path = resolve("auto", resolve_name("default", "target"))
    if path is None:
        return usage_error(PROG, "the default pair has no datastore here")
    vocab = target.tokenizer.get_vocab()
    special = frozenset(target.vocab.special_ids)
    files = walks(target.vocab.encode_text, args.files, seed=0)
    doc = document_lines()
    first_docs = first_read_files()
    with tempfile.TemporaryDirectory() as tmp:
        pkgs = [("this tree", this_pkg)]
        if sha is not None:
            pkgs.append((f"baseline {sha}", engine_at(sha, Path(tmp))))
        samples = {label: {} for label, _ in pkgs}
        same = total = 0
        for rep in range(args.reps):
            sums = {label: {} for label, _ in pkgs}
            for i, ids in enumerate(files):
                outs = []
                for label, pkg in (pkgs if i % 2 == 0 else pkgs[::-1]):
                    ms, out = time_walk(pkg, ids, special, path, vocab)
                    outs.append(out)
                    for k, v in ms.items():
                        sums[label][k] = sums[label].get(k, 0.0) + v / len(files)
                if rep == 0:
                    total += len(outs[0])
                    same += sum(len({repr(o[j]) for o in outs}) == 1 for j in range(len(outs[0])))
            for label, pkg in (pkgs if rep % 2 == 0 else pkgs[::-1]):
                sums[label]["documents read"] = time_documents(pkg, doc, target.vocab.encode_text,
                                                               target.vocab.dummy_prefix)
                sums[label].update(time_first_reads(pkg, first_docs, target.vocab))
            for label in sums:
                for k, v in sums[label].items():
                    samples[label].setdefault(k, []).append(v)
    print(f"{len(files)} held-out files, {STEPS} positions each, a {WINDOW}-token window, {DRAFT} tokens asked; "
          f"shipped datastore; {args.reps} reps; proposals equal across engines {same}/{total}; "
          f"documents read: {KEYSTROKES} keystrokes in a {len(doc)}-line file, {WINDOW_LINES} lines in the prompt; "
          f"first read: {len(first_docs)} held-out files of 8-40 KB\n")
    names = ("propose", "sequence search", "datastore search", "documents read", "first read", "first read, opened")

    def cell(values) -> str:
        return f"{'-':>18}" if None in values else f"{statistics.median(values):>18.4f}"
    print(f"{'engine':<22} " + " ".join(f"{n:>18}" for n in names) + "   (ms per call, median over reps)")
    for label in samples:
        print(f"{label:<22} " + " ".join(cell(samples[label][n]) for n in names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
