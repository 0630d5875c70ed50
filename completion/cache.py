"""Completion cache: LRU + TTL results keyed by document, prefix tail, suffix head and settings,
plus typing-through.

Typing-through: when the user types characters that match the start of the ghost text just
shown, the rest of it is answered at once without running a model; backspacing while still
inside that ghost text is answered the same way (it is the same lookup with fewer typed chars).
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import cachetools


@dataclass(frozen=True)
class CacheEntry:
    prefix_len: int      # length of the whole prefix (LF text before the cursor) when computed
    prefix_tail: str     # its last `tail_chars` characters
    suffix_head: str
    settings: tuple
    text: str            # ghost text, LF
    replace_chars: int   # auto-closed characters after the cursor that the text replaces


@dataclass(frozen=True)
class CacheHit:
    text: str
    replace_chars: int
    typed_through: int   # characters of the cached text the user typed since (0: exact hit)


class CompletionCache:
    def __init__(self, maxsize: int = 250, ttl_s: float = 300.0, tail_chars: int = 256,
                 head_chars: int = 128, recent_per_document: int = 8, timer=time.monotonic):
        self.tail_chars = tail_chars
        self.head_chars = head_chars
        self._entries: cachetools.TTLCache = cachetools.TTLCache(maxsize, ttl_s, timer=timer)
        self._recent: dict[str, deque] = {}
        self._recent_per_document = recent_per_document

    def _key(self, uri: str, prefix: str, suffix: str, settings: tuple) -> tuple:
        return (uri, prefix[-self.tail_chars:], suffix[:self.head_chars], settings)

    def put(self, uri: str, prefix: str, suffix: str, settings: tuple, text: str,
            replace_chars: int = 0) -> None:
        key = self._key(uri, prefix, suffix, settings)
        self._entries[key] = CacheEntry(len(prefix), key[1], key[2], settings, text, replace_chars)
        recent = self._recent.setdefault(uri, deque(maxlen=self._recent_per_document))
        if key in recent:
            recent.remove(key)
        recent.append(key)

    def get(self, uri: str, prefix: str, suffix: str, settings: tuple) -> CacheHit | None:
        key = self._key(uri, prefix, suffix, settings)
        e = self._entries.get(key)
        if e is not None and e.prefix_len == len(prefix):
            return CacheHit(e.text, e.replace_chars, 0)
        for k in reversed(self._recent.get(uri, ())):
            e = self._entries.get(k)
            if e is None or e.settings != settings or e.suffix_head != key[2]:
                continue
            typed = len(prefix) - e.prefix_len
            if not 0 < typed < len(e.text):
                continue
            before = prefix[:-typed]
            if before.endswith(e.prefix_tail) and e.text.startswith(prefix[-typed:]):
                rest = e.text[typed:]
                if rest.strip():
                    return CacheHit(rest, e.replace_chars, typed)
        return None

    def forget(self, uri: str) -> None:
        for k in self._recent.pop(uri, ()):
            self._entries.pop(k, None)

    def clear(self) -> None:
        self._entries.clear()
        self._recent.clear()

    def __len__(self) -> int:
        return len(self._entries)
