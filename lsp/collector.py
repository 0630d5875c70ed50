"""Python's cyclic garbage collector in a long-running server: keep what is loaded out of its
passes, and time the passes that remain.

Once torch, transformers and the default pair are loaded, the collector tracks about 417k
objects (the imported modules' functions, tuples and dicts), and a full pass over them took
205-224 ms on the 2-core VM (`settle_ms` in `specfill.stats` is that pass, paid by the load).
Such a pass starts on its own now and then, inside whatever request is running: timed through
gc.callbacks during an in-process keystroke replay, one pass landed in a request and added 200 ms
to it, where requests take 7-16 ms. Those objects
live as long as the server, so after each load they are moved out of the collector's sight
(`gc.freeze`). Afterwards a full pass walks only what requests made since: it took under 0.1 ms,
and the same replay saw no pass over 5 ms.

`settle` runs after a load, once the old models are dropped, so their cycles are collected first
and never frozen. `PAUSES` counts every pass after the last settle for `specfill.stats`, so that
a latency spike can be told apart from a slow model.
"""
from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass


@dataclass
class CollectorStats:
    frozen_objects: int = 0       # objects left out of the collector's passes (the last settle)
    passes: int = 0               # collections since the server started (any generation)
    full_passes: int = 0          # ... of the oldest generation
    longest_ms: float = 0.0       # the longest pass
    total_ms: float = 0.0
    settle_ms: float = 0.0        # the last settle's own collection (paid by the load)


PAUSES = CollectorStats()
_started: list[float] = []
_settling: list[bool] = []     # settle's own pass is the load's, not a pause of a request


def _time_pass(phase: str, info: dict) -> None:
    if _settling:
        return
    if phase == "start":
        _started[:] = [time.perf_counter()]
        return
    if not _started:
        return
    ms = (time.perf_counter() - _started[0]) * 1000
    PAUSES.passes += 1
    PAUSES.full_passes += info.get("generation") == 2
    PAUSES.total_ms += ms
    PAUSES.longest_ms = max(PAUSES.longest_ms, ms)


def watch() -> None:
    """Time every collection from now on (once per process)."""
    if _time_pass not in gc.callbacks:
        gc.callbacks.append(_time_pass)


def settle() -> None:
    """Collect what is garbage now (an old backend's cycles among it), then freeze the rest:
    the objects alive now are never walked again."""
    t0 = time.perf_counter()
    _settling.append(True)
    try:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
    finally:
        _settling.clear()
    # the passes while loading were the load's: count from here
    PAUSES.passes = PAUSES.full_passes = 0
    PAUSES.longest_ms = PAUSES.total_ms = 0.0
    PAUSES.settle_ms = round((time.perf_counter() - t0) * 1000, 1)
    PAUSES.frozen_objects = gc.get_freeze_count()


def summary() -> dict:
    out = asdict(PAUSES)
    out["longest_ms"], out["total_ms"] = round(out["longest_ms"], 2), round(out["total_ms"], 1)
    return out
