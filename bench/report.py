"""Per-request records -> per-configuration figures, the markdown report and the plot."""
from __future__ import annotations

from pathlib import Path

from completion.stats import percentile

GOAL_P50_MS = 100.0
GOAL_P95_MS = 200.0
GOAL_SPEEDUP = 3.0          # full vs hf-assisted at p50

LABELS = {
    "full": "1. specfill as shipped (draft + lookup, cost-aware; KV reuse; cache)",
    "no-draft": "2. specfill, no draft",
    "no-kv-reuse": "3. specfill, no KV reuse",
    "hf-assisted": "4. transformers generate(assistant_model)",
    "hf-plain": "5. transformers generate()",
    "ngram": "6. specfill, prompt lookup only",
    "draft": "7. specfill, draft model alone",
}
PARTS = (("server_ms", "server + transport"), ("pipeline_ms", "prompt + post-processing"),
         ("prefill_ms", "prefill"), ("draft_ms", "drafting"), ("verify_ms", "verification"),
         ("engine_other_ms", "engine other"))


# ------------------------------------------------------------------------------ records

def _base(config, file, keystroke, line, character, trigger, window_ms, latency_ms, text) -> dict:
    return {"config": config, "file": file, "keystroke": keystroke, "line": line, "character": character,
            "trigger": trigger, "window_ms": round(window_ms, 1), "latency_ms": round(latency_ms, 3),
            "late": latency_ms > window_ms, "shown": bool(text), "text": text}


def server_record(config, file, keystroke, line, character, trigger, window_ms, latency_ms, text,
                  job: dict, engine: dict) -> dict:
    """A request answered by the server. `job`: the worker job (empty if none ran, e.g. the
    request was dropped); `engine`: the model run's stats (empty for cache hits)."""
    r = _base(config, file, keystroke, line, character, trigger, window_ms, latency_ms, text)
    r.update(ran_model=bool(engine), from_cache=bool(job.get("from_cache")), job_ms=job.get("ms"))
    for k in ("new_tokens", "target_calls", "drafted", "accepted", "prefill_tokens", "reused_tokens",
              "prompt_tokens", "prefill_ms", "draft_ms", "verify_ms", "stop_reason", "shown_tokens",
              "rounds", "rounds_by_drafter", "policy", "controller", "by_position", "first_from_prefill",
              "pair_shared", "plan_ms"):
        r[k] = engine.get(k)
    r["engine_ms"] = engine.get("latency_ms")
    r["raw_text"] = engine.get("raw_text")     # the model's output before post-processing
    return r


def hf_record(config, file, keystroke, line, character, trigger, window_ms, latency_ms, text,
              raw_text, new_tokens, target_calls, prompt_tokens) -> dict:
    """A request answered by transformers generate(): `text` is its output post-processed as the
    server does (what an editor would show), `raw_text` the output itself."""
    r = _base(config, file, keystroke, line, character, trigger, window_ms, latency_ms, text)
    r.update(ran_model=True, from_cache=False, job_ms=None, new_tokens=new_tokens, target_calls=target_calls,
             drafted=None, accepted=None, prefill_tokens=prompt_tokens, reused_tokens=0,
             prompt_tokens=prompt_tokens, prefill_ms=None, draft_ms=None, verify_ms=None,
             stop_reason=None, engine_ms=None, raw_text=raw_text)
    return r


# ------------------------------------------------------------------------------ figures

def _ratio(a, b):
    return a / b if b else None


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def same_as_plain(records: list[dict], config: str) -> tuple[int, int] | None:
    """(model runs whose output equals plain generate()'s at the same keystroke, runs compared):
    the same ghost text, and raw outputs that agree as far as both decoded (each stops where its
    answer was decided, a round may run a few tokens past); None without hf-plain."""
    plain = {(r["file"], r["keystroke"]): r for r in records if r["config"] == "hf-plain"}
    if not plain or config == "hf-plain":
        return None
    same = compared = 0
    for r in records:
        p = plain.get((r["file"], r["keystroke"]))
        if r["config"] != config or not r["ran_model"] or r.get("raw_text") is None or p is None:
            continue
        compared += 1
        n = min(len(r["raw_text"]), len(p["raw_text"]))
        same += r["text"] == p["text"] and r["raw_text"][:n] == p["raw_text"][:n]
    return same, compared


def prompt_mismatches(records: list[dict], config: str) -> int:
    """Model runs whose prompt length differs from generate()'s at the same keystroke: the
    configurations did not see the same prompts (e.g. the code changed during the run)."""
    ref = {(r["file"], r["keystroke"]): r["prompt_tokens"] for r in records
           if r["config"] in ("hf-plain", "hf-assisted")}
    return sum(1 for r in records if r["config"] == config and r["ran_model"]
               and (r["file"], r["keystroke"]) in ref and r["prompt_tokens"] != ref[(r["file"], r["keystroke"])])


