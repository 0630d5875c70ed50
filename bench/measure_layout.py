"""Measure PSM vs SPM prompt layouts on a replayed typing session.

    python -m bench.measure_layout                       # prompts only, the shipped pair's tokenizers
    python -m bench.measure_layout --engine default      # also run the engine on every keystroke

A function body of a real source file is deleted and typed back one character at a time; at
every keystroke the completion prompt is built in each layout. Prompt-only figures count the
tokens a KV cache could keep (longest common prefix with the previous prompt) versus the ones
it must recompute. With an engine, the figures are the engine's own reused/prefill counts
and the request latency (the completion cache is cleared before each request, so every
keystroke really runs the model).
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import textwrap
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from completion.context import TokenCounter, cut_window, parse_document
from completion.templates import FimTemplate, load_template

if TYPE_CHECKING:
    from engine import LocalEngine


@dataclass
class Keystroke:
    text: str
    line: int
    character: int


def typing_session(source: str, function: str = "def _split(self, text):", max_chars: int | None = None) -> list[Keystroke]:
    """The document after each typed character of `function`'s body (retyped from empty)."""
    start = source.index(function)
    def_indent = start - (source.rfind("\n", 0, start) + 1)
    body_start = source.index("\n", start) + 1
    end = body_start
    for ln in source[body_start:].splitlines(keepends=True):   # until a line back at the def's indent
        if ln.strip() and len(ln) - len(ln.lstrip()) <= def_indent:
            break
        end += len(ln)
    body = source[body_start:end].rstrip("\n") + "\n"
    if max_chars:
        body = body[:max_chars]
    head, tail = source[:body_start], source[body_start + len(body):]
    out = []
    for n in range(1, len(body) + 1):
        typed = body[:n]
        before = head + typed
        line = before.count("\n")
        out.append(Keystroke(before + tail, line, len(before) - before.rfind("\n") - 1))
    return out


def prompt_reuse(template: FimTemplate, session: list[Keystroke], layout: str, prefix_tokens: int = 1024,
                 suffix_tokens: int = 256, step_lines: int = 16) -> dict:
    """Reused vs recomputed prompt tokens if the KV cache holds the previous prompt."""
    count = TokenCounter(template.encode_infill)
    prev: list[int] = []
    reused = computed = 0
    for k in session:
        cur = parse_document(k.text, k.line, k.character)
        w = cut_window(cur, count, prefix_tokens, suffix_tokens, step_lines)
        ids = template.build(w.prefix, w.suffix, layout)
        n = 0
        while n < min(len(ids), len(prev)) and ids[n] == prev[n]:
            n += 1
        reused += n
        computed += len(ids) - n
        prev = ids
    total = reused + computed
    return {"keystrokes": len(session), "prompt_tokens": total, "reused": reused,
            "recomputed": computed, "reuse_rate": round(reused / total, 4) if total else 0.0,
            "recomputed_per_keystroke": round(computed / max(1, len(session)), 1)}


def engine_replay(engine: LocalEngine, session: list[Keystroke], layout: str, max_new_tokens: int = 16) -> dict:
    from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest
    pipe = CompletionPipeline(engine)
    engine.clear_caches()
    opts = CompletionOptions(fim_layout=layout, max_new_tokens=max_new_tokens, extra_tokens=0)
    lat, prefill_ms = [], []
    t0 = time.perf_counter()
    for k in session:
        pipe.cache.clear()
        t = time.perf_counter()
        pipe.complete(CompletionRequest("file:///replay.py", k.text, k.line, k.character), opts)
        lat.append((time.perf_counter() - t) * 1000)
        prefill_ms.append(pipe.last_stats.get("prefill_ms", 0.0))
    s = pipe.stats_summary()
    return {"requests": s["requests"], "kv_reuse": s["kv_reuse"], "draft_kv_reuse": s["draft_kv_reuse"],
            "prefill_tokens": s["prefill_tokens"],
            "reused_tokens": s["reused_tokens"],
            "prefill_ms_p50": round(statistics.median(prefill_ms), 2),
            "prefill_ms_total": round(sum(prefill_ms), 1),
            "p50_ms": round(statistics.median(lat), 1),
            "p95_ms": round(sorted(lat)[int(0.95 * (len(lat) - 1))], 1),
            "new_tokens": s["new_tokens"], "ms_per_new_token": round(sum(lat) / max(1, s["new_tokens"]), 1),
            "total_s": round(time.perf_counter() - t0, 2),
            "acceptance_rate": s["acceptance_rate"], "tokens_per_target_call": s["tokens_per_target_call"]}


def shipped_tokenizers():
    from transformers import AutoTokenizer
    from engine.load.models import resolve_name
    return (AutoTokenizer.from_pretrained(resolve_name("default", "target")),
            AutoTokenizer.from_pretrained(resolve_name("default", "draft")), "shipped default pair")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=["default"], help="also replay through the shipped pair")
    p.add_argument("--draft", default=None, help="draft for --engine default (default/ngram/none)")
    p.add_argument("--max-chars", type=int, default=None, help="type at most this many characters")
    p.add_argument("--max-new-tokens", type=int, default=16)
    args = p.parse_args(argv)
    session = typing_session(inspect.getsource(textwrap), max_chars=args.max_chars)
    print(f"typing session: TextWrapper._split body retyped, {len(session)} keystrokes, "
          f"document {len(session[-1].text)} chars")
    engine = None
    if args.engine:
        from engine import LocalEngine, EngineConfig
        engine = LocalEngine(EngineConfig(draft=args.draft or "default"))
        toks = (engine.target.tokenizer, engine.draft.tokenizer if engine.draft else None, f"engine {args.engine}")
    else:
        toks = shipped_tokenizers()
    target_tok, draft_tok, where = toks
    print(f"tokenizers: {where}")
    print(f"{'model':8} {'family':10} {'layout':6} {'prompt tok':>10} {'reused':>9} {'recomputed':>10} "
          f"{'reuse':>7} {'recomp/key':>10}")
    for role, tok in (("target", target_tok), ("draft", draft_tok)):
        if tok is None:
            continue
        t = load_template(tok)
        for layout in t.layouts:
            r = prompt_reuse(t, session, layout)
            print(f"{role:8} {t.family:10} {layout:6} {r['prompt_tokens']:>10} {r['reused']:>9} "
                  f"{r['recomputed']:>10} {r['reuse_rate']:>7.1%} {r['recomputed_per_keystroke']:>10}")
    if engine is not None:
        print("\nengine replay (every keystroke runs the model; completion cache cleared):")
        for layout in ("psm", "spm"):
            r = engine_replay(engine, session, layout, args.max_new_tokens)
            print(f"  {layout}: " + ", ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
