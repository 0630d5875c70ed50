"""engine/forward/rows16.c, compiled here by engine/forward/rows16.py: a few rows times a 16-bit weight equals
torch's product up to the 16-bit rounding of the sums, a row's result is the same bit for bit
whatever shares its call and however many threads run it, and the lean forward runs on it."""
from __future__ import annotations

import pytest
import torch

from engine.forward import rows16
from engine.forward.lean import LeanForward, make_lean
from engine.forward.matmul import NATIVE, ROWS, Kernels, use_kernels
from tests.tiny_models import tiny_model
from tests.unit.test_engine_precision import assert_every_drafter_gives_the_target_alone, steps_and_verify

pytestmark = pytest.mark.skipif(rows16.load() is None, reason="rows16.c is not built here (see the log)")

CPU = torch.device("cpu")
AVX512 = rows16.isa_for(torch.bfloat16) == rows16.AVX512_BF16


@pytest.fixture(params=["native", "avx2"])
def isa(request, monkeypatch):
    """Each build of the inner loop this CPU runs: AVX-512 BF16 where it has it, and AVX2."""
    if request.param == "native" and not AVX512:
        pytest.skip("no AVX-512 BF16 here: the AVX2 build is the only one")
    if request.param == "avx2":
        monkeypatch.setattr(rows16, "isa_for", lambda dtype: rows16.AVX2 if dtype in rows16.KINDS else None)
    return request.param


@pytest.mark.parametrize("width", [896, 100, 37])
def test_a_product_is_torchs_up_to_16_bit_rounding(isa, width):
    # the AVX-512 build takes bfloat16 weights; the AVX2 one either type
    for dtype in [torch.bfloat16] if isa == "native" else [torch.bfloat16, torch.float16]:
        check_product(dtype, width)


def check_product(dtype, width):
    gen = torch.Generator().manual_seed(width)
    weight = (torch.randn(300, width, generator=gen) * 0.05).to(dtype)
    bias = torch.randn(300, generator=gen).to(dtype)
    for n in (1, 3, 8, 11):     # more than 8 rows: the weight is read once per 8
        h = torch.randn(n, width, generator=gen).to(dtype)
        for b in (bias, None):
            got = rows16.product(h, weight, b)
            want = torch.nn.functional.linear(h.float(), weight.float(), None if b is None else b.float())
            assert got.dtype == dtype and got.shape == (n, 300)
            # the sums differ from torch's in order only: at most a unit or two of the last place
            torch.testing.assert_close(got.float(), want, rtol=2 * torch.finfo(dtype).eps, atol=1e-3)


def test_a_rows_result_does_not_depend_on_its_company_or_the_threads(isa):
    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(515, 200, generator=gen) * 0.05).bfloat16()
    bias = torch.randn(515, generator=gen).bfloat16()
    rows = (torch.randn(12, 200, generator=gen) * torch.logspace(-2, 2, 12)[:, None]).bfloat16()
    together = rows16.product(rows, weight, bias)
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            assert torch.equal(rows16.product(rows, weight, bias), together)
            for i in range(12):
                assert torch.equal(rows16.product(rows[i:i + 1], weight, bias), together[i:i + 1])
                assert torch.equal(rows16.product(rows[i:i + 5], weight, bias)[:1], together[i:i + 1])
    finally:
        torch.set_num_threads(threads)


def test_a_product_of_mismatched_shapes_is_an_error_not_a_read_past_the_weight():
    weight = torch.zeros(4, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"cannot multiply \(2, 32\) by \(4, 64\)"):
        rows16.product(torch.zeros(2, 32, dtype=torch.bfloat16), weight, None)
    with pytest.raises(ValueError, match="cannot multiply"):
        rows16.product(torch.zeros(2, 64, dtype=torch.bfloat16), weight, torch.zeros(5, dtype=torch.bfloat16))
    assert rows16.product(torch.zeros(0, 64, dtype=torch.bfloat16), weight, None).shape == (0, 4)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "bigcode"])
def test_the_lean_forward_on_native_kernels_verifies_what_single_steps_compute(kind):
    """A verify pass of 8 tokens against 8 single steps, both on rows16.c: every product gives
    the same bits; what is left between them is attention's rounding."""
    model = tiny_model(kind, 300).to(torch.bfloat16)
    lean = make_lean(model, pack_max_bytes=0, kernels=Kernels(NATIVE, NATIVE, NATIVE, ROWS))
    reference = make_lean(tiny_model(kind, 300).to(torch.bfloat16), pack_max_bytes=0, kernels=Kernels())
    ids = list(range(3, 60))
    steps, verify = steps_and_verify(lean, torch.bfloat16, ids, 40, 8)
    with torch.no_grad():
        plain = LeanForward(reference, torch.bfloat16, CPU)(ids[:48], 8)
    assert (steps - verify).abs().max() < 0.02 * verify.abs().max()
    assert torch.equal(steps.argmax(-1), verify.argmax(-1))
    # and the same model as torch's kernels compute it, to 16-bit rounding
    assert (verify - plain).abs().max() < 0.05 * plain.abs().max()


def test_native_kernels_where_they_cannot_run_are_a_clear_error(monkeypatch):
    lean = make_lean(tiny_model("llama", 300), pack_max_bytes=0, kernels=Kernels())    # float32 weights
    with pytest.raises(ValueError, match="the native kernel does not run here"):
        use_kernels(lean, Kernels(NATIVE, ROWS, ROWS, ROWS))


def test_greedy_output_on_native_kernels_equals_the_target_alone(monkeypatch):
    """The engine with every model's maps on rows16.c (plain bfloat16 weights, NATIVE for up to
    8 rows): each drafter's output is token for token the target's alone."""
    from engine.forward import lean as lean_module

    made = []
    make_lean_plain = lean_module.make_lean

    def on_native(model, pack_max_bytes=0, kernels=None, quantize="none"):
        lean = make_lean_plain(model, pack_max_bytes=0, kernels=Kernels(NATIVE, NATIVE, NATIVE, ROWS), quantize=quantize)
        made.append(lean)
        return lean

    monkeypatch.setattr(lean_module, "make_lean", on_native)
    assert_every_drafter_gives_the_target_alone(dict(dtype="bfloat16"))
    assert made and all(lean.kernels.one == NATIVE and lean.compute_dtype == torch.bfloat16 for lean in made)


def test_a_compiler_that_fails_leaves_torchs_kernels_and_says_why(monkeypatch, tmp_path, caplog):
    """A $CC that cannot build rows16.c: no native kernel, one line in the log, and a model's
    kernel measurement goes on without it."""
    from engine.forward.matmul import choose_kernels

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path))
    rows16.load.cache_clear()
    try:
        with caplog.at_level("INFO", logger="specfill.engine"):
            assert rows16.load() is None
        said = [r.getMessage() for r in caplog.records if "16-bit rows kernel not used" in r.getMessage()]
        assert len(said) == 1 and "no-such-cc" in said[0], said
        lean = make_lean(tiny_model("llama", 300).to(torch.bfloat16), pack_max_bytes=0, kernels=Kernels())
        kernels = choose_kernels(lean, reps=1)
        assert NATIVE not in (kernels.one, kernels.few, kernels.verify) and "native" not in kernels.note
    finally:
        monkeypatch.undo()
        rows16.load.cache_clear()
