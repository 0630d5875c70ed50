"""The lean forward's static mode (StaticLeanForward: fixed shapes per width, for CUDA graphs)
equals the dynamic lean forward and the transformers forward: prefill, every verify width 1-16
(padded up to the static widths), after crops, up to the cache's last slot; the engine's
greedy speculative output through it equals target-alone output. CUDA graphs themselves need a
GPU: on a CPU only their refusal is tested, and the graph tests at the end are skipped."""
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, GPTBigCodeForCausalLM, LlamaForCausalLM

from engine import LocalEngine, EngineConfig, GenerationSettings
from engine.forward.forwards import TransformersForward
from engine.kv import KVPool
from engine.forward.lean import STATIC_WIDTHS, LeanForward, StaticLeanForward, make_lean, static_width
from tests.tiny_models import bigcode_config, llama_config, tiny_model, tiny_pair_dirs

VOCAB = 300
CPU = torch.device("cpu")
PAIR = Path(__file__).resolve().parents[2] / "engine" / "default_pair"


def _model(kind: str) -> torch.nn.Module:
    if kind == "bigcode multi-head":
        return GPTBigCodeForCausalLM(bigcode_config(VOCAB, multi_query=False)).eval()
    if kind == "llama, 4 heads per kv head":
        return LlamaForCausalLM(llama_config(VOCAB, num_attention_heads=4, num_key_value_heads=1)).eval()
    return tiny_model(kind, VOCAB)


def _ids(n: int, vocab: int = VOCAB, seed: int = 0) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _reference(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids], device=model.device)).logits[0].float()


def _close(got, want, what):
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=what)


def test_widths_pad_up_to_the_static_ones():
    assert [static_width(n) for n in range(1, 17)] == [1, 2, 4, 4] + [8] * 4 + [16] * 8
    assert static_width(17) == 17 and static_width(300) == 300   # prefills run at their own width
    assert STATIC_WIDTHS == (1, 2, 4, 8, 16)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "model-weights"])
@pytest.mark.parametrize("kind", ["llama", "llama, 4 heads per kv head", "qwen2", "bigcode", "bigcode multi-head"])
def test_static_equals_dynamic_and_transformers_at_every_width(kind, packed):
    model = _model(kind)
    lean = make_lean(model, pack_max_bytes=2**30 if packed else 0)
    ids = _ids(400)
    ref = _reference(model, ids)
    static = StaticLeanForward(lean, torch.float32, CPU, capacity=400)
    dynamic = LeanForward(lean, torch.float32, CPU)
    pos = 0
    with torch.inference_mode():
        for width in [70, *range(1, 17), 1, 3]:   # a prefill, then every verify width
            got = static(ids[pos:pos + width], n_logits=width)
            assert got.is_contiguous() and got.dtype == torch.float32 and got.shape == (width, VOCAB)
            _close(got, ref[pos:pos + width], f"width {width} vs transformers")
            _close(got, dynamic(ids[pos:pos + width], n_logits=width), f"width {width} vs dynamic")
            pos += width
        # Rejected draft tokens: crop back and continue, the stale slots past the crop unseen.
        for crop, width in [(200, 1), (101, 13), (75, 5), (71, 16)]:   # each below the last end
            static.crop(crop)
            got = static(ids[crop:crop + width], n_logits=2)
            _close(got, ref[max(crop, crop + width - 2):crop + width], f"crop {crop}, width {width}")


@pytest.mark.parametrize("kind", ["llama", "bigcode"])
def test_static_fills_its_cache_to_the_last_slot_and_no_further(kind):
    model = _model(kind)
    capacity = 100
    ids = _ids(capacity + 1)
    ref = _reference(model, ids[:capacity])
    static = StaticLeanForward(make_lean(model), torch.float32, CPU, capacity=capacity)
    with torch.inference_mode():
        static(ids[:capacity - 3], n_logits=1)
        # 3 tokens run at width 4: the padding row writes past the last slot (a spare one), unseen
        _close(static(ids[capacity - 3:capacity], n_logits=3), ref[capacity - 3:], "the last 3 slots")
        with pytest.raises(ValueError, match="101 tokens exceed the static cache's 100"):
            static(ids[capacity:], n_logits=1)
        static.crop(capacity - 1)
        _close(static(ids[capacity - 1:capacity], n_logits=1), ref[capacity - 1:], "the last slot again")
        static.reset()   # keeps its memory, starts again at slot 0
        _close(static(ids[:5], n_logits=5), ref[:5], "after reset")


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


@pytest.mark.parametrize("role", ["target", "draft"])
def test_static_equals_transformers_on_the_shipped_pair(role):
    model = AutoModelForCausalLM.from_pretrained(PAIR / role, dtype=torch.float32).eval()   # stored in fp16
    vocab = model.config.vocab_size
    ids = _ids(200, vocab)
    ref = _reference(model, ids)
    static = StaticLeanForward(make_lean(model), torch.float32, CPU, capacity=256)
    transformers = TransformersForward(model, CPU)
    pos = 0
    with torch.inference_mode():
        for width in [120, 1, 2, 3, 4, 7, 8, 13, 16, 1]:
            got = static(ids[pos:pos + width], n_logits=width)
            _close(got, ref[pos:pos + width], f"{role} width {width}")
            _close(got, transformers(ids[pos:pos + width], n_logits=width), f"{role} width {width}, session")
            pos += width


