"""The lean forward equals the transformers forward on every path it takes: packed weight
copies or the model's own weights, one new token or a verify width (each matmul kernel of the
packed maps, and whichever this machine measures fastest),
short inputs (mask band) or a long prefill (built mask), grouped-query and multi-query
attention, biases; and it never changes the model's parameters."""
import pytest
import torch
from transformers import GPTBigCodeForCausalLM, LlamaForCausalLM

from engine import LocalEngine, EngineConfig
from engine.forward.lean import MASK_BAND_WIDTH, LeanForward, _Positions, long_tensor, make_lean
from engine.forward import rows16
from engine.forward.matmul import FP16, GEMV, NATIVE, ROW_CLASSES, ROWS, Kernels, choose_kernels, fp16_available, fp16_exact, use_kernels
from tests.tiny_models import bigcode_config, llama_config, tiny_model, tiny_pair_dirs

VOCAB = 300


def _model(kind: str, fp16_values: bool = False) -> torch.nn.Module:
    """A tiny model of `kind` with nonzero biases; with `fp16_values`, every weight a float16
    value held in float32 (as a checkpoint stored in float16 loads: the FP16 kernel's case)."""
    if kind == "bigcode multi-head":
        model = GPTBigCodeForCausalLM(bigcode_config(VOCAB, multi_query=False)).eval()
    elif kind == "llama, 2 heads per kv head":
        model = LlamaForCausalLM(llama_config(VOCAB, num_attention_heads=4, num_key_value_heads=2)).eval()
    else:
        model = tiny_model(kind, VOCAB)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():   # nonzero biases, so that a misplaced bias shows
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            if fp16_values:
                p.copy_(p.half().float())
    return model


def _reference(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


# FBGEMM's float16-weight product: in this torch build, on a CPU it supports (x86 with AVX2)
HAS_FP16 = fp16_available()
# packed weights with every kernel at every row count, mixed, the measured ones; or the model's own
WEIGHTS = {"packed, rows": (True, Kernels(ROWS, ROWS, ROWS, ROWS)),
           "packed, fp16": (True, Kernels(FP16, FP16, FP16, FP16)),
           "packed, mixed with fp16": (True, Kernels(FP16, ROWS, FP16, ROWS)),
           "packed, measured": (True, None), "packed, measured, float16 values": (True, None),
           "model-weights": (False, None)}


def _uses(kernels: Kernels, kernel: str) -> bool:
    return kernel in [getattr(kernels, n) for n, *_ in ROW_CLASSES]


@pytest.mark.parametrize("weights", list(WEIGHTS))
@pytest.mark.parametrize("kind", ["llama", "llama, 2 heads per kv head", "qwen2", "bigcode", "bigcode multi-head"])
def test_lean_forward_equals_transformers_at_every_width(kind, weights):
    packed, kernels = WEIGHTS[weights]
    fp16_values = "fp16" in weights or "float16" in weights
    if fp16_values and not HAS_FP16:
        pytest.skip("no FBGEMM float16 kernel in this torch build or on this CPU")
    model = _model(kind, fp16_values)
    lean = make_lean(model, pack_max_bytes=2**30 if packed else 0, kernels=kernels)
    assert lean.packed == packed
    # packed Llama-family weights in float32 carry their RMSNorm weights (LeanLlama.folded)
    assert getattr(lean, "folded", False) == (packed and not kind.startswith("bigcode"))
    if kernels is not None:
        assert [getattr(lean.kernels, n) for n, *_ in ROW_CLASSES] == [getattr(kernels, n) for n, *_ in ROW_CLASSES]
    elif packed:   # FP16 where, and only where, the weights are float16 values
        assert all((getattr(lean.kernels, n) == FP16) == fp16_values for n, *_ in ROW_CLASSES)
    # FBGEMM's copies exist where a class takes FP16; the unscaled sources they came from are gone
    assert all((m.weight_fp16 is not None) == _uses(lean.kernels, FP16) and m.fp16_source is None
               for m in lean.linears())
    fwd = LeanForward(lean, torch.float32, torch.device("cpu"))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (420,), generator=gen).tolist()
    ref = _reference(model, ids)
    prefill = MASK_BAND_WIDTH + 30   # longer than the mask band: attends in blocks of band rows
    pos = 0
    with torch.no_grad():
        # ... and a prompt's prefill after cached tokens (three blocks, the last a short one)
        for width in [prefill, 1, 2, 3, 4, 8, 16, 1, 5, 12, 31, 32, MASK_BAND_WIDTH, 2 * MASK_BAND_WIDTH + 9]:
            got = fwd(ids[pos:pos + width], n_logits=width)
            assert got.is_contiguous() and got.shape == (width, VOCAB)
            torch.testing.assert_close(got, ref[pos:pos + width], atol=1e-4, rtol=1e-4, msg=f"width {width}")
            pos += width
        # Crop back and continue: the cache past the crop is overwritten, not attended.
        fwd.crop(prefill + 3)
        got = fwd(ids[prefill + 3:prefill + 11], n_logits=8)
        torch.testing.assert_close(got, ref[prefill + 3:prefill + 11], atol=1e-4, rtol=1e-4)


