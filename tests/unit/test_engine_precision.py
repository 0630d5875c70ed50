"""Precision: what `dtype: auto` picks and why; real-sized models' plain weights (fused in
place, GEMV for one row) equal the transformers forward; int8 weights give the same logits for a
row whatever else is in the call, so speculative decoding stays exactly the quantized target's;
the kernel choice is kept on disk and reused."""
import copy
import json
import logging

import pytest
import torch
from safetensors.torch import save_file
from transformers import GPT2LMHeadModel, GPT2Config

from engine import LocalEngine, EngineConfig, GenerationSettings, ModelLoadError
from engine.forward import kernel_cache, lean as lean_module, precision
from engine.forward.lean import LeanForward, lean_for, make_lean
from engine.forward import rows16
from engine.forward.matmul import GEMV, NATIVE, ROWS, Kernels, gemv
from engine.load.models import load_model
from engine.policy import Mean, Policy
from engine.forward.precision import checkpoint_dtype, choose_dtype
from engine.forward.quantize import QUANTIZE_ROWS, Int8Linear, QuantizeError, int8_engine
from tests.tiny_models import tiny_model, tiny_pair_dirs, tiny_same_tokenizer_draft_dir
from tests.unit.test_engine_lossless import _ids

CPU = torch.device("cpu")
BIG = 10 * precision.SMALL_MODEL_BYTES
HAS_INT8 = int8_engine() is not None


def native_all(dtype):
    return True


def native_none(dtype):
    return dtype == torch.float32


@pytest.mark.parametrize("stored, size, native, want, why", [
    (torch.bfloat16, BIG, native_all, torch.bfloat16, "own precision"),
    (torch.float16, BIG, native_all, torch.float16, "own precision"),
    (torch.bfloat16, BIG, native_none, torch.float32, "no bfloat16 instructions"),
    (torch.bfloat16, 16 * 2**20, native_all, torch.float32, "small model"),
    (torch.float32, BIG, native_all, torch.float32, "stored in float32"),
    (None, BIG, native_all, torch.float32, "unknown dtype"),
])
def test_auto_keeps_a_real_sized_16_bit_checkpoint_in_16_bits_where_the_cpu_computes_it(stored, size, native, want, why):
    chosen = choose_dtype("auto", CPU, stored, size, native)
    assert chosen.dtype == want and why in chosen.reason


def test_an_explicit_dtype_is_kept_and_a_slow_one_says_so():
    assert choose_dtype("float16", CPU, torch.bfloat16, BIG, native_all).reason == "float16, as set"
    slow = choose_dtype("bfloat16", CPU, torch.float32, BIG, native_none)
    assert slow.dtype == torch.bfloat16 and "no bfloat16 instructions" in slow.reason


def test_the_stored_dtype_is_read_from_the_config_or_else_the_weights(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "bfloat16"}))
    assert checkpoint_dtype(tmp_path) == torch.bfloat16
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    assert checkpoint_dtype(tmp_path) == torch.float16
    (tmp_path / "config.json").write_text("{}")
    save_file({"w": torch.zeros(2, dtype=torch.bfloat16)}, str(tmp_path / "model.safetensors"))
    assert checkpoint_dtype(tmp_path) == torch.bfloat16


@pytest.fixture(scope="module")
def bf16_target(tmp_path_factory):
    """The tiny test target stored in bfloat16, as real checkpoints are."""
    target_dir, _ = tiny_pair_dirs()
    loaded = load_model(target_dir, dtype="bfloat16")
    out = tmp_path_factory.mktemp("bf16-target")
    loaded.model.save_pretrained(out)
    loaded.tokenizer.save_pretrained(out)
    return str(out)


def test_auto_runs_a_small_bf16_model_in_float32_and_a_real_sized_one_in_its_own_precision(bf16_target, monkeypatch, caplog):
    small = load_model(bf16_target)
    assert next(small.model.parameters()).dtype == torch.float32 and "small model" in small.precision
    monkeypatch.setattr(precision, "SMALL_MODEL_BYTES", 0)
    with caplog.at_level(logging.INFO, logger="specfill.engine"):
        big = load_model(bf16_target)
    want = torch.bfloat16 if precision.cpu_runs_natively(torch.bfloat16) else torch.float32
    assert next(big.model.parameters()).dtype == want
    assert big.precision in caplog.text    # the log says what was chosen and why


