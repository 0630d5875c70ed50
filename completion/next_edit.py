"""Next-edit suggestions: the user's recent edits and the region around the cursor -> the edit
model's prompt (completion/edit_formats.py) -> its rewrite of the region -> one minimal edit.

The edit model is an engine of its own (a LocalEngine with no draft model, where prompt lookup
and the copy drafter draft; or a RemoteEngine that gets the prompt as text at
`/v1/completions`). A rewrite is mostly the region again, so the prompt hands the engine the
region's ids as `copy_source` (engine/protocol.py): the copy drafter proposes them, and decoding
stays lossless.

Everything here runs on the server's worker thread (`suggest`); nothing waits on the event loop.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from completion.context import Cursor, parse_document, uri_to_path
from completion.edit_formats import EditFormat, Segment, as_text, format_for, render
from completion.edit_history import Edit, EditHistory, common_ends, line_edit
from completion.templates import FimTemplate, load_template
from engine.protocol import TokenPrompt
from engine.remote import ServerInfo, TextPrompt
from engine.settings import GenerationSettings, TextStop

log = logging.getLogger(__name__)

MAX_EDITS = 6          # recent edits shown in a prompt, newest last
ANSWER_SLACK = 64      # tokens an answer may have beyond the region's own
UNFINISHED = ("max_tokens", "context_full", "time_budget", "cancelled")   # stop reasons of a cut-off answer


@dataclass(frozen=True)
class Region:
    """The lines an edit model rewrites: `lines` (LF, no line ends) from line `first` on, the
    cursor at (line, column) in the document, codepoints."""
    first: int
    lines: tuple[str, ...]
    cursor: tuple[int, int]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    @property
    def last(self) -> int:
        return self.first + len(self.lines) - 1

    def with_cursor(self, mark: str) -> str:
        """The region's text with `mark` at the cursor ("" : the text)."""
        if not mark:
            return self.text
        line, col = self.cursor[0] - self.first, self.cursor[1]
        lines = list(self.lines)
        lines[line] = lines[line][:col] + mark + lines[line][col:]
        return "\n".join(lines)


def region_at(cur: Cursor, above: int, below: int) -> Region:
    """The window of lines around the cursor: `above` lines above its line and `below` below,
    clipped to the document."""
    first = max(0, cur.line - above)
    last = min(len(cur.lines) - 1, cur.line + below)
    return Region(first, tuple(cur.lines[first:last + 1]), (cur.line, cur.character))


def original_lines(region: Region, edit: Edit | None) -> tuple[str, ...]:
    """The region's lines as they were before `edit` (the document's latest edit group): the edit
    undone where it lies in the region, the region as it is where it does not."""
    if edit is None:
        return region.lines
    start, end = edit.line, edit.line + len(edit.new)      # the edit's new lines, in the document now
    if end < region.first or start > region.last + 1:
        return region.lines
    lines = list(region.lines)
    lo, hi = max(start, region.first) - region.first, min(end, region.last + 1) - region.first
    old = edit.old[max(0, region.first - start):len(edit.old) - max(0, end - region.last - 1)]
    return tuple(lines[:lo] + list(old) + lines[hi:])


@dataclass(frozen=True)
class Suggestion:
    """Replace the document's (codepoint) range `start`-`end` with `text` (the document's line
    ending)."""
    start: tuple[int, int]
    end: tuple[int, int]
    text: str


def with_final_line_break(region: Region, document_lines: int, rewrite: str) -> str:
    """`rewrite` of a region that ends at the document's end, after its final line break (the
    region's last line is the empty one after it), with that line break kept: a model that stops
    at the last line of code does not mean to delete it."""
    at_end = region.last == document_lines - 1 and region.lines[-1] == ""
    return rewrite + "\n" if at_end and not rewrite.endswith("\n") else rewrite


def minimal_edit(region: Region, rewrite: str, eol: str = "\n") -> Suggestion | None:
    """The edit that turns the region's text into `rewrite` (LF): their common head and tail
    characters trimmed. None when the rewrite is the region."""
    old = region.text
    if rewrite == old:
        return None
    head, tail = common_ends(old, rewrite)
    new = rewrite[head:len(rewrite) - tail]
    return Suggestion(_at(region, old, head), _at(region, old, len(old) - tail), new.replace("\n", eol))