def summarize(records: list[dict], configs: list[str]) -> dict:
    out = {}
    for config in configs:
        rs = [r for r in records if r["config"] == config]
        runs = [r for r in rs if r["ran_model"]]
        lat = [r["latency_ms"] for r in rs]
        run_lat = [r["latency_ms"] for r in runs]
        total = lambda key: sum(r[key] or 0 for r in runs)  # noqa: E731
        drafted = total("drafted")
        s = {
            "label": LABELS.get(config, config),
            "requests": len(rs), "model_runs": len(runs),
            "cache_hits": sum(r["from_cache"] for r in rs), "shown": sum(r["shown"] for r in rs),
            "late": sum(r["late"] for r in rs),
            "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99),
            "mean_ms": _mean(lat),
            "model_p50_ms": percentile(run_lat, 50), "model_p95_ms": percentile(run_lat, 95),
            "acceptance": _ratio(total("accepted"), drafted) if drafted else None,
            "tokens_per_target_call": _ratio(total("new_tokens"), total("target_calls")),
            "kv_reuse": _ratio(total("reused_tokens"), total("reused_tokens") + total("prefill_tokens")),
            "new_tokens_per_run": _ratio(total("new_tokens"), len(runs)),
            # tokens the engine decoded per token behind the text shown (server configurations)
            "decoded_per_shown": (_ratio(total("new_tokens"), total("shown_tokens"))
                                  if any(r.get("shown_tokens") is not None for r in runs) else None),
            "prompt_tokens_per_run": _ratio(total("prompt_tokens"), len(runs)),
            "prefill_tokens_per_run": _ratio(total("prefill_tokens"), len(runs)),
            "same_as_plain": same_as_plain(records, config),
            "prompt_mismatches": prompt_mismatches(records, config),
        }
        # Where the time of a model run goes (means over model runs; server configurations only).
        timed = [r for r in runs if r["engine_ms"] is not None and r["job_ms"] is not None]
        if timed:
            s["breakdown_ms"] = {
                "total_ms": _mean([r["latency_ms"] for r in timed]),
                "server_ms": _mean([r["latency_ms"] - r["job_ms"] for r in timed]),
                "pipeline_ms": _mean([r["job_ms"] - r["engine_ms"] for r in timed]),
                "prefill_ms": _mean([r["prefill_ms"] for r in timed]),
                "draft_ms": _mean([r["draft_ms"] for r in timed]),
                "verify_ms": _mean([r["verify_ms"] for r in timed]),
                "engine_other_ms": _mean([r["engine_ms"] - (r["prefill_ms"] or 0) - (r["draft_ms"] or 0)
                                          - (r["verify_ms"] or 0) for r in timed]),
            }
        elif runs:
            s["breakdown_ms"] = {"total_ms": _mean(run_lat)}
        out[config] = s
    return out


def goals(summary: dict) -> list[tuple[str, str, bool | None]]:
    """(goal, measured, met) for the three goals; met is None when not measured."""
    full = summary.get("full")
    hf = summary.get("hf-assisted")
    rows = []
    p50 = full and full["p50_ms"]
    p95 = full and full["p95_ms"]
    rows.append((f"p50 < {GOAL_P50_MS:.0f} ms (configuration 1)", _ms(p50), p50 < GOAL_P50_MS if p50 else None))
    rows.append((f"p95 < {GOAL_P95_MS:.0f} ms (configuration 1)", _ms(p95), p95 < GOAL_P95_MS if p95 else None))
    if full and hf and full["p50_ms"] and hf["p50_ms"]:
        speedup = hf["p50_ms"] / full["p50_ms"]
        rows.append((f"configuration 1 >= {GOAL_SPEEDUP:.0f}x faster than 4 at p50", f"{speedup:.1f}x",
                     speedup >= GOAL_SPEEDUP))
    else:
        rows.append((f"configuration 1 >= {GOAL_SPEEDUP:.0f}x faster than 4 at p50", "not measured", None))
    return rows


# ------------------------------------------------------------------------------ markdown

def _ms(v) -> str:
    return "-" if v is None else f"{v:.0f}" if v >= 10 else f"{v:.1f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _num(v, digits=2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _same(v) -> str:
    return "-" if v is None else f"{v[0]}/{v[1]}"


