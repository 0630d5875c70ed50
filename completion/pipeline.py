"""Editor request -> prompts for target and draft -> engine -> clean ghost text, with a cache.

Every setting is a field of `CompletionOptions`, documented where it is declared. The pipeline
is synchronous: the language server calls `complete` from its one engine worker thread and may
call `note_document` / `stats_summary` from others.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import cachetools

from completion.cache import CompletionCache
from completion.context import Cursor, ExtraContext, TokenCounter, cut_window, parse_document, to_lf, uri_to_path
from completion.postprocess import AnswerCut, Cleaned, clean_answer, empty_reason, with_eol
from completion.stats import PipelineStats
from completion.templates import FAMILIES, LAYOUTS, FimTemplate, load_template
from engine.kv import common_prefix_len
from engine.protocol import TokenPrompt
from engine.remote import InfillPrompt, RemoteError, ServerInfo, TextPrompt
from engine.settings import GenerationResult, GenerationSettings, TextStop

if TYPE_CHECKING:   # loading torch stays lazy for the language server
    from engine.drafters.documents import LookupText
    from engine.load.models import LoadedModel
    from engine.protocol import Engine

log = logging.getLogger(__name__)

PROMPT_OVERHEAD_TOKENS = 48   # sentinels, BOS, file headers and per-line counting slack
# A draft model's config.json may say how long a prompt it drafts best from (its own tokens):
# a small draft can do better with the text nearest the cursor than with the target's whole
# window, and its prefill costs less (`python -m bench.draft_window` measures it for a pair).
DRAFT_PROMPT_KEY = "specfill_draft_prompt_tokens"
MIN_DRAFT_PROMPT_TOKENS = 16


@dataclass(frozen=True)
class CompletionOptions:
    """Validated once, when made; frozen so that stays true."""
    fim_template: str = "auto"        # target's prompt format: auto (from its tokenizer) or a family name
    draft_fim_template: str = "auto"  # the draft's own format (it may be another family)
    fim_layout: str = "auto"          # auto or one of LAYOUTS; auto: SPM where trained, else PSM-LINE
    prefix_tokens: int = 1024         # budget for text before the cursor (target tokens)
    suffix_tokens: int = 256          # budget for text after the cursor
    extra_tokens: int = 256           # budget for chunks of other open documents (0 = off)
    window_step_lines: int = 16       # the prefix window's start moves in steps of this many lines
    multiline: str = "auto"           # auto (one line if code is right of the cursor) | always | never
    max_lines: int = 8                # most lines of one multi-line completion
    max_new_tokens: int = 64
    temperature: float = 0.0          # 0 = greedy (the lossless speculative path)
    draft_length: int | str = "auto"  # tokens the draft proposes per round, or auto
    # Tokens of the draft model's prompt (its own tokens), nearest the cursor within the target's
    # window; auto = what the draft's config recommends (DRAFT_PROMPT_KEY), else the whole window.
    draft_prompt_tokens: int | str = "auto"
    time_budget_ms: float | None = None  # return what is ready after this long
    tab_size: int = 4                 # for comparing tab and space indentation
    # Stop decoding the moment post-processing would cut. False decodes to max_new_tokens (or
    # the model's end) and cuts afterwards, to measure what this saves; the text shown is the same.
    stop_while_decoding: bool = True
    # Prompt lookup also reads the whole document and the other open documents, not only the
    # prompt and recent completions (False: only those, to measure what the rest brings).
    lookup_documents: bool = True

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        def bad(name, why):
            raise ValueError(f"invalid completion setting {name}={getattr(self, name)!r}: {why}")
        for name in ("fim_template", "draft_fim_template"):
            if getattr(self, name) not in ("auto", *FAMILIES):
                bad(name, f"expected auto or one of {', '.join(FAMILIES)}")
        if self.fim_layout not in ("auto", *LAYOUTS):
            bad("fim_layout", f"expected auto or one of {', '.join(LAYOUTS)}")
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
        if self.draft_prompt_tokens != "auto" and (not isinstance(self.draft_prompt_tokens, int)
                                                   or isinstance(self.draft_prompt_tokens, bool)
                                                   or self.draft_prompt_tokens < MIN_DRAFT_PROMPT_TOKENS):
            bad("draft_prompt_tokens", f"expected auto or an integer >= {MIN_DRAFT_PROMPT_TOKENS}")
        for name in ("stop_while_decoding", "lookup_documents"):
            if not isinstance(getattr(self, name), bool):
                bad(name, "expected true or false")
        if self.time_budget_ms is not None and (not isinstance(self.time_budget_ms, (int, float))
                                                or self.time_budget_ms <= 0):
            bad("time_budget_ms", "expected a positive number or None")

    def cache_key(self) -> tuple:
        """The settings that change what is shown (draft_length does not: decoding is lossless)."""
        return (self.fim_template, self.fim_layout, self.prefix_tokens, self.suffix_tokens,
                self.extra_tokens, self.window_step_lines, self.multiline, self.max_lines,
                self.max_new_tokens, self.temperature)


def draft_prompt_cap(model) -> int | None:
    """How long a prompt a draft model drafts best from, as its config says (None: unsaid)."""
    value = getattr(getattr(model, "config", None), DRAFT_PROMPT_KEY, None)
    return value if isinstance(value, int) and value >= MIN_DRAFT_PROMPT_TOKENS else None


def draft_window(cur: Cursor, count, budgets: tuple[int, int, int], cap: int | None, step_lines: int,
                 within: tuple[int, int] | None = None):
    """The draft model's (window, extra-context budget): its (prefix, suffix, extra) `budgets`
    inside the lines `within` (the target's window), and with a `cap` the prefix and suffix
    share it as their budgets do, extra chunks get only what the window left, and the window
    moves in quarter steps (else a 16-line step would cut most of a small budget: on the held-out
    editor positions of training.distill_eval, the shipped draft capped at 256 was accepted 0.42
    of the time with 16-line steps, 0.44 with 4)."""
    prefix_budget, suffix_budget, extra_budget = budgets
    if cap is not None:
        if prefix_budget + suffix_budget > cap:
            prefix_budget, suffix_budget = _scaled((prefix_budget, suffix_budget), cap)
        step_lines = max(1, step_lines // 4)
    window = cut_window(cur, count, prefix_budget, suffix_budget, step_lines, within=within)
    if cap is not None:
        extra_budget = min(extra_budget, cap - window.prefix_tokens - window.suffix_tokens)
    return window, extra_budget


def nearest_text(prefix: str, suffix: str, count, cap: int) -> tuple[str, str]:
    """The (prefix, suffix) of a text cut at the cursor that a draft reads within `cap` tokens:
    `draft_window` over it with the editor's default budgets and step (no suffix budget when
    there is no suffix). `count`: tokens of a string (a TokenCounter)."""
    options = CompletionOptions()
    cur = parse_document(prefix + suffix, prefix.count("\n"), len(prefix) - (prefix.rfind("\n") + 1))
    window, _ = draft_window(cur, count, (options.prefix_tokens, options.suffix_tokens if suffix else 0, 0), cap,
                             options.window_step_lines)
    return window.prefix, window.suffix if suffix else ""


def left_to_right_draft_text(text: str, model, encode) -> str:
    """What a draft model reads of a left-to-right prompt (`specfill generate`): the end of
    `text` within its config's prompt length, else all of it. `encode`: its tokenizer's text
    encoder."""
    cap = draft_prompt_cap(model)
    return text if cap is None else nearest_text(text, "", TokenCounter(encode), cap)[0]


def _scaled(budgets: tuple[int, ...], room: int) -> tuple[int, ...]:
    """`budgets` scaled down together to sum to at most `room` (the first, the prefix, >= 1)."""
    scale = max(room, 1) / sum(budgets)
    return (max(1, int(budgets[0] * scale)), *(int(b * scale) for b in budgets[1:]))


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


@dataclass
class Prompts:
    """What one request sends to the engine, and how it was built (for stats)."""
    target: FimTemplate
    layout: str
    target_ids: list[int]
    window_start: int
    window_end: int
    extra_chunks: int
    draft: FimTemplate | None
    draft_layout: str | None
    build_draft: Callable[[], list[int]] | None = None   # None: no draft model
    built_draft_ids: list[int] | None = None
    extra: tuple = ()     # the target's extra-context chunks (ContextChunk), for stats

    def draft_ids(self) -> list[int]:
        """The draft model's prompt, built the first time it is asked for: the engine asks only
        when a round drafts with the model, and most rounds may not."""
        if self.built_draft_ids is None:
            self.built_draft_ids = self.build_draft()
        return self.built_draft_ids


class RequestPrompt:
    """One request's prompt, built in the form the engine asks for (engine/protocol.py, Prompt):
    token ids for local models, a server's prompt for a remote target; `described` says how it
    was built (for the stats)."""

    def __init__(self, pipeline: CompletionPipeline, uri: str, cur: Cursor, options: CompletionOptions):
        self.pipeline, self.uri, self.cur, self.options = pipeline, uri, cur, options
        self.described: dict = {}
        self.prompts: Prompts | None = None

    def tokens(self) -> TokenPrompt:
        pipe = self.pipeline
        p = self.prompts = pipe.build_prompts(self.uri, self.cur, self.options)
        self.described = pipe.describe(self.uri, p)
        return TokenPrompt(p.target_ids, p.draft_ids if p.build_draft else None, p.target.stop_ids,
                           pipe.lookup_texts(self.uri, self.cur, self.options, (p.window_start, p.window_end)))

    def server(self, info: ServerInfo) -> InfillPrompt | TextPrompt:
        prompt, self.described = self.pipeline.remote_prompt(self.uri, self.cur, self.options, info)
        return prompt

    @property
    def draft_prompt_tokens(self) -> int:
        """The draft model's prompt length; 0 where no round drafted with it."""
        return len(self.prompts.built_draft_ids or ()) if self.prompts is not None else 0


