"""How many CPU threads torch may use."""
from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("specfill.engine")

# torch's own count when this module is imported: the machine's physical cores
STARTUP_THREADS = torch.get_num_threads()
MAX_THREADS = 8
_auto_threads = 0    # the most threads auto has chosen in this process


def usable_cores() -> int:
    """The logical cores this process may run on (its CPU affinity, where the system has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 2


def set_threads(threads: int, device: str, real_sized: bool = False) -> None:
    """`threads` > 0 is used as it is. Auto (threads <= 0) depends on the model: a real-sized
    one (engine/forward/precision.py) reads every weight once a decode step, and more threads read them
    faster, so it gets the physical cores it may run on (at most MAX_THREADS). A small model's
    products are too small to share: past a few threads synchronisation costs more than it
    gains, and on a busy machine an oversubscribed pool is far slower, so it gets half of them.
    One process may hold several engines (completions, next edits): auto never lowers what an
    earlier one chose. OMP_NUM_THREADS, where set, is the user's choice and stays."""
    global _auto_threads
    if threads <= 0:
        if os.environ.get("OMP_NUM_THREADS"):
            return  # the user chose; torch read it at start-up
        if device not in ("auto", "cpu") or (device == "auto" and torch.cuda.is_available()):
            return
        cores = usable_cores()
        wanted = min(STARTUP_THREADS, cores) if real_sized else max(1, cores // 2)
        threads = max(_auto_threads, min(MAX_THREADS, wanted))
        if threads != _auto_threads:
            why = "a real-sized model: the physical cores, at most 8" if real_sized else "small models: half the cores"
            log.info("CPU threads: %d (%s)", threads, why)
        _auto_threads = threads
    torch.set_num_threads(threads)