def table(summary: dict) -> str:
    rows = ["| configuration | requests | model runs | cache hits | p50 ms | p95 ms | p99 ms | "
            "p50 ms, model runs | acceptance | tokens / target pass | decoded / shown tokens | KV reuse | late "
            "| same output as 5 |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary.values():
        rows.append(f"| {s['label']} | {s['requests']} | {s['model_runs']} | {s['cache_hits']} | "
                    f"{_ms(s['p50_ms'])} | {_ms(s['p95_ms'])} | {_ms(s['p99_ms'])} | {_ms(s['model_p50_ms'])} | "
                    f"{_pct(s['acceptance'])} | {_num(s['tokens_per_target_call'])} | "
                    f"{_num(s['decoded_per_shown'])} | {_pct(s['kv_reuse'])} | "
                    f"{s['late']} | {_same(s['same_as_plain'])} |")
    return "\n".join(rows)


def breakdown_table(summary: dict) -> str:
    rows = ["| configuration | total | " + " | ".join(name for _, name in PARTS) +
            " | new tokens | prompt tokens (computed) |",
            "|---|---|" + "---|" * len(PARTS) + "---|---|"]
    for s in summary.values():
        b = s.get("breakdown_ms")
        if not b:
            continue
        parts = " | ".join(_ms(b.get(k)) for k, _ in PARTS)
        rows.append(f"| {s['label']} | {_ms(b['total_ms'])} | {parts} | {_num(s['new_tokens_per_run'], 1)} | "
                    f"{_num(s['prompt_tokens_per_run'], 0)} ({_num(s['prefill_tokens_per_run'], 0)}) |")
    return "\n".join(rows)


def markdown(summary: dict, meta: dict) -> str:
    s = meta["settings"]
    lines = [
        "# specfill keystroke-replay benchmark", "",
        f"Command: `{meta['command']}`  ",
        f"Machine: {meta['machine']}  ",
        f"Run: {meta['started']}; models: target `{s.get('targetModel')}`, draft `{s.get('draftModel')}`  ",
        f"Replay: {len(meta['files'])} files ({', '.join(meta['files'])}), {meta['typed_lines']} lines typed "
        f"{'at the end' if meta.get('typed_at') == 'end' else 'into the middle'} of each, "
        f"{meta['requests_per_config']} completion requests per configuration "
        f"(editor asks after {meta['editor_debounce_ms']:.0f} ms without a keystroke).", "",
        table(summary), "",
        *[f"**Warning**: {n} model runs of {s['label']} had other prompts than generate() at the same "
          "keystroke; this run does not compare like with like (rerun it).  " for s in summary.values()
          if (n := s.get("prompt_mismatches"))],
        "Latency: from sending `textDocument/inlineCompletion` to having the answer, as the editor "
        "sees it (server debounce, cache hits and empty answers included); for 4 and 5: building the "
        "same prompt with the completion pipeline plus `generate()`. *Model runs*: requests that ran "
        "the model (the rest were cache hits). *Tokens / target pass*: generated tokens per target "
        "forward pass, prefill included. *KV reuse*: prompt tokens served from the KV cache. *Late*: "
        "answers that came after the typist's next keystroke would have. *Same output as 5*: model "
        "runs whose raw output equals plain greedy `generate()` at the same keystroke (up to the "
        "stop string), the lossless check.", "",
        "## Goals (default pair, 2-core CPU)", "",
        "| goal | measured | met |", "|---|---|---|",
    ]
    for goal, measured, met in goals(summary):
        lines.append(f"| {goal} | {measured} | {'-' if met is None else 'yes' if met else '**no**'} |")
    lines += ["", "## Where the time goes (mean ms per model run)", "",
              breakdown_table(summary), "",
              "*Server + transport*: request latency minus the worker job (the server's debounce, "
              "JSON-RPC, queueing). *Prompt + post-processing*: the pipeline outside the engine. "
              "*Prefill*: the target computing the uncached part of the prompt. *Drafting*: the draft "
              "proposing tokens. *Verification*: target passes checking the drafts (or generating, "
              "without a draft). *Engine other*: everything else inside the engine.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ plot

def plot(records: list[dict], summary: dict, path: Path) -> Path | None:
    """Latency distribution per configuration (and the time split of a model run); None when
    matplotlib is missing."""
    try:
        import matplotlib
        import matplotlib.ticker
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    for config, s in summary.items():
        lat = sorted(r["latency_ms"] for r in records if r["config"] == config)
        if not lat:
            continue
        ys = [(i + 1) / len(lat) for i in range(len(lat))]
        ax.step(lat, ys, where="post", label=f"{s['label']} (p50 {_ms(s['p50_ms'])} ms)")
    for goal, style in ((GOAL_P50_MS, ":"), (GOAL_P95_MS, "--")):
        ax.axvline(goal, color="grey", linestyle=style, linewidth=1)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 5)))
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("request -> ghost text (ms, log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("latency distribution (dotted: 100 ms, dashed: 200 ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")

    names, hf_labelled = [], False
    configs = [c for c, s in summary.items() if s.get("breakdown_ms")]
    for i, config in enumerate(configs):
        b = summary[config]["breakdown_ms"]
        names.append(summary[config]["label"].split(" ", 1)[0] + " " + config)
        x = 0.0
        if "prefill_ms" in b:
            for j, (key, label) in enumerate(PARTS):
                v = max(0.0, b.get(key) or 0.0)
                bx.barh(i, v, left=x, color=f"C{j}", label=label if i == 0 else None)
                x += v
        else:
            bx.barh(i, b["total_ms"], color="lightgrey", label=None if hf_labelled else "generate() (not split)")
            hf_labelled = True
    bx.set_yticks(range(len(names)), names, fontsize=8)
    bx.invert_yaxis()
    bx.set_xlabel("mean ms per model run")
    bx.set_title("where the time goes")
    bx.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
