"""What the server keeps between messages: settings, loaded models, requests in flight, figures."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from completion.stats import UserAcceptance
from lsp.backend import Backend
from lsp.next_edit import NextEditState
from lsp.prefetch import Prefetcher
from lsp.settings import Settings

MAX_INFLIGHT = 4   # requests waiting or decoding at once (over all documents); older ones drop


@dataclass
class ServerStats:
    """Server-side figures for `specfill.stats` (the pipeline reports its own)."""

    requests: int = 0
    completions: int = 0          # non-empty results sent
    empty: int = 0                # empty results sent (nothing worth showing)
    superseded: int = 0           # dropped because a newer request came
    cancelled: int = 0            # $/cancelRequest from the client
    while_loading: int = 0        # answered empty because models were loading
    disabled: int = 0             # answered empty because enable = false
    unknown_document: int = 0
    out_of_range: int = 0         # position on a line that does not exist
    oversized_document: int = 0
    rejected: int = 0             # pipeline refused the input (binary text...); answered empty
    errors: int = 0               # pipeline failed unexpectedly; logged, answered empty
    decode_jobs: int = 0          # pipeline calls that ran on the worker
    skipped_jobs: int = 0         # queued jobs dropped before starting (already cancelled)
    stopped_jobs: int = 0         # jobs that were running when their request was cancelled
    # opened documents' tokens tokenized for prompt lookup ahead of requests (documents.warm_lookup)
    lookup_warmed_tokens: int = 0
    loads: int = 0
    load_failures: int = 0
    last_load_ms: float = 0.0
    last_job: dict = field(default_factory=dict)


@dataclass
class ServerState:
    settings: Settings = field(default_factory=Settings)
    settings_version: int = 0            # bumped on every applied change (init, pull, push)
    settings_problems: set = field(default_factory=set)   # told about the latest section (config.py)
    backend: Optional[Backend] = None
    wanted_key: Optional[tuple] = None   # model key being loaded or loaded
    load_generation: int = 0             # a load whose generation is not the newest is dropped
    loading: bool = False
    initialized: bool = False
    inflight: dict = field(default_factory=dict)      # uri -> threading.Event, oldest first
    oversized: dict = field(default_factory=dict)     # uri -> why it is too large to keep
    stats: ServerStats = field(default_factory=ServerStats)
    # the latest completion request: {uri, answered, pending: still running, reason: why nothing
    # is shown ("" if answered or pending)}
    last_request: dict = field(default_factory=dict)
    user: UserAcceptance = field(default_factory=UserAcceptance)   # what users did with them
    # The engine is not thread-safe and keeps KV caches between requests: all torch work
    # (loading, completing, warm-up) runs on this one thread.
    worker: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="specfill-torch"))
    worker_busy: bool = False            # a completion is running on the worker
    prefetch: Prefetcher = field(default_factory=Prefetcher)   # the next suggestion, ahead
    next_edit: NextEditState = field(default_factory=NextEditState)   # specfill/nextEdit: edits, the edit model
