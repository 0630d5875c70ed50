"""The suite's per-request comparison (bench/paired.py) on requests written out by hand: which
requests are paired, the median ratio, its bootstrap interval, and the suite's column and goal."""
from __future__ import annotations

from bench import paired, suite
from bench.paired import Paired
from bench.speedup import Speedup
from bench.suite import Request

# One engine run's stats, keyed as GenerationStats.as_dict() keys them (a round without a draft);
# the pairing only asks whether there are any.
RAN = {"rounds": 1, "rounds_by_drafter": {"none": 1}, "drafted": 0, "accepted": 0, "new_tokens": 1,
       "latency_ms": 10.0, "prefill_ms": 2.0, "draft_ms": 0.0, "verify_ms": 8.0, "controller": {}}


def requests(ms_by_key: dict[str, float], engine: dict | None = RAN) -> list[Request]:
    return [Request(key, ms, "answer", engine) for key, ms in ms_by_key.items()]


def test_ratios_one_to_five_have_median_three():
    base = requests({"a": 10, "b": 20, "c": 30, "d": 40, "e": 50})
    config = requests({"a": 10, "b": 10, "c": 10, "d": 10, "e": 10})
    assert paired.paired_ratios(base, config) == [1.0, 2.0, 3.0, 4.0, 5.0]
    result = paired.compare(base, config)
    assert (result.median, result.n) == (3.0, 5)
    assert 1.0 <= result.low <= result.median <= result.high <= 5.0


def test_an_even_number_of_pairs_takes_the_mean_of_the_middle_two():
    base = requests({"a": 10, "b": 20, "c": 30, "d": 40})
    config = requests({"a": 10, "b": 10, "c": 10, "d": 10})
    assert paired.compare(base, config).median == 2.5


def test_only_keys_where_both_ran_the_model_are_paired():
    base = [*requests({"a": 30, "b": 60, "only-base": 99}),
            *requests({"hit-in-config": 40}),
            *requests({"hit-in-base": 5}, engine=None),
            *requests({"zero-ms": 0})]
    config = [*requests({"a": 10, "b": 20, "only-config": 1}),
              *requests({"hit-in-config": 1}, engine=None),
              *requests({"hit-in-base": 50}),
              *requests({"zero-ms": 10})]
    assert paired.paired_ratios(base, config) == [3.0, 3.0]
    assert paired.compare(base, config) == Paired(3.0, 3.0, 3.0, 2)


def test_no_pairs_gives_no_figures():
    base = requests({"a": 10})
    assert paired.compare(base, requests({"b": 10})) == Paired(None, None, None, 0)
    assert paired.compare(base, requests({"a": 10}, engine=None)) == Paired(None, None, None, 0)
    assert paired.describe(Paired(None, None, None, 0)) == "-"


def test_the_interval_is_seeded_and_narrows_with_more_pairs():
    ratios = [0.8, 0.9, 0.95, 1.0, 1.02, 1.05, 1.1, 1.3, 0.97, 1.01, 0.99]
    base = requests({str(i): 100 * r for i, r in enumerate(ratios)})
    config = requests({str(i): 100 for i in range(len(ratios))})
    first, again = paired.compare(base, config), paired.compare(base, config)
    assert first == again
    assert min(ratios) <= first.low <= first.median <= first.high <= max(ratios)
    assert first.median == 1.0

    many = ratios * 10       # the same spread, ten times the requests
    wide = paired.bootstrap_median_ci(ratios)
    narrow = paired.bootstrap_median_ci(many)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_describe_prints_median_and_interval():
    assert paired.describe(Paired(0.98, 0.951, 1.012, 40)) == "0.98x [0.95, 1.01]"


