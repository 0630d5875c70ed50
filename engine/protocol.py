"""The engine as the completion layer sees it. Two engines implement `Engine`: the local one,
with the models in this process (engine/engine.py, `LocalEngine`), and a target served by another
program (engine/remote.py, `RemoteEngine`). A request's prompt (`Prompt`) is built by the
completion layer in the form the engine asks for: token ids for local models, a server's prompt
for a remote target.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .settings import GenerationResult, GenerationSettings, StopCheck

if TYPE_CHECKING:
    from .drafters.documents import LookupText
    from .load.models import LoadedModel
    from .remote import InfillPrompt, ServerInfo, TextPrompt

log = logging.getLogger(__name__)


@dataclass
class TokenPrompt:
    """A request's prompt for local models."""
    target_ids: list[int]
    draft_ids: Callable[[], list[int]] | None = None   # the draft model's own prompt, built when a round first drafts
    stop_ids: Sequence[int] = ()                        # end tokens besides the target's special ones
    lookup_texts: Sequence[LookupText] = ()             # what prompt lookup reads besides the prompt
    copy_source: Sequence[int] = ()                     # the region an edit model rewrites: the copy drafter proposes it


class Prompt(Protocol):
    def tokens(self) -> TokenPrompt:
        """The prompt as token ids (local models)."""

    def server(self, info: ServerInfo) -> InfillPrompt | TextPrompt:
        """The prompt a remote server takes (`info`: what its probe learned)."""


class Engine(Protocol):
    config: Any                    # what the completion layer reads: target, max_cache_tokens
    target: LoadedModel | None     # the local models (None for a remote target)
    draft: LoadedModel | None
    health: Health                 # failures seen and the status the editors show
    exact_samples: bool            # decoding at a temperature draws exactly from the target's law
    warms_up: bool                 # a tiny completion at load saves the first request lazy set-up

    def decode(self, prompt: Prompt, settings: GenerationSettings, cancel: threading.Event | None = None,
               stop_check: StopCheck | None = None) -> GenerationResult:
        """The target's answer to `prompt`, until it ends, `stop_check` decides it, the time budget
        is spent or `cancel` is set. A remote target's failure raises RemoteError."""

    def tokens_covering(self, result: GenerationResult, chars: int) -> int:
        """How many of the answer's tokens write its first `chars` characters."""

    def warm_lookup(self, texts: Iterable[LookupText], stop: Callable[[], bool] = lambda: False) -> int:
        """Prepare documents for prompt lookup before requests read them; the tokens tokenized."""

    def check(self, tell: Callable[[str, bool], None] | None = None) -> None:
        """At load: a remote target is probed (its failure told as a request's would be)."""

    def summary(self) -> dict:
        """The engine's own figures for the stats (the drafting policy's, or the remote's)."""

    def clear_caches(self) -> None: ...

    def close(self) -> None: ...


StatusListener = Callable[[dict], None]


@dataclass
class Health:
    """Failures seen, so the user is told once per kind and once when the engine works again, and
    the status the editors show (`status()`), sent to `listener` whenever it changes. A local
    engine's failures are exceptions of its own: its health stays ok."""
    backend: str = "local"           # local | remote
    url: str = ""
    failing: str | None = None       # kind of the latest failure, None when the last call worked
    told: set = field(default_factory=set)
    last_error: str = ""
    failures: dict = field(default_factory=dict)
    listener: StatusListener | None = field(default=None, repr=False, compare=False)

    def status(self) -> dict:
        """{backend, url, state: ok|error, kind, message}: what a status line shows."""
        return {"backend": self.backend, "url": self.url, "state": "error" if self.failing else "ok",
                "kind": self.failing or "", "message": self.last_error if self.failing else ""}

    def failed(self, err) -> bool:
        """Record a failure (an error with a `kind`); True when the user should hear about it (a
        kind not yet told)."""
        changed = self.failing != err.kind
        self.failing, self.last_error = err.kind, str(err)
        self.failures[err.kind] = self.failures.get(err.kind, 0) + 1
        if changed:
            self._changed()
        if err.kind in self.told:
            return False
        self.told.add(err.kind)
        return True

    def worked(self) -> bool:
        """Record a success; True when it ends a failure the user was told about."""
        was = self.failing
        self.failing = None
        if was is not None:
            self.told.clear()     # a later failure of any kind is news again
            self._changed()
            return True
        return False

    def _changed(self) -> None:
        if self.listener is not None:
            try:
                self.listener(self.status())
            except Exception:    # a status line must never break a completion
                log.warning("status listener failed", exc_info=True)