def _at(region: Region, text: str, offset: int) -> tuple[int, int]:
    """(line, column) in the document of `offset` in the region's text."""
    before = text[:offset]
    newline = before.rfind("\n")
    return region.first + before.count("\n"), offset - (newline + 1)


@dataclass
class Parsed:
    """What an answer said: the region rewritten (None: no usable rewrite, `verdict` says why)."""
    rewrite: str | None
    verdict: str          # rewrite | unterminated | malformed


def parse_answer(fmt: EditFormat, text: str, stop_reason: str, region: Region) -> Parsed:
    """The region as the model rewrote it, from its answer `text` (which ended for
    `stop_reason`)."""
    for mark in (fmt.cursor,) if fmt.cursor else ():
        text = text.replace(mark, "")
    if fmt.by_lines:
        lines = text.split("\n")
        n = len(region.lines)
        if len(lines) <= n and stop_reason in UNFINISHED:
            return Parsed(None, "unterminated")
        return Parsed("\n".join(lines[:n]), "rewrite")
    if fmt.end is not None:
        at = text.find(fmt.end)
        if at < 0:
            return Parsed(None, "unterminated" if stop_reason in UNFINISHED else "malformed")
        text = text[:at]
        if fmt.start and fmt.start in text:     # the answer wrote the excerpt's head again
            text = text.split(fmt.start, 1)[1]
        return Parsed(text, "rewrite")
    if stop_reason in UNFINISHED:
        return Parsed(None, "unterminated")
    for stop in fmt.stops:
        text = text.split(stop, 1)[0]
    return Parsed(text.removesuffix("\n"), "rewrite")


@dataclass
class PromptParts:
    """What a prompt is made of, before a format writes it."""
    path: str
    edits: list[Edit]
    region: Region
    original: tuple[str, ...]      # the region's lines before the latest edit
    above: tuple[str, ...]         # context lines above and below the region
    below: tuple[str, ...]
    at_file_start: bool


def prompt_segments(fmt: EditFormat, parts: PromptParts) -> list[Segment]:
    edits: list[Segment] = []
    for i, e in enumerate(parts.edits if fmt.history else ()):
        if i and fmt.edits_joiner:
            edits.append((False, fmt.edits_joiner))
        edits += render(fmt.edit, {"path": e.path, "diff": e.unified_diff(), "old": "\n".join(e.old),
                                   "new": "\n".join(e.new)}, fmt.sentinels)
    fields = {"edits": edits, "path": parts.path, "region": parts.region.with_cursor(fmt.cursor),
              "original": "\n".join(parts.original), "before": "".join(x + "\n" for x in parts.above),
              "after": "".join("\n" + x for x in parts.below),
              "file_start": fmt.file_start if parts.at_file_start else ""}
    return render(fmt.prompt, fields, fmt.sentinels)


def prompt_text(fmt: EditFormat, parts: PromptParts) -> str:
    """The prompt as a remote server gets it: sentinels spelled out."""
    return as_text(prompt_segments(fmt, parts))


class NextEditPrompt:
    """One request's prompt in the form the engine asks for (engine/protocol.py, Prompt). The
    format of a remote model named `auto` is chosen once the server says which model it serves."""

    def __init__(self, fmt_setting: str, model_name: str, parts: PromptParts, templates: dict, model=None):
        self.setting, self.model_name, self.parts, self.model = fmt_setting, model_name, parts, model
        self.fmt = format_for(fmt_setting, model_name)
        self._templates = templates       # FimTemplate per tokenizer, kept by the caller
        self.text = ""                    # the prompt as text (for the stats)
        self.prompt_tokens = 0

    def template(self, model) -> FimTemplate:
        key = id(model.tokenizer)
        if key not in self._templates:
            self._templates[key] = load_template(model.tokenizer, "auto", plain=model.vocab.plain)
        return self._templates[key]

    def tokens(self) -> TokenPrompt:
        model = self.model
        t = self.template(model)
        vocab = model.tokenizer.get_vocab()
        ids = [t.bos_id] if t.bos_id is not None else []
        segments = prompt_segments(self.fmt, self.parts)
        self.text = as_text(segments)
        for special, text in segments:
            if special and text in vocab:
                ids.append(vocab[text])
            else:
                ids += t.encode(text) if not ids else t.encode_infill(text)
        stops = [vocab[s] for s in self.fmt.stops if s in vocab]
        if model.tokenizer.eos_token_id is not None:
            stops.append(model.tokenizer.eos_token_id)
        self.prompt_tokens = len(ids)
        # the region as an answer that keeps it writes it: its lines and the line break after them
        source = t.encode_infill(self.parts.region.text + "\n")
        return TokenPrompt(ids, None, tuple(dict.fromkeys(stops)), copy_source=source)

    def server(self, info: ServerInfo) -> TextPrompt:
        if self.setting == "auto" and info.model:
            self.fmt = format_for("auto", info.model)
        self.text = prompt_text(self.fmt, self.parts)
        return TextPrompt(self.text, tuple(s for s in self.fmt.stops if s.startswith("<"))[:4])

    def stop_check(self):
        """Decoding stops once the answer holds the format's end (or, by lines, the region's
        line count)."""
        fmt, n = self.fmt, len(self.parts.region.lines)

        def check(text: str) -> TextStop | None:
            if fmt.by_lines:
                at = -1
                for _ in range(n):
                    at = text.find("\n", at + 1)
                    if at < 0:
                        return None
                return TextStop("region_end", at + 1)
            if fmt.end is not None:
                at = text.find(fmt.end)
                return TextStop("region_end", at + len(fmt.end)) if at >= 0 else None
            return None
        return check if (fmt.by_lines or fmt.end is not None) else None