def _reference(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


@pytest.mark.parametrize("kernels", [Kernels(ROWS, ROWS, ROWS, ROWS), Kernels(GEMV, GEMV, ROWS, ROWS),
                                     pytest.param(Kernels(NATIVE, NATIVE, NATIVE, ROWS), marks=pytest.mark.skipif(
                                         rows16.load() is None, reason="rows16.c is not built here"))])
@pytest.mark.parametrize("kind", ["llama", "qwen2", "bigcode"])
def test_plain_16_bit_weights_fused_in_place_equal_the_transformers_forward(kind, kernels):
    model = tiny_model(kind, 300)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    inv_freq = rotary.inv_freq.clone() if rotary is not None else None
    model = model.to(torch.bfloat16)
    if rotary is not None:   # float32 frequencies, as the lean forward computes them from the config
        model.model.rotary_emb.inv_freq = inv_freq
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lean = make_lean(model, pack_max_bytes=0, kernels=kernels)
    assert not lean.packed and lean.compute_dtype == torch.bfloat16
    # the modules now read slices of the fused maps: the same values, and the same forward
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    if kind != "bigcode":
        attn = model.model.layers[0].self_attn
        assert attn.k_proj.weight.untyped_storage().data_ptr() == attn.q_proj.weight.untyped_storage().data_ptr()
    ids = list(range(3, 90))
    ref = _reference(model, ids)
    fwd = LeanForward(lean, torch.bfloat16, CPU)
    with torch.no_grad():
        got = torch.cat([fwd(ids[:70], 70)] + [fwd([t], 1) for t in ids[70:74]] + [fwd(ids[74:], 13)])
    # bf16 keeps 8 bits of mantissa: the two forwards round differently, not differently often
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.95
    # and a second lean forward of the same model reads the maps where the first fused them
    again = make_lean(model, pack_max_bytes=0, kernels=kernels)
    assert again.layers[0].qkv.weight.data_ptr() == lean.layers[0].qkv.weight.data_ptr() if kind != "bigcode" else True


def test_gemv_is_f_linear():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 48, generator=gen).bfloat16()
    h = torch.randn(1, 48, generator=gen).bfloat16()
    torch.testing.assert_close(gemv(h, w, None).float(), torch.nn.functional.linear(h, w).float(), atol=0.02, rtol=0.02)
    assert torch._C._get_mkldnn_enabled()    # switched back on after the call


@pytest.mark.skipif(not HAS_INT8, reason="no int8 kernel in this torch build or on this CPU")
def test_an_int8_map_gives_a_row_the_same_bits_whatever_else_is_in_the_call():
    """Each row is quantized alone: a verify pass's products are bit for bit those of single
    steps (what is left between the two is the float rounding of attention, as in float32)."""
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(96, 64, generator=gen) * 0.1, torch.randn(96, generator=gen)
    linear = Int8Linear.from_weight(weight, bias)
    rows = torch.randn(16, 64, generator=gen) * torch.logspace(-3, 3, 16)[:, None]
    together = linear(rows)
    assert all(torch.equal(together[i:i + 1], linear(rows[i:i + 1])) for i in range(16))
    want = torch.nn.functional.linear(rows, weight, bias)
    assert ((together - want).norm(dim=1) / want.norm(dim=1)).max() < 0.02


@pytest.mark.skipif(not HAS_INT8, reason="no int8 kernel in this torch build or on this CPU")
def test_an_int8_map_of_more_rows_than_a_block_is_its_blocks_side_by_side():
    """An output head is packed in blocks of QUANTIZE_ROWS rows: its output is each block's, in order."""
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(QUANTIZE_ROWS + 40, 32, generator=gen) * 0.1
    head, tail = Int8Linear.from_weight(weight, None), Int8Linear.from_weight(weight[QUANTIZE_ROWS:], None)
    assert len(head.packed) == 2
    rows = torch.randn(3, 32, generator=gen)
    out = head(rows)
    assert out.shape == (3, QUANTIZE_ROWS + 40)
    assert torch.equal(out[:, QUANTIZE_ROWS:], tail(rows))
    want = rows @ weight.T
    assert ((out - want).norm(dim=1) / want.norm(dim=1)).max() < 0.02


