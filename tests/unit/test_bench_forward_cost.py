"""bench/forward_cost.py's baseline: an older commit's lean forward, loaded with the rest of its
engine package (its lean.py imports the matmul kernels from it), runs beside this tree's and
computes the same logits."""
from __future__ import annotations

import pytest
import torch

from bench.forward_cost import lean_module_at
from bench.round_cost import commit_of
from engine.forward.lean import LeanForward, make_lean
from tests.tiny_models import tiny_model


@pytest.mark.skipif(commit_of("HEAD") is None, reason="not a git checkout: no commit to load")
def test_the_baseline_forward_loads_and_agrees_with_this_trees(tmp_path):
    old = lean_module_at("HEAD", tmp_path)
    assert old.__name__.endswith(".lean") and old.make_lean is not make_lean
    model = tiny_model("llama", 300)
    ids = list(range(3, 43))
    with torch.inference_mode():
        mine = LeanForward(make_lean(model), torch.float32, torch.device("cpu"))(ids, n_logits=8)
        lean = old.make_lean(model)
        theirs = old.LeanForward(lean, torch.float32, torch.device("cpu"))(ids, n_logits=8)
    torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)


def test_the_baseline_kernels_are_named():
    from bench.forward_cost import kernels_taken
    from engine.forward.matmul import Kernels
    assert kernels_taken(Kernels("fp16", "fp16", "rows", "rows")) == \
        "one fp16, few fp16, verify rows, many rows"
    assert kernels_taken(None).startswith("fixed")


@pytest.mark.parametrize("arch", ["llama", "bigcode"])
def test_a_prefills_linear_arithmetic_is_what_torchs_flop_counter_counts(arch):
    """The compute floor's linear part: torch's own FLOP counter over a transformers prefill (its
    products only; the attention term is the causal count of the docstring)."""
    from torch.utils.flop_counter import FlopCounterMode

    from bench.forward_cost import prefill_flops
    model = tiny_model(arch, 300)
    n = 40
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        model(torch.arange(3, 3 + n)[None], logits_to_keep=1)
    products = sum(v for k, v in counter.get_flop_counts()["Global"].items() if str(k) in ("aten.mm", "aten.addmm"))
    linear, attention = prefill_flops(model, n)
    cfg = model.config
    assert linear == products
    assert attention == 4 * cfg.hidden_size * sum(range(2, n + 2)) * cfg.num_hidden_layers


def _cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU code needs (inductor builds C++), if there is one."""
    import os
    import shutil
    return next((found for name in (os.environ.get("CXX"), "g++", "c++", "clang++")
                 if name and (found := shutil.which(name))), None)


@pytest.mark.skipif(_cpp_compiler() is None, reason="no C++ compiler: torch.compile cannot build CPU code here")
def test_torch_compile_is_measured_beside_the_engines_own_kernels():
    """`--compile` on a model whose weights are float16 values, where the engine may take
    FBGEMM's float16 kernel: dynamo cannot trace that kernel, so the compiled copy multiplies in
    float32 and the run reports all three steps (it failed outright when it compiled the
    engine's own copy)."""
    from bench.forward_cost import compile_cost
    from engine.forward.matmul import FP16, Kernels, fp16_available
    model = tiny_model("llama", 300).half().float()
    kernels = Kernels(FP16, FP16, FP16, FP16) if fp16_available() else None
    with torch.inference_mode():
        startup, eager, plain, compiled = compile_cost(model, list(range(3, 40)), 3, kernels=kernels)
    assert startup > 0 and min(eager, plain, compiled) > 0