def test_the_suite_row_carries_the_paired_median_and_the_table_shows_it():
    by_config = {"no-draft": requests({"a": 30, "b": 60, "c": 90}),
                 "default": requests({"a": 10, "b": 30, "c": 30})}
    rows, _ = suite.summarize("replay", by_config)
    row = {r.config: r for r in rows}
    assert row["no-draft"].paired == Paired(1.0, 1.0, 1.0, 3)
    # per request 3x, 2x, 3x: the paired median is 3x where p50 against p50 (60 / 30 ms) says 2x
    assert (row["default"].paired.median, row["default"].paired.n) == (3.0, 3)
    assert row["default"].p50_speedup == 2.0
    printed = suite.table(rows)
    header, _, *lines = printed.splitlines()
    assert "| per request vs no draft (median, 95% CI) |" in header
    columns = header.count("|") - 1
    assert all(line.count("|") - 1 == columns for line in lines)
    assert "| 1.00x [1.00, 1.00] |" in lines[0]
    assert f"| {paired.describe(row['default'].paired)} |" in lines[1]


def row(config: str, p50_speedup: float, pairs: Paired) -> suite.Row:
    return suite.Row("replay", config, 10, 10, 25.0, 70.0, p50_speedup, pairs, 1.2, 0.6,
                     Speedup(None, None, None, False), 10)


def test_goal_c_not_slower_is_judged_by_the_paired_median_not_p50():
    slower_per_request = row("default", 1.02, Paired(0.97, 0.94, 0.99, 10))
    goal, measured, met = next(g for g in suite.goals([slower_per_request]) if g[0].startswith("(c) replay:"))
    assert met is False
    assert "0.97x [0.94, 0.99]" in measured and "1.02x" in measured and "10 requests" in measured

    faster_per_request = row("default", 0.98, Paired(1.01, 0.99, 1.04, 10))
    assert next(g for g in suite.goals([faster_per_request]) if g[0].startswith("(c) replay:"))[2] is True

    unpaired = row("default", 1.0, Paired(None, None, None, 0))
    assert next(g for g in suite.goals([unpaired]) if g[0].startswith("(c) replay:"))[2] is None


def test_the_lookup_lines_give_what_reading_the_documents_took():
    """Per end-of-line configuration with lookup: tokens proposed from the documents, written
    too, how many requests read them (any blocks) and the time they took."""
    def run(read_ms: float, blocks: int) -> dict:
        return {**RAN, "lookup": {"proposed": {"document": 1}, "tokens": {"document": 4},
                                  "agreed": {"document": 1}, "blocks": blocks, "read_ms": read_ms}}
    results = {"end-of-line-real": {
        "default": [Request("a", 30, "x", run(3.0, 5)), Request("b", 20, "y", run(1.0, 5)),
                    Request("c", 10, "z", run(0.0, 0)), Request("d", 10, "", None)],
        "no-draft": requests({"a": 40, "b": 30})}}
    assert suite.lookup_lines(results)[2] == (
        "- end-of-line-real, default: 12 tokens proposed from the documents, 3 of them written by the "
        "target too; 2 of 3 requests read them, in 2.0 ms (the most 3.0)")
    assert len(suite.lookup_lines(results)) == 4     # no-draft ran no lookup: no line


def test_goal_b_shows_how_fast_the_default_could_be_with_no_time_to_decode():
    """The bound beside (a) and (b): no draft's p50 over the default's p50 with each model run's
    decode (latency after the prefill) taken out; a request with no model run keeps its time."""
    def ran(latency, prefill):
        return {**RAN, "latency_ms": latency, "prefill_ms": prefill}
    by_config = {"no-draft": [Request("a", 40.0, "x", ran(38.0, 18.0)), Request("b", 60.0, "y", ran(58.0, 20.0)),
                              Request("c", 30.0, "z", ran(28.0, 16.0))],
                 "default": [Request("a", 32.0, "x", ran(30.0, 18.0)), Request("b", 40.0, "y", ran(38.0, 20.0)),
                             Request("c", 5.0, "z", None)]}
    rows, _ = suite.summarize("end-of-line", by_config)
    default = next(r for r in rows if r.config == "default")
    # without their decode: 32 - 12 = 20, 40 - 18 = 22, and 5 (no model run): p50 20 ms against 40
    assert default.p50_bound == 2.0
    assert default.p50_speedup == 40.0 / 32.0
    goal, measured, met = next(g for g in suite.goals(rows) if g[0].startswith("(b) end of line: default >= "))
    assert measured == "1.25x (at most 2.00x with no time to decode)" and met is False