def test_greedy_speculative_through_the_static_forward_equals_target_alone():
    target_dir, draft_dir = tiny_pair_dirs()
    base = LocalEngine(EngineConfig(target=target_dir, draft="none"))
    engine = LocalEngine(EngineConfig(target=target_dir, draft=draft_dir))
    engine.pool = KVPool(engine.target.model, max_tokens=512, static=True)
    engine.drafters.model.pool = KVPool(engine.draft.model, max_tokens=512, static=True)
    settings = GenerationSettings(max_new_tokens=24)
    accepted = 0
    for prompt in ["def add(a, b):\n    return", "import os\nimport sys\n\n\ndef main(argv):\n    ",
                   "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self."]:
        t_ids = engine.target.vocab.encode_text(prompt)
        d_ids = engine.draft.vocab.encode_text(prompt)
        got = engine.generate(t_ids, d_ids, settings=settings)
        assert got.token_ids == base.generate(t_ids, settings=settings).token_ids, prompt
        accepted += got.stats.accepted
    assert all(isinstance(s.forward, StaticLeanForward) for s in engine.pool.sessions + engine.drafters.model.pool.sessions)
    assert accepted > 0   # drafts were verified and taken, at several widths


def test_cuda_graphs_are_refused_on_a_cpu():
    model = _model("llama")
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device, not cpu"):
        StaticLeanForward(make_lean(model), torch.float32, CPU, capacity=64, cuda_graphs=True)
    # asked of the engine (`specfill generate --cuda-graphs`) with models on a CPU: the plain
    # lean forward runs, and the output is the same
    target_dir, _ = tiny_pair_dirs()
    engine = LocalEngine(EngineConfig(target=target_dir, draft="ngram", device="cpu", cuda_graphs=True))
    base = LocalEngine(EngineConfig(target=target_dir, draft="ngram", device="cpu"))
    ids = engine.target.vocab.encode_text("def add(a, b):\n    return")
    settings = GenerationSettings(max_new_tokens=8)
    assert engine.generate(ids, settings=settings).token_ids == base.generate(ids, settings=settings).token_ids
    assert [type(s.forward) for s in engine.pool.sessions] == [LeanForward]



@CUDA
@pytest.mark.parametrize("kind", ["llama", "bigcode"])
def test_cuda_graphs_equal_the_eager_forwards(kind):
    gpu = torch.device("cuda")
    model = _model(kind).to(gpu)
    lean = make_lean(model)
    ids = _ids(400)
    ref = _reference(model, ids)
    graphs = StaticLeanForward(lean, torch.float32, gpu, capacity=400, cuda_graphs=True)
    dynamic = LeanForward(lean, torch.float32, gpu)
    pos = 0
    with torch.inference_mode():
        for width in [200, *range(1, 17), 1, 3, 16, 5]:   # each width twice: captured, then replayed
            got = graphs(ids[pos:pos + width], n_logits=width)
            _close(got, ref[pos:pos + width], f"width {width} vs transformers")
            _close(got, dynamic(ids[pos:pos + width], n_logits=width), f"width {width} vs dynamic")
            pos += width
        for crop, width in [(200, 1), (101, 13), (75, 5)]:
            graphs.crop(crop)
            _close(graphs(ids[crop:crop + width], n_logits=1), ref[crop + width - 1:crop + width], f"crop {crop}")
    assert {w for w, _ in graphs.graphs} == set(STATIC_WIDTHS)   # every width captured (and spans 256, 448)
    assert {s for _, s in graphs.graphs} == {256, 448}


@CUDA
def test_greedy_speculative_with_cuda_graphs_equals_target_alone():
    target_dir, draft_dir = tiny_pair_dirs()
    kw = dict(target=target_dir, device="cuda", dtype="float32")
    base = LocalEngine(EngineConfig(draft="none", **kw))
    engine = LocalEngine(EngineConfig(draft=draft_dir, cuda_graphs=True, **kw))
    settings = GenerationSettings(max_new_tokens=24)
    for prompt in ["def add(a, b):\n    return", "import os\nimport sys\n\n\ndef main(argv):\n    ",
                   "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self."]:
        t_ids = engine.target.vocab.encode_text(prompt)
        got = engine.generate(t_ids, engine.draft.vocab.encode_text(prompt), settings=settings)
        assert got.token_ids == base.generate(t_ids, settings=settings).token_ids, prompt
    for pool in (engine.pool, engine.drafters.model.pool):   # both models ran their steps as graphs
        assert pool.sessions and all(isinstance(s.forward, StaticLeanForward) for s in pool.sessions)
        assert any(s.forward.graphs for s in pool.sessions)