def steps_and_verify(lean, dtype, ids: list[int], cached: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits of ids[cached:cached + n] after ids[:cached], computed by `lean` one single
    step at a time and in one verify pass (each on its own cache)."""
    one_by_one, together = LeanForward(lean, dtype, CPU), LeanForward(lean, dtype, CPU)
    with torch.no_grad():
        one_by_one(ids[:cached], 1)
        together(ids[:cached], 1)
        steps = torch.cat([one_by_one([t], 1) for t in ids[cached:cached + n]])
        return steps, together(ids[cached:cached + n], n)


@pytest.mark.skipif(not HAS_INT8, reason="no int8 kernel in this torch build or on this CPU")
@pytest.mark.parametrize("kind", ["llama", "qwen2", "bigcode"])
def test_the_int8_forward_verifies_what_single_steps_compute(kind):
    model = tiny_model(kind, 300)
    ids = list(range(3, 60))
    ref = _reference(model, ids)
    lean = make_lean(model, quantize="int8")
    assert lean.compute_dtype == torch.float32
    steps, verify = steps_and_verify(lean, torch.float32, ids, 40, 16)
    torch.testing.assert_close(steps, verify, atol=1e-4, rtol=1e-4)
    # and it stays close to the float32 model it came from
    assert (verify - ref[40:56]).norm() < 0.1 * ref[40:56].norm()


@pytest.mark.skipif(not HAS_INT8, reason="no int8 kernel in this torch build or on this CPU")
def test_int8_frees_the_models_own_linear_weights_but_a_tied_embedding():
    model = tiny_model("qwen2", 300)
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    embed = model.model.embed_tokens.weight.detach().clone()
    lean = lean_for(model, "int8")
    assert model.model.layers[0].mlp.up_proj.weight.numel() == 0
    assert torch.equal(model.model.embed_tokens.weight, embed)
    assert lean_for(model) is lean and lean_for(model, "int8") is lean
    with pytest.raises(QuantizeError, match="quantized to int8"):
        lean_for(model, "none")


PROMPTS = ["def add(a, b):\n    return", "import os\nimport sys\n\n\ndef main(argv):\n    ",
           "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.",
           "for i in range(10):\n\tprint(i)\n\t", "x = [1, 2, 3]\ny = {k: v for k, v in "]


@pytest.mark.parametrize("setting", [dict(dtype="bfloat16"), dict(quantize="int4"),
                                     pytest.param(dict(quantize="int8"), marks=pytest.mark.skipif(
                                         not HAS_INT8, reason="no int8 kernel here"))])
def test_greedy_output_at_each_precision_equals_that_target_alone(setting):
    assert_every_drafter_gives_the_target_alone(setting)


def assert_every_drafter_gives_the_target_alone(setting: dict) -> list[LocalEngine]:
    """The tiny pair's target at `setting` (EngineConfig fields), with prompt lookup, a draft
    model of its tokenizer and one of another: greedy output equal to the target alone on
    PROMPTS, with drafts made. Returns the engines."""
    target_dir, draft_dir = tiny_pair_dirs()
    base = LocalEngine(EngineConfig(target=target_dir, draft="none", **setting))
    engines = {"ngram": LocalEngine(EngineConfig(target=target_dir, draft="ngram", **setting)),
               "same-tokenizer": LocalEngine(EngineConfig(target=target_dir, draft=tiny_same_tokenizer_draft_dir(), **setting)),
               "other-tokenizer": LocalEngine(EngineConfig(target=target_dir, draft=draft_dir, **setting))}
    # the policy's estimates frozen at their priors, so that its plans (the widths of the verify
    # passes) do not depend on this machine's timings: a 16-bit pass of another width may round
    # differently (engine/forward/matmul.py), which the test is not about
    for engine in engines.values():
        engine.policy = Policy(frozen=True, model_begin=Mean(0.0), model_first=Mean(0.5), model_step=Mean(0.5))
    settings = GenerationSettings(max_new_tokens=24)
    drafted = 0
    for text in PROMPTS:
        ids = _ids(base.target, text)
        want = base.generate(ids, settings=settings).token_ids
        for name, engine in engines.items():
            got = engine.generate(ids, _ids(engine.draft, text) if engine.draft else None, settings=settings)
            assert got.token_ids == want, (name, text)
            drafted += got.stats.drafted
    assert drafted > 0
    return [base, *engines.values()]


def test_a_quantization_that_cannot_run_is_one_line_before_anything_loads():
    target_dir, _ = tiny_pair_dirs()
    with pytest.raises(ModelLoadError, match=r"^quantize 'int2': not one of none, int8, int4$"):
        LocalEngine(EngineConfig(target=target_dir, draft="none", quantize="int2"))
    with pytest.raises(ModelLoadError, match="needs the lean forward"):
        LocalEngine(EngineConfig(target=target_dir, draft="none", quantize="int8", lean=False))


@pytest.mark.skipif(not HAS_INT8, reason="no int8 kernel here")
def test_a_model_without_a_lean_forward_cannot_be_quantized(tmp_path):
    GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2)).save_pretrained(tmp_path)
    _, draft_dir = tiny_pair_dirs()
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(draft_dir).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="needs the lean forward, which GPT2LMHeadModel does not have"):
        LocalEngine(EngineConfig(target=str(tmp_path), draft="none", quantize="int8"))


def test_kernels_are_measured_once_per_machine_and_shape_and_kept(tmp_path, monkeypatch, caplog):
    path = tmp_path / "kernels.json"
    monkeypatch.setenv("SPECFILL_KERNEL_CACHE", str(path))
    monkeypatch.setattr(lean_module, "_KERNELS_MEASURED", {})
    model = lambda: tiny_model("llama", 300).to(torch.bfloat16)   # noqa: E731  (plain 16-bit: measured)
    first = make_lean(model(), pack_max_bytes=0)
    assert path.is_file()
    stored = json.loads(path.read_text())
    assert len(stored) == 1 and next(iter(stored.values()))["note"] == first.kernels.note
    monkeypatch.setattr(lean_module, "_KERNELS_MEASURED", {})     # a later process
    with caplog.at_level(logging.INFO, logger="specfill.engine"):
        second = make_lean(model(), pack_max_bytes=0)
    assert second.kernels == first.kernels and f"matmul kernels from {path}" in caplog.text
    assert "matmul kernels:" not in caplog.text     # nothing was timed
    path.write_text("{not json")                     # a broken file is measured over
    monkeypatch.setattr(lean_module, "_KERNELS_MEASURED", {})
    third = make_lean(model(), pack_max_bytes=0)
    assert third.kernels.note and json.loads(path.read_text())


def test_the_kernel_cache_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("SPECFILL_KERNEL_CACHE", "off")
    assert kernel_cache.cache_file() is None and kernel_cache.load(("x",)) is None
    kernel_cache.store(("x",), Kernels())    # nothing to write, nothing raised


def _int4_values(weight: torch.Tensor) -> torch.Tensor:
    """What int4 makes of a weight: each group of 32 inputs at 16 levels from its least to its greatest."""
    groups = weight.detach().float().reshape(weight.shape[0], -1, 32)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    step = (high - low).clamp_min(1e-8) / 15
    return (((groups - low) / step).round().clamp(0, 15) * step + low).reshape(weight.shape)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "bigcode"])
def test_int4_keeps_rows_apart_and_computes_its_groups_values(kind):
    """int4 (groups of 32 inputs, an offset and a scale each): a verify pass gives what single
    steps give, and the logits are the float model's with each weight at its group's level
    (but for bfloat16's rounding of the activations)."""
    model = tiny_model(kind, 300)
    ids = list(range(3, 60))
    rounded = copy.deepcopy(model)
    # the output head is quantized, the embedding it may share is not
    rounded.lm_head.weight = torch.nn.Parameter(rounded.lm_head.weight.detach().clone())
    with torch.no_grad():
        for name, module in rounded.named_modules():
            if isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D":
                module.weight.copy_(_int4_values(module.weight))
    ref = _reference(rounded, ids)
    lean = make_lean(model, quantize="int4")
    assert lean.compute_dtype == torch.bfloat16
    one_by_one, together = LeanForward(lean, torch.bfloat16, CPU), LeanForward(lean, torch.bfloat16, CPU)
    with torch.no_grad():
        one_by_one(ids[:40], 1)
        together(ids[:40], 1)
        steps = torch.cat([one_by_one([t], 1) for t in ids[40:56]])
        verify = together(ids[40:56], 16)
    assert (steps - verify).abs().max() < 0.05 * verify.abs().max()
    assert (steps.argmax(-1) == verify.argmax(-1)).all()
    assert (verify - ref[40:56]).norm() < 0.05 * ref[40:56].norm()