def test_packing_leaves_the_model_parameters_alone():
    model = _model("llama")
    before = {name: (p.data_ptr(), p.detach().clone()) for name, p in model.named_parameters()}
    lean = make_lean(model)
    assert lean.packed
    with torch.no_grad():
        LeanForward(lean, torch.float32, torch.device("cpu"))(list(range(40)), n_logits=8)
    for name, p in model.named_parameters():
        ptr, value = before[name]
        assert p.data_ptr() == ptr and torch.equal(p, value), name


def test_big_models_run_on_their_own_weights():
    model = _model("llama")
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert not make_lean(model, pack_max_bytes=weights // 4).packed


def test_half_precision_matches_transformers():
    model = _model("llama")
    inv_freq = model.model.rotary_emb.inv_freq.clone()
    model = model.to(torch.bfloat16)
    # the lean forward keeps rotary frequencies in float32, as the config gives them; a converted
    # transformers model rounds its buffer to bfloat16 (its forward reads it as float32 again)
    model.model.rotary_emb.inv_freq = inv_freq
    fwd = LeanForward(make_lean(model), torch.bfloat16, torch.device("cpu"))
    ids = list(range(3, 60))
    ref = _reference(model, ids)
    with torch.no_grad():
        got = torch.cat([fwd(ids[:50], n_logits=50), fwd(ids[50:51], 1), fwd(ids[51:], 6)])
    # bf16 keeps 8 bits of mantissa: the two forwards round differently, not differently often
    assert (got - ref).abs().max() < 0.05 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


def test_measuring_the_kernels_leaves_the_forward_exact_and_the_cache_alone():
    """choose_kernels times a plain 16-bit model's kernels on a scratch cache: a forward made
    before it goes on from its own cache; one and a few rows get ROWS, GEMV or NATIVE, up to 8
    rows ROWS or NATIVE (where it runs), the rest ROWS."""
    model = _model("llama").to(torch.bfloat16)
    lean = make_lean(model, pack_max_bytes=0, kernels=Kernels())
    fwd = LeanForward(lean, torch.bfloat16, torch.device("cpu"))
    ids = list(range(3, 60))
    with torch.no_grad():
        first = fwd(ids[:40], n_logits=40)
        kernels = choose_kernels(lean, reps=1)
        rest = fwd(ids[40:], n_logits=len(ids) - 40)
        whole = LeanForward(make_lean(model, pack_max_bytes=0, kernels=Kernels()), torch.bfloat16,
                            torch.device("cpu"))(ids, n_logits=len(ids))
    assert kernels is lean.kernels and kernels.many == ROWS
    native = rows16.available(lean.linears()[0].weight)
    for name, allowed in (("one", (ROWS, GEMV, NATIVE)), ("few", (ROWS, GEMV, NATIVE)), ("verify", (ROWS, NATIVE))):
        assert getattr(kernels, name) in allowed and (native or getattr(kernels, name) != NATIVE)
        if name != "verify" or native:
            assert f"{name} {getattr(kernels, name)} (" in kernels.note
    assert ("native " in kernels.note) == native
    torch.testing.assert_close(torch.cat([first, rest]), whole, atol=0.05, rtol=0.05)


def test_a_second_model_of_the_same_shapes_takes_the_same_kernels():
    """Measured once per process and shape: two engines of one model compute alike."""
    first, second = (make_lean(_model("qwen2").to(torch.bfloat16), pack_max_bytes=0) for _ in range(2))
    assert first.kernels == second.kernels and first.kernels is not second.kernels
    assert "one " in first.kernels.note


@pytest.mark.skipif(not HAS_FP16, reason="no FBGEMM float16 kernel in this torch build or on this CPU")
def test_the_fp16_kernel_runs_only_on_weights_that_are_float16_values():
    """FP16 copies the weights to float16: exact only where they are float16 values already. A
    model of the same shapes whose weights are not measures its own kernels (never FP16), and
    naming FP16 for it by hand is a clear error, not a rounded copy."""
    exact = make_lean(_model("qwen2", fp16_values=True))
    plain_model = _model("qwen2")
    assert all(fp16_exact(p) for p in exact.model.parameters())
    assert not all(fp16_exact(p) for p in plain_model.parameters())
    plain = make_lean(plain_model)
    assert _uses(exact.kernels, FP16) and not _uses(plain.kernels, FP16)
    assert all(m.weight_fp16 is None for m in plain.linears())
    ids = list(range(3, 40))
    with torch.no_grad():
        got = LeanForward(plain, torch.float32, torch.device("cpu"))(ids, n_logits=len(ids))
    torch.testing.assert_close(got, _reference(plain_model, ids), atol=1e-4, rtol=1e-4)
    by_hand = make_lean(_model("qwen2"), kernels=Kernels())
    with pytest.raises(ValueError, match="float16 values"):
        use_kernels(by_hand, Kernels(FP16, ROWS, ROWS, ROWS))


def test_the_engine_reports_each_models_kernels():
    """`specfill generate --json` and specfill.stats show what each model measured and took."""
    target_dir, draft_dir = tiny_pair_dirs()
    report = LocalEngine(EngineConfig(target=target_dir, draft=draft_dir)).matmul_kernels()
    assert set(report) == {"target", "draft"}
    for kernels in report.values():
        assert kernels["verify"] in (ROWS, FP16) and kernels["note"]
    assert LocalEngine(EngineConfig(target=target_dir, draft="ngram")).matmul_kernels()["draft"] is None


@pytest.mark.parametrize("ids", [[], [0], [5, 4095, 7, 0, 2**40], list(range(300))])
def test_id_lists_become_the_same_long_tensors_as_torch_tensor_makes(ids):
    got = long_tensor(ids, torch.device("cpu"))
    want = torch.tensor(ids, dtype=torch.long)
    assert got.dtype == torch.long and got.shape == want.shape and torch.equal(got, want)
    # the tensor keeps its buffer alive: other arrays made after it do not overwrite it
    junk = [long_tensor([9] * len(ids), torch.device("cpu")) for _ in range(50)]
    assert torch.equal(got, want) and all(torch.equal(j, torch.full_like(want, 9)) for j in junk)


def test_a_packed_map_takes_inputs_that_carry_gradients():
    """A lean forward called outside no_grad (the engine never is): the products stay right."""
    from engine.forward.matmul import Linear
    gen = torch.Generator().manual_seed(0)
    maps = [torch.nn.Linear(24, 40), torch.nn.Linear(24, 8, bias=False)]
    linear = Linear(maps, packed=True, kernels=Kernels())
    h = torch.randn(5, 24, generator=gen, requires_grad=True)
    x = torch.randn(5, 48, generator=gen)
    want = torch.cat([m(h) for m in maps], dim=-1).detach()
    torch.testing.assert_close(linear(h).detach(), want)
    torch.testing.assert_close(linear.add_to(x, h).detach(), want + x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_attention_masks_are_additive_and_let_each_token_see_the_cache_and_itself(dtype):
    """What a pass hands attention: 0 where a new token may look (the cached tokens, the new ones
    up to itself), -inf elsewhere, in the model's dtype, for verify
    widths (the band) and prefills longer than it alike."""
    positions = _Positions(torch.ones(4))
    positions.ensure(400, dtype, torch.device("cpu"))
    for past, n in [(0, 2), (5, 3), (37, MASK_BAND_WIDTH), (0, MASK_BAND_WIDTH + 9), (11, MASK_BAND_WIDTH + 30)]:
        mask = positions.mask(past, n, torch.device("cpu"))
        allowed = torch.arange(past + n)[None, :] <= torch.arange(n)[:, None] + past
        assert mask.dtype == dtype and mask.shape == (n, past + n)
        assert torch.equal(mask == 0, allowed) and bool(torch.isneginf(mask[~allowed]).all())
    assert positions.mask(9, 1, torch.device("cpu")) is None   # one token sees everything before it


@pytest.mark.parametrize("kind", ["llama", "llama, 2 heads per kv head", "bigcode", "bigcode multi-head"])
@pytest.mark.parametrize("packed", [True, False])
def test_a_pass_that_wants_few_logits_gives_them_and_the_same_cache(kind, packed):
    """A prompt's prefill wants the last token's logits only: past its keys and values, the last
    layer runs that token alone. Its logits are transformers' and the cache it leaves is the one
    a pass wanting every token's logits leaves, bit for bit (the next steps agree too)."""
    model = _model(kind)
    lean = make_lean(model, pack_max_bytes=2**30 if packed else 0)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (200,), generator=gen).tolist()
    ref = _reference(model, ids)
    few, every = (LeanForward(lean, torch.float32, torch.device("cpu")) for _ in range(2))
    with torch.no_grad():
        pos = 0
        for width, wanted in [(MASK_BAND_WIDTH + 40, 1), (7, 2), (MASK_BAND_WIDTH, 3), (1, 1), (20, 20)]:
            got = few(ids[pos:pos + width], n_logits=wanted)
            every(ids[pos:pos + width], n_logits=width)
            torch.testing.assert_close(got, ref[pos + width - wanted:pos + width], atol=1e-4, rtol=1e-4,
                                       msg=f"width {width}")
            pos += width
            assert torch.equal(few.cache.prefix(pos), every.cache.prefix(pos))
