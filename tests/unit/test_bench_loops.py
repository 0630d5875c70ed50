"""The loop detector (bench/loops.py) and the suite's rows for looping answers (bench/suite.py)."""
from __future__ import annotations

import pytest

from bench import suite
from bench.loops import loops
from bench.suite import Request

LINE = [31, 7, 408, 12, 9, 55, 13]      # a 7-token line, as the demo target writes it again and again


def test_a_run_written_three_times_loops():
    assert loops([1, 2] + LINE * 3 + [4])              # a line three times: a loop longer than 6
    assert loops([5, 6, 7, 8, 9, 10] * 3)               # a 6-token run back to back
    assert loops([3] * 18)                               # one token 18 times: 6 of it, 3 times
    assert loops([9, 1] * 9)                             # a 2-token cycle over 18 tokens
    assert loops(LINE + [1, 2, 3] + LINE + [4] + LINE)  # not back to back: still written 3 times


def test_twice_or_overlapping_is_not_a_loop():
    assert not loops(LINE * 2 + [1, 2, 3, 4, 5])
    assert not loops([3] * 17)                 # 6 of it fits only twice without overlapping
    assert not loops(list(range(64)))
    assert not loops([])
    assert not loops(LINE * 3, n=8)            # a 7-token line holds no run of 8 written 3 times
    assert loops(LINE * 2, r=2)


def test_code_that_repeats_a_little_does_not_loop():
    code = ("def area(self):\n    return self.width * self.height\n\n"
            "def perimeter(self):\n    return 2 * (self.width + self.height)\n")
    assert not loops(code, n=suite.LOOP_CHARS)
    assert loops("        self.value = value\n" * 3, n=suite.LOOP_CHARS)


def test_nonsense_sizes_are_refused():
    with pytest.raises(ValueError):
        loops([1, 2, 3], n=0)
    with pytest.raises(ValueError):
        loops([1, 2, 3], r=1)


def generate_requests(answers: dict[str, list[int]], ms: float) -> list[Request]:
    return [Request(key, ms, " ".join(map(str, ids)), {"latency_ms": ms}) for key, ids in answers.items()]


def test_the_suite_shows_looping_answers_apart():
    """A request is looping by its answer without a draft, in every configuration alike."""
    answers = {"0": LINE * 4, "1": list(range(40)), "2": [1, 2] * 12, "3": list(range(100, 130))}
    results = {"generate": {"no-draft": generate_requests(answers, 100.0), "ngram": generate_requests(answers, 40.0)},
               "replay": {"no-draft": [Request("a", 5.0, "        self.value = value\n" * 3, None),
                                       Request("b", 5.0, "x = 1\ny = 2", None),
                                       Request("c", 5.0, "z = 3", None),
                                       # the pipeline cut what the model wrote: its raw text loops
                                       Request("d", 5.0, "w = 4", {"raw_text": "w = 4\n" + "    self.value = v\n" * 6}),
                                       # the pipeline cut the answer at a repeated block
                                       Request("e", 5.0, "v = 5\nu = 6", {"stop_reason": "loop", "raw_text": "v"})],
                          "ngram": [Request(k, 4.0, "", None) for k in "abcde"]}}
    shown = suite.shown_apart(results)
    assert list(shown) == ["generate", suite.LOOPING_OF["generate"], "replay", suite.LOOPING_OF["replay"],
                           suite.MULTILINE_OF["replay"]]
    for config in ("no-draft", "ngram"):
        assert [r.key for r in shown["generate"][config]] == ["1", "3"]
        assert [r.key for r in shown[suite.LOOPING_OF["generate"]][config]] == ["0", "2"]
        assert [r.key for r in shown["replay"][config]] == ["b", "c"]
        assert [r.key for r in shown[suite.LOOPING_OF["replay"]][config]] == ["a", "d", "e"]
        # multi-line answers among those that do not loop
        assert [r.key for r in shown[suite.MULTILINE_OF["replay"]][config]] == ["b"]
    assert results["generate"]["no-draft"][0].key == "0"      # the results themselves are kept whole
    assert "generate, looping answers" not in suite.shown_apart({"generate": {
        "no-draft": generate_requests({"1": list(range(40))}, 1.0)}})
