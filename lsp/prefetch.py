"""Prefetch: when the editor reports a suggestion shown, compute the next one as if it had been
accepted, so accepting finds the following suggestion in the completion cache.

The document after the accept is the request's text with the suggestion inserted at its
cursor; the prefetch runs the pipeline there in the background and the pipeline caches the
answer under that prefix and suffix, where the editor's next request (at the end of the
inserted text) looks first. With an SPM prompt the accepted text only appends to the prompt
the KV cache already holds.

A prefetch never delays a real request: it starts only when no request waits or decodes, and
any request elsewhere stops it (queued, or mid-decode within one step). A request exactly where
the prefetch points is the one it was made for: that request waits for it on the one worker
instead, and is answered from the cache.

Threads: `answered`, `offered`, `on_shown` and `before_request` run on the asyncio loop; the
job itself on the torch worker (state.worker)."""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from completion.context import to_lf
from lsp import backend, telemetry
from lsp.documents import document_key

if TYPE_CHECKING:
    from completion.pipeline import Completion
    from lsp.server import SpecfillServer
    from lsp.state import ServerState

log = logging.getLogger("specfill.prefetch")

KEPT_OFFERS = 64   # suggestion ids remembered until the editor reports them shown


@dataclass
class PrefetchStats:
    """`specfill.stats` server.prefetch: what prefetching did (the pipeline's figures count its
    model runs as background_runs, apart from the requests)."""

    run: int = 0         # prefetches started on the worker
    ready: int = 0       # finished: their answer is in the completion cache
    used: int = 0        # requests at a prefetched position after it was ready (cache answers)
    joined: int = 0      # requests at a prefetched position while it still ran (they wait for it)
    cancelled: int = 0   # stopped (queued or mid-decode) by a request elsewhere
    skipped_busy: int = 0   # shown while a request waited or decoded: no prefetch
    skipped_moved: int = 0  # shown after the document had moved away from the suggestion
    last_ms: float = 0.0    # how long the latest finished prefetch ran


@dataclass(frozen=True)
class Answer:
    """A suggestion the server sent, with the request it answered."""

    uri: str                        # as the pipeline knows the document
    text: str                       # the document when it was asked
    cursor: tuple[int, int]         # codepoints, clamped as the pipeline clamps
    replace_end: tuple[int, int]    # end of what accepting replaces (auto-closed brackets)
    insert: str                     # the suggestion


@dataclass(frozen=True)
class Target:
    """A document and cursor, compared with line breaks normalised as the pipeline sees them."""

    key: str
    text: str        # LF
    line: int
    character: int


@dataclass
class Job:
    target: Target
    cancel: threading.Event = field(default_factory=threading.Event)
    done: bool = False        # the worker is finished with it (ran, failed or was dropped)
    used: bool = False


def accepted_document(answer: Answer) -> tuple[str, int, int]:
    """(document text, line, character) once `answer` is accepted whole: its text inserted at
    the cursor over what it replaces, the cursor at the end of it (codepoints). The text keeps
    the document's line ending (the first CRLF decides, as in the pipeline)."""
    lines = to_lf(answer.text).split("\n")
    line, character = answer.cursor
    end = answer.replace_end[1] if answer.replace_end[0] == line else character
    inserted = to_lf(answer.insert).split("\n")
    head, tail = lines[line][:character], lines[line][end:]
    joined = (head + "\n".join(inserted) + tail).split("\n")
    eol = "\r\n" if "\r\n" in answer.text else "\n"
    new_line = line + len(inserted) - 1
    new_character = (len(head) if len(inserted) == 1 else 0) + len(inserted[-1])
    return eol.join(lines[:line] + joined + lines[line + 1:]), new_line, new_character


def _offset(text: str, line: int, character: int) -> int:
    """Offset of (line, character) in LF text."""
    start = 0
    for _ in range(line):
        start = text.index("\n", start) + 1
    return start + character


def on_the_way(answer: Answer, now: str) -> bool:
    """Whether document text `now` is where the answer was asked, or has some of the suggestion
    typed (or accepted in part) at the cursor since: accepting the rest gets to the target."""
    before, now, insert = to_lf(answer.text), to_lf(now), to_lf(answer.insert)
    typed = len(now) - len(before)
    if not 0 <= typed <= len(insert):
        return False
    at = _offset(before, *answer.cursor)
    return (now[:at] == before[:at] and now[at:at + typed] == insert[:typed]
            and now[at + typed:] == before[at:])