class CompletionPipeline:
    def __init__(self, engine: Engine, cache_size: int = 250, cache_ttl_s: float = 300.0,
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
            t = load_template(model.tokenizer, setting, plain=model.vocab.plain)
            log.info("%s prompts: %s (layouts %s)", which, t.family, "/".join(t.layouts))
            self._templates[key] = t
        return self._templates[key]

    def _counter(self, t: FimTemplate) -> TokenCounter:
        c = self._counters.get(id(t))
        if c is None:
            c = self._counters[id(t)] = TokenCounter(t.infill_ids)   # (the ids the prompt's lines reuse)
        return c

    # -- requests ---------------------------------------------------------------------------------
    def note_document(self, uri: str, text: str, line: int | None = None, source: str = "open") -> None:
        """Offer another open document as extra context (chunk around `line` or its latest edit)."""
        with self._lock:
            self.extra.note(uri, text, line, source)

    def note_text(self, uri: str, text: str, source: str = "yanks") -> None:
        """Offer text the user took from `uri` (a yank) as extra context."""
        with self._lock:
            self.extra.note_text(uri, text, source)

    def warm_lookup(self, texts: list[str], options: CompletionOptions | None = None, stop=lambda: False) -> int:
        """Tokenize documents' blocks for prompt lookup before the requests that read them
        (documents just opened, newest first, while no request waits: Engine.warm_lookup, until
        `stop()`). The tokens tokenized; 0 for an engine without lookup, or where requests with
        `options` would not read the documents. Text no request would read (binary, too large) is
        left out."""
        from engine.drafters.documents import LookupText

        options = options or CompletionOptions()
        if not options.lookup_documents:
            return 0

        def read():     # each document parsed when the engine reads it (an engine without lookup never does)
            for text in texts:
                try:
                    yield LookupText(parse_document(text, 0, 0).lines)
                except ValueError:
                    continue
        return self.engine.warm_lookup(read(), stop)

    def forget_document(self, uri: str) -> None:
        with self._lock:
            self.extra.forget(uri)
            self.cache.forget(uri)

    def complete(self, req: CompletionRequest, options: CompletionOptions | None = None,
                 cancel: threading.Event | None = None, background: bool = False) -> Completion | None:
        """The completion at req's cursor. `background`: asked by no one yet (a prefetch): its
        answer is cached, and the figures of requests (counts, latencies, lastCompletion) leave
        it out."""
        t0 = time.perf_counter()
        options = options or CompletionOptions()
        cur = parse_document(req.text, req.line, req.character)
        if background:
            return self._complete(req, cur, options, cancel, t0, background)
        with self._lock:
            self._stats.requests += 1
        try:
            out = self._complete(req, cur, options, cancel, t0)
        finally:
            with self._lock:
                self._stats.latencies_ms.append((time.perf_counter() - t0) * 1000)
        with self._lock:
            if out is None:
                self._stats.empty += 1
            else:
                self._stats.shown += 1
        return out

    def _complete(self, req: CompletionRequest, cur: Cursor, options: CompletionOptions,
                  cancel: threading.Event | None, t0: float, background: bool = False) -> Completion | None:
        prefix_text = cur.prefix_text()
        suffix_head = cur.suffix_head(self.cache.head_chars)
        settings = options.cache_key()
        with self._lock:
            hit = self.cache.get(req.uri, prefix_text, suffix_head, settings)
            if hit is not None and not background:
                self._stats.cache_hits += 1
                self._stats.typed_through += hit.typed_through > 0
            elif hit is None and not background and cancel is not None and cancel.is_set():
                self._stats.cancelled += 1
        if hit is not None:
            return self._result(cur, hit.text, hit.replace_chars, True, {}) if hit.text else None
        if cancel is not None and cancel.is_set():
            return None

        gen = GenerationSettings(max_new_tokens=options.max_new_tokens, draft_length=options.draft_length,
                                 temperature=options.temperature, time_budget_ms=options.time_budget_ms)
        stop_check = self._stop_check(cur, options) if options.stop_while_decoding else None
        prompt = RequestPrompt(self, req.uri, cur, options)
        result = self._decode(prompt, gen, cancel, stop_check)
        if result is None:     # the engine failed: told once, answered empty, nothing cached
            return None
        answer = cleaned = None
        if result.stop_reason != "cancelled":
            answer = clean_answer(result.text, cur, options.multiline, options.max_lines, options.tab_size)
            cleaned = answer if answer.text else None
        stats = self._run_stats(prompt, result, cleaned)
        if answer is not None:   # what ended the answer, and why nothing is shown when nothing is
            stats["cut_by"] = answer.cut_by
            if cleaned is None:
                stats["empty_reason"] = empty_reason(result.text, answer)
        with self._lock:
            self._stats.add_model_run(stats, (time.perf_counter() - t0) * 1000, background)
        if not background:
            self.last_stats = stats
        if result.stop_reason == "cancelled":
            return None

        text = cleaned.text if cleaned else ""
        replace = cleaned.replace_chars if cleaned else 0
        if result.stop_reason != "time_budget":    # a partial answer is not what the model would say
            with self._lock:
                self.cache.put(req.uri, prefix_text, suffix_head, settings, text, replace)
        return self._result(cur, text, replace, False, stats) if text else None

    @staticmethod
    def _stop_check(cur: Cursor, options: CompletionOptions):
        """The engine asks this after every round, and of a draft model's text at each draft
        step: is the answer decided? The same rules as the final cut (`find_cut`), so decoding
        stops exactly where post-processing would cut."""
        rules = AnswerCut(cur, options.multiline, options.max_lines, options.tab_size)

        def check(text: str) -> TextStop | None:
            cut = rules(to_lf(text), final=False)
            return TextStop(cut.reason, cut.decided_at) if cut is not None else None
        return check

    on_message: Callable[[str, bool], None] | None = None   # (message, is_error): tell the user

    def _decode(self, prompt: RequestPrompt, gen: GenerationSettings, cancel: threading.Event | None,
                stop_check) -> GenerationResult | None:
        """The engine's answer; a remote target's failure is told once per kind (and its recovery
        once) and gives no answer."""
        health = self.engine.health
        try:
            result = self.engine.decode(prompt, gen, cancel=cancel, stop_check=stop_check)
        except RemoteError as err:
            self.last_stats = {"remote_error": str(err), "remote_error_kind": err.kind}
            log.warning("remote target: %s", err)
            if health.failed(err) and self.on_message:
                self.on_message(str(err), True)
            return None
        if health.worked() and self.on_message:
            self.on_message(f"remote target {health.url} answers again", False)
        return result

    def remote_prompt(self, uri: str, cur: Cursor, options: CompletionOptions, info) -> tuple[object, dict]:
        """The remote's prompt (InfillPrompt or TextPrompt) and how it was built (for stats)."""
        from completion import remote_prompt as rp

        n_ctx = info.n_ctx or self.engine.config.max_cache_tokens
        room = max(n_ctx - options.max_new_tokens - PROMPT_OVERHEAD_TOKENS, 16)
        budgets = (options.prefix_tokens, options.suffix_tokens, options.extra_tokens)
        if sum(budgets) > room:
            scale = room / sum(budgets)
            budgets = (max(1, int(budgets[0] * scale)), int(budgets[1] * scale), int(budgets[2] * scale))
        window = cut_window(cur, rp.estimate_tokens, budgets[0], budgets[1], options.window_step_lines)
        with self._lock:
            extra = self.extra.select(uri, budgets[2], rp.estimate_tokens, window.prefix + window.suffix)
        described = dict(window_lines=[window.start_line, window.end_line], extra_chunks=len(extra))
        if info.backend == "llamacpp" and info.fim and options.fim_template == "auto":
            described.update(template="llamacpp-infill", layout="server")
            return InfillPrompt(window.prefix, window.suffix, tuple((c.path, c.text) for c in extra)), described
        family = rp.resolve_family(options.fim_template, info.model)
        layout = rp.text_layout(family, options.fim_layout)
        text = rp.build_text(family, window.prefix, window.suffix, layout, extra, path=uri_to_path(uri))
        described.update(template=family, layout=layout)
        return TextPrompt(text, rp.stop_strings(family)), described

    def lookup_texts(self, uri: str, cur: Cursor, options: CompletionOptions,
                     in_prompt: tuple[int, int] | None = None) -> list[LookupText]:
        """What prompt lookup reads besides the prompt: the document (without `in_prompt`, the
        lines the prompt holds, else split at the cursor) and the other open documents, newest
        first (none when `lookup_documents` is off)."""
        from engine.drafters.documents import LookupText

        if not options.lookup_documents:
            return []
        with self._lock:
            others = self.extra.documents(exclude_uri=uri)
        return [LookupText(cur.lines, (cur.line, cur.character), in_prompt), *(LookupText(lines) for lines in others)]

    def build_prompts(self, uri: str, cur: Cursor, options: CompletionOptions) -> Prompts:
        """The target's prompt, and how to build the draft's own (its template, window and
        context length)."""
        target = self.template("target", options.fim_template)
        draft = self.template("draft", options.draft_fim_template)
        path = uri_to_path(uri)
        t_layout = target.resolve_layout(options.fim_layout)
        target_ids, window, extra = self._prompt(target, self.engine.target, uri, cur, options, t_layout, path)
        d_layout = build_draft = None
        if draft is not None:
            d_layout = draft.resolve_layout(options.fim_layout)
            build_draft = lambda: self._draft_prompt(draft, uri, cur, options, d_layout, path, window, extra)  # noqa: E731
        return Prompts(target, t_layout, target_ids, window.start_line, window.end_line, len(extra),
                       draft, d_layout, build_draft, extra=extra)

    def _run_stats(self, prompt: RequestPrompt, result: GenerationResult, cleaned: Cleaned | None) -> dict:
        """Everything known about one model run, as shown by specfill.stats and the bench: the
        engine's stats and its own figures (a remote server's, prompt lookup's), how the prompt was
        built, and the tokens decoded and shown."""
        stats = result.stats.as_dict()
        # (a remote server's prompt figures when the stream ran to its end: its last event carries them)
        stats.update(prompt.described, stop_reason=result.stop_reason, decoded_tokens=result.stats.new_tokens,
                     shown_tokens=self.engine.tokens_covering(result, cleaned.source_chars if cleaned else 0),
                     prompt_tokens=result.stats.prefill_tokens + result.stats.reused_tokens,
                     draft_prompt_tokens=prompt.draft_prompt_tokens, raw_text=result.text)
        stats.update(result.figures)
        return stats

    def describe(self, uri: str, prompts: Prompts) -> dict:
        """How a local prompt was built (for the stats), and how much of it the document's last
        prompt shared."""
        prev = self._last_prompt.get(uri)
        self._last_prompt[uri] = prompts.target_ids
        return dict(prompt_shared_tokens=common_prefix_len(prev, prompts.target_ids) if prev else 0,
                    template=prompts.target.family, layout=prompts.layout,
                    draft_template=prompts.draft.family if prompts.draft else None, draft_layout=prompts.draft_layout,
                    window_lines=[prompts.window_start, prompts.window_end], extra_chunks=prompts.extra_chunks,
                    extra_context=[{"path": c.path, "source": getattr(c, "source", "open"), "text": c.text}
                                   for c in prompts.extra])

    def _prompt(self, template: FimTemplate, model: LoadedModel, uri: str, cur: Cursor, options: CompletionOptions,
                layout: str, path: str):
        """(prompt ids, window, extra chunks) for one model, within that model's budgets."""
        count = self._counter(template)
        prefix_budget, suffix_budget, extra_budget = self.budgets(options, model)
        window = cut_window(cur, count, prefix_budget, suffix_budget, options.window_step_lines)
        with self._lock:
            extra = self.extra.select(uri, extra_budget, count, window.prefix + window.suffix)
        return template.build(window.prefix, window.suffix, layout, extra, path=path), window, extra

    def _draft_prompt(self, template: FimTemplate, uri: str, cur: Cursor, options: CompletionOptions,
                      layout: str, path: str, target_window, target_extra: tuple) -> list[int]:
        """The draft model's prompt: the text the target sees (its window's lines and its extra
        chunks, newest first), as far as the draft's own budgets allow. The draft is there to
        guess what the target writes from that text; more text than the target has costs the
        draft's prefill and, past what a small draft was trained on, its acceptance (the
        shipped draft, trained on 512-token windows with a 1024-position context, was accepted
        0.28 of the time with the twice-longer window its own budgets gave, 0.45 with the
        target's: `python -m bench.draft_window`)."""
        count = self._counter(template)
        budgets = self.budgets(options, self.engine.draft)
        window, extra_budget = draft_window(cur, count, budgets, self.draft_prompt_tokens(options),
                                            options.window_step_lines,
                                            within=(target_window.start_line, target_window.end_line))
        extra, used = [], 0
        for chunk in reversed(target_extra):      # newest last: keep the newest that fit
            cost = count(chunk.path + "\n") + count(chunk.text)
            if used + cost > extra_budget:
                break
            extra.insert(0, chunk)
            used += cost
        return template.build(window.prefix, window.suffix, layout, tuple(extra), path=path)

    def budgets(self, options: CompletionOptions, model: LoadedModel | None = None) -> tuple[int, int, int]:
        """Token budgets (prefix, suffix, extra) for `model` (default: the target), scaled down
        together to fit its context and the engine's KV cache limit, so large settings (or a
        small model) shrink context instead of failing."""
        model = model if model is not None else self.engine.target
        limits = [x for x in (self.engine.config.max_cache_tokens, model.max_positions) if x and x > 0]
        budgets = (options.prefix_tokens, options.suffix_tokens, options.extra_tokens)
        if not limits:
            return budgets
        room = min(limits) - options.max_new_tokens - PROMPT_OVERHEAD_TOKENS
        return budgets if sum(budgets) <= room else _scaled(budgets, room)

    def draft_prompt_tokens(self, options: CompletionOptions) -> int | None:
        """The draft prompt's length limit (None: the target's whole window)."""
        if options.draft_prompt_tokens != "auto":
            return options.draft_prompt_tokens
        return draft_prompt_cap(self.engine.draft.model) if self.engine.draft else None

    @staticmethod
    def _result(cur: Cursor, text: str, replace: int, from_cache: bool, stats: dict) -> Completion:
        return Completion(text=with_eol(text, cur.eol), replace_end=(cur.line, cur.character + replace),
                          from_cache=from_cache, stats=stats, cursor=(cur.line, cur.character))

    def stats_summary(self) -> dict:
        with self._lock:
            out = self._stats.summary()
        out.update(self.engine.summary())    # the drafting policy's estimates, or the remote's state
        for k in ("template", "layout", "draft_template", "draft_layout"):
            if k in self.last_stats:
                out[k] = self.last_stats[k]
        return out

    def reset_stats(self) -> None:
        with self._lock:
            self._stats = PipelineStats()
