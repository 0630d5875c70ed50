"""The machine line a replay's results carry: this process's threads for a local target, none for
a remote one (the server computes with its own)."""
from __future__ import annotations

import torch

from bench.replay import machine_description


def test_a_local_target_names_the_threads_this_process_computes_with():
    line = machine_description("quiet")
    assert line.startswith("quiet; ") and line.endswith(f"{torch.get_num_threads()} threads")


def test_a_remote_target_names_no_thread_count_of_this_process():
    line = machine_description(remote=True)
    assert "threads" in line and f"{torch.get_num_threads()} threads" not in line
    assert "remote target" in line
