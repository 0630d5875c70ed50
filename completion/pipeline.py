"""Editor request -> prompts for target and draft -> engine -> clean ghost text, with a cache.

Every setting is a field of `CompletionOptions`, documented where it is declared. The pipeline
is synchronous: the language server calls `complete` from its one engine worker thread and may
call `note_document` / `stats_summary` from others.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import cachetools

from completion.cache import CompletionCache
from completion.context import Cursor, ExtraContext, TokenCounter, cut_window, parse_document, uri_to_path
from completion.postprocess import clean_completion, is_closers_only, with_eol
from completion.templates import FAMILIES, FimTemplate, load_template
from engine.settings import GenerationSettings

log = logging.getLogger(__name__)

PROMPT_OVERHEAD_TOKENS = 48   # sentinels, BOS, file headers and per-line counting slack


@dataclass
class CompletionOptions:
    fim_template: str = "auto"        # target's prompt format: auto (from its tokenizer) or a family name
    draft_fim_template: str = "auto"  # the draft's own format (it may be another family)
    fim_layout: str = "auto"          # auto | psm | spm; auto = the family's faster layout (SPM if trained)
    prefix_tokens: int = 1024         # budget for text before the cursor (target tokens)
    suffix_tokens: int = 256          # budget for text after the cursor
    extra_tokens: int = 256           # budget for chunks of other open documents (0 = off)
    window_step_lines: int = 16       # the prefix window's start moves in steps of this many lines
    multiline: str = "auto"           # auto (one line if code is right of the cursor) | always | never
    max_lines: int = 8                # most lines of one multi-line completion
    max_new_tokens: int = 64
    temperature: float = 0.0          # 0 = greedy (the lossless speculative path)
    draft_length: int | str = "auto"  # tokens the draft proposes per round, or auto
    time_budget_ms: float | None = None  # return what is ready after this long
    tab_size: int = 4                 # for comparing tab and space indentation

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        def bad(name, why):
            raise ValueError(f"invalid completion setting {name}={getattr(self, name)!r}: {why}")
        for name in ("fim_template", "draft_fim_template"):
            if getattr(self, name) not in ("auto", *FAMILIES):
                bad(name, f"expected auto or one of {', '.join(FAMILIES)}")
        if self.fim_layout not in ("auto", "psm", "spm"):
            bad("fim_layout", "expected auto, psm or spm")
        if self.multiline not in ("auto", "always", "never"):
            bad("multiline", "expected auto, always or never")
        for name, low in (("prefix_tokens", 1), ("suffix_tokens", 0), ("extra_tokens", 0),
                          ("window_step_lines", 1), ("max_lines", 1), ("max_new_tokens", 1), ("tab_size", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                bad(name, f"expected an integer >= {low}")
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            bad("temperature", "expected a number >= 0")
        if self.draft_length != "auto" and (not isinstance(self.draft_length, int) or self.draft_length < 1):
            bad("draft_length", "expected auto or an integer >= 1")
        if self.time_budget_ms is not None and (not isinstance(self.time_budget_ms, (int, float))
                                                or self.time_budget_ms <= 0):
            bad("time_budget_ms", "expected a positive number or None")

    def cache_key(self) -> tuple:
        """The settings that change what is shown (draft_length does not: decoding is lossless)."""
        return (self.fim_template, self.fim_layout, self.prefix_tokens, self.suffix_tokens,
                self.extra_tokens, self.window_step_lines, self.multiline, self.max_lines,
                self.max_new_tokens, self.temperature)


@dataclass
class CompletionRequest:
    uri: str
    text: str          # the whole document
    line: int          # 0-based
    character: int     # 0-based, python codepoints


@dataclass
class Completion:
    text: str                          # ghost text to insert at the cursor (document's line ending)
    replace_end: tuple[int, int]       # end of the replaced range; == cursor unless closers are replaced
    from_cache: bool = False
    stats: dict = field(default_factory=dict)
    cursor: tuple[int, int] = (0, 0)   # the (clamped) cursor the text belongs to


def _percentiles(values) -> dict:
    v = sorted(values)
    if not v:
        return {"p50": None, "p95": None, "p99": None}
    pick = lambda q: round(v[min(len(v) - 1, int(q * len(v)))], 3)  # noqa: E731
    return {"p50": pick(0.50), "p95": pick(0.95), "p99": pick(0.99)}


@dataclass
class PipelineStats:
    requests: int = 0
    cache_hits: int = 0
    typed_through: int = 0
    shown: int = 0
    empty: int = 0
    cancelled: int = 0
    model_requests: int = 0
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0
    decode_calls: int = 0          # target calls after prefill
    prefill_tokens: int = 0
    reused_tokens: int = 0
    draft_prefill_tokens: int = 0
    draft_reused_tokens: int = 0
    prompt_tokens: int = 0
    prompt_shared_tokens: int = 0  # longest common prefix with the previous prompt of the document
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))
    model_latencies_ms: deque = field(default_factory=lambda: deque(maxlen=2000))

    def summary(self) -> dict:
        ratio = lambda a, b: round(a / b, 4) if b else 0.0  # noqa: E731
        return {
            "requests": self.requests, "shown": self.shown, "empty": self.empty,
            "cancelled": self.cancelled, "cache_hits": self.cache_hits,
            "typed_through": self.typed_through, "cache_hit_rate": ratio(self.cache_hits, self.requests),
            "latency_ms": _percentiles(self.latencies_ms),
            "model_latency_ms": _percentiles(self.model_latencies_ms),
            "acceptance_rate": ratio(self.accepted, self.drafted),
            "tokens_per_target_call": ratio(self.new_tokens, self.decode_calls),
            "kv_reuse": ratio(self.reused_tokens, self.reused_tokens + self.prefill_tokens),
            "draft_kv_reuse": ratio(self.draft_reused_tokens, self.draft_reused_tokens + self.draft_prefill_tokens),
            "prompt_reuse": ratio(self.prompt_shared_tokens, self.prompt_tokens),
            "drafted": self.drafted, "accepted": self.accepted, "new_tokens": self.new_tokens,
            "prefill_tokens": self.prefill_tokens, "reused_tokens": self.reused_tokens,
        }


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CompletionPipeline:
    def __init__(self, engine, cache_size: int = 250, cache_ttl_s: float = 300.0,
                 extra_chunks: int = 16, extra_chunk_lines: int = 32):
        self.engine = engine
        self.cache = CompletionCache(maxsize=cache_size, ttl_s=cache_ttl_s)
        self.extra = ExtraContext(max_chunks=extra_chunks, chunk_lines=extra_chunk_lines)
        self._stats = PipelineStats()
        self._lock = threading.Lock()
        self._templates: dict[tuple[str, str], FimTemplate] = {}
        self._counters: dict[int, TokenCounter] = {}
        self._last_prompt: cachetools.LRUCache = cachetools.LRUCache(64)
        self.last_stats: dict = {}    # stats of the latest model run, also when nothing was shown

    # -- templates ------------------------------------------------------------------------------
    def template(self, which: str, setting: str = "auto") -> FimTemplate | None:
        """The FIM template of the target or the draft (None: no draft model)."""
        key = (which, setting)
        if key not in self._templates:
            model = self.engine.target if which == "target" else self.engine.draft
            if model is None:
                return None
            t = load_template(model.tokenizer, setting)
            log.info("%s prompts: %s (layouts %s)", which, t.family, "/".join(t.layouts))
            self._templates[key] = t
        return self._templates[key]

    def _counter(self, t: FimTemplate) -> TokenCounter:
        c = self._counters.get(id(t))
        if c is None:
            c = self._counters[id(t)] = TokenCounter(t.encode_infill)
        return c

    # -- requests ---------------------------------------------------------------------------------
    def note_document(self, uri: str, text: str, line: int | None = None) -> None:
        """Offer another open document as extra context (chunk around `line` or its latest edit)."""
        with self._lock:
            self.extra.note(uri, text, line)

    def forget_document(self, uri: str) -> None:
        with self._lock:
            self.extra.forget(uri)
            self.cache.forget(uri)

    def complete(self, req: CompletionRequest, options: CompletionOptions | None = None,
                 cancel: threading.Event | None = None) -> Completion | None:
        t0 = time.perf_counter()
        options = options or CompletionOptions()
        options.validate()
        cur = parse_document(req.text, req.line, req.character)
        with self._lock:
            self._stats.requests += 1
        try:
            out = self._complete(req, cur, options, cancel, t0)
        except Exception:
            with self._lock:
                self._stats.latencies_ms.append((time.perf_counter() - t0) * 1000)
            raise
        with self._lock:
            self._stats.latencies_ms.append((time.perf_counter() - t0) * 1000)
            if out is None:
                self._stats.empty += 1
            else:
                self._stats.shown += 1
        return out

    def _complete(self, req, cur: Cursor, options, cancel, t0) -> Completion | None:
        prefix_text = cur.prefix_text()
        suffix_head = cur.suffix_head(self.cache.head_chars)
        settings = options.cache_key()
        with self._lock:
            hit = self.cache.get(req.uri, prefix_text, suffix_head, settings)
        if hit is not None:
            with self._lock:
                self._stats.cache_hits += 1
                self._stats.typed_through += hit.typed_through > 0
            return self._result(cur, hit.text, hit.replace_chars, True, {}) if hit.text else None
        if cancel is not None and cancel.is_set():
            with self._lock:
                self._stats.cancelled += 1
            return None

        target = self.template("target", options.fim_template)
        draft = self.template("draft", options.draft_fim_template)
        path = uri_to_path(req.uri)
        t_layout = target.resolve_layout(options.fim_layout)
        target_ids, window, extra = self._prompt(target, self.engine.target, req.uri, cur, options,
                                                 t_layout, path)
        draft_ids = d_layout = None
        if draft is not None:
            # The draft's own window, in its own tokens and within its own context length.
            d_layout = draft.resolve_layout(options.fim_layout)
            draft_ids, _, _ = self._prompt(draft, self.engine.draft, req.uri, cur, options, d_layout, path)

        single_line = options.multiline == "never" or bool(
            options.multiline == "auto" and cur.rest_of_line.strip() and not is_closers_only(cur.rest_of_line))
        gen = GenerationSettings(
            max_new_tokens=options.max_new_tokens, draft_length=options.draft_length,
            temperature=options.temperature, stop_strings=("\n",) if single_line else (),
            time_budget_ms=options.time_budget_ms)
        result = self.engine.generate(target_ids, draft_ids, gen, stop_ids=target.stop_ids, cancel=cancel)

        prev = self._last_prompt.get(req.uri)
        shared = common_prefix_len(prev, target_ids) if prev else 0
        self._last_prompt[req.uri] = target_ids
        st = result.stats
        with self._lock:
            s = self._stats
            s.model_requests += 1
            s.model_latencies_ms.append((time.perf_counter() - t0) * 1000)
            s.drafted += st.drafted
            s.accepted += st.accepted
            s.new_tokens += st.new_tokens
            s.decode_calls += st.rounds  # one target forward per round; prefill excluded
            s.prefill_tokens += st.prefill_tokens
            s.reused_tokens += st.reused_tokens
            s.draft_prefill_tokens += getattr(st, "draft_prefill_tokens", 0)
            s.draft_reused_tokens += getattr(st, "draft_reused_tokens", 0)
            s.prompt_tokens += len(target_ids)
            s.prompt_shared_tokens += shared
            if result.stop_reason == "cancelled":
                s.cancelled += 1
        if result.stop_reason == "cancelled":
            return None

        cleaned = clean_completion(result.text, cur, options.multiline, options.max_lines, options.tab_size)
        text = cleaned.text if cleaned else ""
        replace = cleaned.replace_chars if cleaned else 0
        if result.stop_reason != "time_budget":    # a partial answer is not what the model would say
            with self._lock:
                self.cache.put(req.uri, prefix_text, suffix_head, settings, text, replace)
        stats = st.as_dict()
        stats.update(stop_reason=result.stop_reason, prompt_tokens=len(target_ids),
                     draft_prompt_tokens=len(draft_ids) if draft_ids is not None else 0,
                     prompt_shared_tokens=shared, template=target.family, layout=t_layout,
                     draft_template=draft.family if draft else None, draft_layout=d_layout,
                     window_lines=[window.start_line, window.end_line], extra_chunks=len(extra),
                     raw_text=result.text)
        self.last_stats = stats
        return self._result(cur, text, replace, False, stats) if text else None

    def _prompt(self, template: FimTemplate, model, uri: str, cur: Cursor, options: CompletionOptions,
                layout: str, path: str):
        """(prompt ids, window, extra chunks) for one model, within that model's budgets."""
        count = self._counter(template)
        prefix_budget, suffix_budget, extra_budget = self._budgets(options, model)
        window = cut_window(cur, count, prefix_budget, suffix_budget, options.window_step_lines)
        with self._lock:
            extra = self.extra.select(uri, extra_budget, count)
        return template.build(window.prefix, window.suffix, layout, extra, path=path), window, extra

    def _budgets(self, options: CompletionOptions, model=None) -> tuple[int, int, int]:
        """Token budgets scaled down together to fit the model's context and the engine's KV
        cache limit, so large settings (or a small model) shrink context instead of failing."""
        model = model if model is not None else getattr(self.engine, "target", None)
        limits = [getattr(getattr(self.engine, "config", None), "max_cache_tokens", None),
                  getattr(model, "max_positions", None)]
        limits = [x for x in limits if isinstance(x, int) and x > 0]
        budgets = (options.prefix_tokens, options.suffix_tokens, options.extra_tokens)
        if not limits:
            return budgets
        room = min(limits) - options.max_new_tokens - PROMPT_OVERHEAD_TOKENS
        if sum(budgets) <= room:
            return budgets
        scale = max(room, 1) / sum(budgets)
        return (max(1, int(budgets[0] * scale)), int(budgets[1] * scale), int(budgets[2] * scale))

    @staticmethod
    def _result(cur: Cursor, text: str, replace: int, from_cache: bool, stats: dict) -> Completion:
        return Completion(text=with_eol(text, cur.eol), replace_end=(cur.line, cur.character + replace),
                          from_cache=from_cache, stats=stats, cursor=(cur.line, cur.character))

    def stats_summary(self) -> dict:
        with self._lock:
            out = self._stats.summary()
        for k in ("template", "layout", "draft_template", "draft_layout"):
            if k in self.last_stats:
                out[k] = self.last_stats[k]
        return out

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = PipelineStats()