class Prefetcher:
    """The latest answers and offers, and at most one prefetch at a time."""

    def __init__(self) -> None:
        self.stats = PrefetchStats()
        self._latest: list[Answer] = []    # the answers of the latest request
        self._offers: OrderedDict[int, Answer] = OrderedDict()
        self.job: Optional[Job] = None

    # -- what the server sent ------------------------------------------------------------------
    def answered(self, uri: str, text: str, found: list["Completion"]) -> None:
        """A request for `uri` (document `text`) answered with `found`; the items made from them
        next are `offered`."""
        self._latest = [Answer(uri, text, c.cursor, c.replace_end, c.text) for c in found if c.text]

    def offered(self, sid: int, insert: str) -> None:
        """Suggestion id `sid` was sent for `insert`, one of the latest answers (items are made
        right after the request is answered, with no other message in between)."""
        answer = next((a for a in self._latest if a.insert == insert), None)
        if answer is None:
            return
        self._offers[sid] = answer
        while len(self._offers) > KEPT_OFFERS:
            self._offers.popitem(last=False)

    def in_flight(self) -> bool:
        return self.job is not None and not self.job.done

    # -- requests --------------------------------------------------------------------------------
    def before_request(self, key: str, text: str, cursor: tuple[int, int]) -> None:
        """A completion request arrived: count it as used if the prefetch was made for exactly
        this place, else stop the prefetch at once."""
        job = self.job
        if job is None:
            return
        t = job.target
        if (key, cursor) == (t.key, (t.line, t.character)) and to_lf(text) == t.text:
            if not job.used and not job.cancel.is_set():
                job.used = True
                if job.done:
                    self.stats.used += 1
                else:
                    self.stats.joined += 1
                log.debug("prefetched answer %s at %s %d:%d", "used" if job.done else "joined", key, *cursor)
            return
        self.cancel()

    def cancel(self) -> None:
        """Stop the prefetch if it is queued or running (the worker drops it within a step)."""
        job, self.job = self.job, None
        if job is not None and not job.done and not job.cancel.is_set():
            job.cancel.set()
            self.stats.cancelled += 1

    # -- the editor showed a suggestion -----------------------------------------------------------
    def on_shown(self, ls: "SpecfillServer", params: Any) -> None:
        """specfill/shown: prefetch at the place accepting it leads to, if the setting allows
        and nothing else needs the engine."""
        state = ls.state
        if not state.settings.prefetch or not state.settings.enable:
            return
        p = telemetry.plain(params)
        sid = p.get("id") if isinstance(p, dict) else None
        answer = self._offers.get(sid) if isinstance(sid, int) else None
        if answer is None or state.loading or state.backend is None:
            return
        key = document_key(answer.uri)
        doc = ls.workspace.text_documents.get(key)
        if doc is None:
            return
        text, line, character = accepted_document(answer)
        target = Target(key, to_lf(text), line, character)
        if self.job is not None and self.job.target == target and not self.job.cancel.is_set():
            return   # already prefetched (the same suggestion reported again, typed through)
        if state.inflight or state.worker_busy:
            self.stats.skipped_busy += 1
            return
        if not on_the_way(answer, doc.source):
            self.stats.skipped_moved += 1
            return
        self.cancel()
        job = self.job = Job(target)
        request = backend.completion_request(answer.uri, text, line, character)
        options = backend.completion_options(state.settings)
        try:
            state.worker.submit(_run, state, request, options, job)
        except RuntimeError:   # the worker is shut down
            self.job = None


def _run(state: "ServerState", request, options, job: Job) -> None:
    """Worker thread: the pipeline at the prefetch target; its answer lands in the cache."""
    stats = state.prefetch.stats
    loaded = state.backend
    try:
        if job.cancel.is_set() or loaded is None:
            return
        stats.run += 1
        state.worker_busy = True
        t0 = time.perf_counter()
        # A background run: the requests' figures leave it out, and specfill.lastCompletion stays
        # the latest request's run (a remote's failure would otherwise land there).
        last_request = loaded.pipeline.last_stats
        try:
            loaded.pipeline.complete(request, options, cancel=job.cancel, background=True)
        except Exception:   # bad input is the request's to report, not the prefetch's
            log.debug("prefetch failed for %s", request.uri, exc_info=True)
            return
        finally:
            loaded.pipeline.last_stats = last_request
            state.worker_busy = False
        if not job.cancel.is_set():
            stats.ready += 1
            stats.last_ms = round((time.perf_counter() - t0) * 1000, 2)
            log.debug("prefetched %s %d:%d in %.0f ms", request.uri, request.line, request.character,
                      stats.last_ms)
    finally:
        job.done = True