@dataclass
class Outcome:
    """One request's answer and how it came about (the `nextEdit` part of specfill.stats)."""
    suggestion: Suggestion | None
    figures: dict = field(default_factory=dict)


def prompt_parts(uri: str, cur: Cursor, fmt: EditFormat, history: EditHistory, key: str) -> PromptParts:
    region = region_at(cur, fmt.above, fmt.below)
    latest = history.latest(key)
    last_edit = line_edit(latest.path, latest.before, latest.after) if latest is not None else None
    above = tuple(cur.lines[max(0, region.first - fmt.context):region.first])
    below = tuple(cur.lines[region.last + 1:region.last + 1 + fmt.context])
    return PromptParts(uri_to_path(uri), history.edits(MAX_EDITS), region, original_lines(region, last_edit),
                       above, below, at_file_start=region.first - len(above) == 0)


def suggest(engine, uri: str, key: str, text: str, line: int, character: int, history: EditHistory,
            fmt_setting: str, model_name: str, templates: dict,
            cancel: threading.Event | None = None) -> Outcome:
    """The edit model's suggestion at (line, character) of `text` (the document `uri`, kept as
    `key` in `history`). ValueError for a text or position the pipeline would refuse; RemoteError
    from a remote edit model."""
    t0 = time.perf_counter()
    cur = parse_document(text, line, character)
    eol = cur.eol
    fmt = format_for(fmt_setting, model_name)
    parts = prompt_parts(uri, cur, fmt, history, key)
    model = getattr(engine, "target", None)
    prompt = NextEditPrompt(fmt_setting, model_name, parts, templates, model)
    region_tokens = len(prompt.template(model).encode_infill(parts.region.text)) if model is not None \
        else len(parts.region.text) // 3 + 1
    gen = GenerationSettings(max_new_tokens=region_tokens + max(ANSWER_SLACK, region_tokens // 2), temperature=0.0)
    result = engine.decode(prompt, gen, cancel=cancel, stop_check=prompt.stop_check())
    parsed = parse_answer(prompt.fmt, result.text, result.stop_reason, parts.region)
    rewrite = None if parsed.rewrite is None else with_final_line_break(parts.region, len(cur.lines), parsed.rewrite)
    suggestion = minimal_edit(parts.region, rewrite, eol) if rewrite is not None else None
    stats = result.stats
    figures = {"format": prompt.fmt.name, "verdict": parsed.verdict if suggestion or parsed.rewrite is None else "same",
               "stop_reason": result.stop_reason, "region_lines": [parts.region.first, parts.region.last],
               "edits": len(parts.edits), "prompt": prompt.text, "answer": result.text, "rewrite": parsed.rewrite,
               "prompt_tokens": stats.prefill_tokens + stats.reused_tokens, "new_tokens": stats.new_tokens,
               "tokens_per_target_call": round(stats.tokens_per_target_call, 3),
               "ms": round((time.perf_counter() - t0) * 1000, 2)}
    figures.update(result.figures)
    return Outcome(suggestion, figures)

