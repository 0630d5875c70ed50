"""Prefetch in a real Neovim on the real server (tiny model pair): while a suggestion is on
screen the server computes the one that follows it, so after Tab the next ghost text comes from
the completion cache with no model run; a word accepted keeps the rest on screen without asking
the server again."""
from __future__ import annotations

import pytest

from tests.e2e.test_nvim import (WAIT_MODEL_S, Nvim, attached_nvim, fresh_buffer, lua_string, server_settings,
                                 server_stats, type_until_ghost)


@pytest.fixture(scope="module")
def nvim():
    with attached_nvim("sfpf", server_settings(), "first.py") as nv:
        yield nv


def model_runs(s: dict) -> int:
    """Model runs: requests the cache did not answer, and prefetches (background runs)."""
    p = s["pipeline"]
    return p["requests"] - p["cache_hits"] + p["background_runs"]


def settled_stats(nv: Nvim, until=lambda s: True) -> dict:
    """specfill.stats once nothing is in flight (prefetches included) and `until` holds."""
    for _ in range(1200):
        s = server_stats(nv)
        if not s["inflight"] and not s["workerBusy"] and until(s):
            return s
        nv.lua("vim.wait(50)")
    pytest.fail(f"the server never settled: {s['prefetch']}, inflight {s['inflight']}")


def test_after_tab_the_next_ghost_text_comes_from_the_prefetch(nvim):
    nv = nvim
    fresh_buffer(nv, "after_tab.py")
    start = server_stats(nv)["prefetch"]
    ghost = type_until_ghost(nv, "for item in items:<CR>")
    # Shown: the server prefetched what follows it.
    s = settled_stats(nv, lambda s: s["prefetch"]["ready"] > start["ready"])
    requests, runs = s["server"]["requests"], model_runs(s)

    # A word of it: the rest stays on screen, the server is not asked.
    nv.send("<C-Right>")
    nv.wait(f"#require('specfill').rendered(0) == 1 and require('specfill').rendered(0)[1].text ~= "
            f"{lua_string(ghost['text'])}", 10, "the rest of the suggestion")
    (rest,) = nv.ghost()
    assert ghost["text"].endswith(rest["text"]) and len(rest["text"]) < len(ghost["text"])
    assert settled_stats(nv)["server"]["requests"] == requests

    # Tab takes the rest; the next suggestion appears, answered from the cache.
    row, col = nv.cursor()
    nv.send("<Tab>")
    lines = rest["text"].split("\n")
    end = (row + len(lines) - 1, (col if len(lines) == 1 else 0) + len(lines[-1]))
    nv.wait(f"#require('specfill').rendered(0) == 1 and require('specfill').rendered(0)[1].row == {end[0]}"
            f" and require('specfill').rendered(0)[1].col == {end[1]}", WAIT_MODEL_S, "the next ghost text")
    (following,) = nv.ghost()
    assert following["text"].strip()
    s = settled_stats(nv, lambda s: s["server"]["requests"] > requests)
    assert s["server"]["requests"] == requests + 1
    assert s["prefetch"]["used"] == start["used"] + 1 and s["server"]["last_job"]["from_cache"] is True
    # No model run for it: every one since was a prefetch (the one for the suggestion now shown).
    assert model_runs(s) - runs == s["prefetch"]["run"] - (start["run"] + 1)

