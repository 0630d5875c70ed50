"""How many CPU threads torch may use."""
from __future__ import annotations

import os

import torch


def set_threads(threads: int, device: str) -> None:
    """Completion models are small: past a few threads, OpenMP synchronisation costs more than
    it gains, and on a busy machine an oversubscribed pool is far slower. Auto (threads <= 0)
    leaves half the cores, at most 8 used, to everything else."""
    if threads <= 0:
        if os.environ.get("OMP_NUM_THREADS"):
            return  # the user chose; torch read it at start-up
        if device not in ("auto", "cpu") or (device == "auto" and torch.cuda.is_available()):
            return
        threads = min(8, max(1, (os.cpu_count() or 2) // 2))
    torch.set_num_threads(threads)
