"""bench.spec_formula prices a round from measured costs: the formula's choice of draft length."""
import pytest

from bench.spec_formula import best_plan, expected_tokens, main


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.5, 0) == 1.0
    assert expected_tokens(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected_tokens(1.0, 4) == 5.0


def test_a_cheap_wide_pass_drafts_long_and_a_dear_one_not_at_all():
    flat = {w: 10.0 for w in range(1, 18)}                  # verifying 16 costs what 1 does
    steep = {w: 10.0 * w for w in range(1, 18)}             # each token costs a step
    k, speedup = best_plan(0.8, flat, 0.0)
    assert k == 16 and speedup == pytest.approx(expected_tokens(0.8, 16))
    assert best_plan(0.8, steep, 0.0) == (0, 1.0)
    # a draft step as dear as a target step never pays; a tenth of one does, when often right
    assert best_plan(0.9, flat, 10.0) == (0, 1.0)
    assert best_plan(0.9, flat, 1.0)[0] >= 1 and best_plan(0.9, flat, 1.0)[1] > 2


@pytest.mark.parametrize("args, message", [(["--target", "gpt-9"], "unknown shape 'gpt-9'"),
                                           (["--set", "threads=3"], "dtype=VALUE or quantize=VALUE"),
                                           (["--acceptance", "0.5,1.5"], "numbers between 0 and 1")])
def test_bad_options_are_one_line(capsys, args, message):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
