"""bench/gpu_shapes: the model shapes are the real models' sizes, the formula is the standard one,
and the whole benchmark runs on a CPU with tiny shapes (a GPU session runs it on the big ones)."""
import re

import pytest
import torch

from bench import gpu_shapes


@pytest.mark.parametrize("shape, millions", [("13b", 13016.0), ("7b", 6738.5), ("starcoder-164m", 164.1)])
def test_shapes_have_the_real_models_parameter_counts(shape, millions):
    model = gpu_shapes.build(shape, torch.device("meta"), torch.bfloat16)   # no memory, no time
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=0.1)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_formula():
    assert gpu_shapes.expected_tokens(0.5, 2) == pytest.approx(1.75)
    assert gpu_shapes.expected_tokens(1.0, 4) == 5.0
    # free draft, verify as cheap as a step: the best k is the widest measured, E = 1 + ... + a^15
    gain, k = gpu_shapes.best_speedup(0.9, {1: 1.0, 4: 1.0, 16: 1.0}, 0.0)
    assert k == 15 and gain == pytest.approx(gpu_shapes.expected_tokens(0.9, 15))
    # a draft step as dear as the target's: never pays
    assert gpu_shapes.best_speedup(0.5, {1: 1.0, 2: 1.0, 4: 1.0}, 1.0) == (1.0, 0)


def test_runs_on_cpu_with_tiny_shapes(capsys):
    assert gpu_shapes.main(["--target", "tiny", "--draft", "tiny", "--device", "cpu", "--dtype", "float32",
                            "--context", "32", "--reps", "1", "--calls", "1"]) == 0
    out = capsys.readouterr().out
    errors = [float(x) for x in re.findall(r"max \|logit lean - transformers\| ([0-9.e+-]+)", out)]
    assert len(errors) == 2 and max(errors) < 1e-4     # the lean forwards (dynamic, static) ran and agree
    # columns: the dynamic and static lean forwards and transformers; CUDA graphs only on CUDA
    headers = [line.split() for line in out.splitlines() if line.strip().startswith("width")]
    assert headers == [["width", "transformers", "lean", "static", "(ms", "per", "call)"]] * 2
    assert out.count("| 0.") == len(gpu_shapes.ACCEPTANCE)     # one formula row per acceptance rate
