"""Per-request comparison of one configuration with the baseline: the same requests paired by key.

p50 against p50 compares two distributions that shift with the machine's load from run to run
(0.94-1.04x with 12-115 requests); the ratio of each request to itself under the baseline cancels
what the request costs and most of the load, so its median says "faster or slower" with fewer
requests. The 95% interval is a percentile bootstrap of that median, seeded so a report can be
reproduced from its requests.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from completion.stats import percentile

if TYPE_CHECKING:
    from bench.suite import Request

RESAMPLES = 2000
SEED = 0


@dataclass
class Paired:
    median: float | None    # median of baseline_ms / config_ms over the pairs (> 1: the configuration is faster)
    low: float | None       # 95% bootstrap confidence interval of that median
    high: float | None
    n: int                  # requests paired: both ran the model, both with a latency


def model_runs(requests: Iterable[Request]) -> dict[str, float]:
    """key -> ms of the requests that ran the model (a cache hit's latency says nothing of the draft)."""
    return {r.key: r.ms for r in requests if r.engine is not None and r.ms > 0}


def paired_ratios(baseline: Iterable[Request], config: Iterable[Request]) -> list[float]:
    """baseline_ms / config_ms for every key both ran the model for, in the baseline's key order."""
    base, other = model_runs(baseline), model_runs(config)
    return [ms / other[key] for key, ms in base.items() if key in other]


def bootstrap_median_ci(ratios: list[float], resamples: int = RESAMPLES, seed: int = SEED,
                        level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the median: resample with replacement, take the median of
    each resample, and the (1 - level) / 2 tails of those medians."""
    rng = random.Random(seed)
    medians = [percentile(rng.choices(ratios, k=len(ratios)), 50) for _ in range(resamples)]
    tail = 100 * (1 - level) / 2
    return percentile(medians, tail), percentile(medians, 100 - tail)


def compare(baseline: Iterable[Request], config: Iterable[Request], resamples: int = RESAMPLES,
            seed: int = SEED) -> Paired:
    ratios = paired_ratios(baseline, config)
    if not ratios:
        return Paired(None, None, None, 0)
    low, high = bootstrap_median_ci(ratios, resamples, seed)
    return Paired(percentile(ratios, 50), low, high, len(ratios))


def describe(p: Paired) -> str:
    """`0.98x [0.95, 1.01]`, or `-` without pairs."""
    if p.median is None:
        return "-"
    return f"{p.median:.2f}x [{p.low:.2f}, {p.high:.2f}]"
