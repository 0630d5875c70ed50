"""Checkpoints of the lean families load as their weights alone (engine/load/checkpoint.py): the same
logits as the transformers model of the same files, the config's defaults as transformers' config
classes set them, and none of transformers' model classes imported; other checkpoints load
through transformers."""
import json
import subprocess
import sys

import pytest
import torch
from transformers import (AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, GPTBigCodeConfig,
                          LlamaConfig, Qwen2Config)

from engine.load.checkpoint import DEFAULTS, CheckpointModel, lite_config
from engine.kv import KVPool
from engine.forward.lean import LeanForward
from engine.load.models import load_model
from tests.tiny_models import tiny_model, tiny_pair_dirs

CONFIG_CLASSES = {"llama": LlamaConfig, "qwen2": Qwen2Config, "gpt_bigcode": GPTBigCodeConfig}


@pytest.mark.parametrize("family", list(DEFAULTS))
def test_the_defaults_are_those_of_transformers_config_classes(family):
    cls = CONFIG_CLASSES[family]
    sizes = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4) \
        if family != "gpt_bigcode" else dict(n_embd=64, n_layer=2, n_head=4)
    reference = cls(**sizes)
    for name, value in DEFAULTS[family].items():
        if name == "rope_theta":
            assert reference.rope_parameters["rope_theta"] == value
        else:
            assert getattr(reference, name) == value, name


def _saved(tmp_path, kind: str, tied: bool = False):
    """A tiny model of `kind` saved with the shipped target's tokenizer."""
    from transformers import AutoTokenizer

    model = tiny_model(kind, 700)
    if tied:
        model.config.tie_word_embeddings = True
        model.lm_head.weight = model.get_input_embeddings().weight
    model.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_pair_dirs()[0]).save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("kind, tied", [("llama", False), ("qwen2", True), ("qwen2", False), ("bigcode", True)])
def test_a_checkpoint_computes_what_its_transformers_model_computes(tmp_path, kind, tied):
    path = _saved(tmp_path, kind, tied)
    loaded = load_model(path, lean_only=True, dtype="float32")
    assert isinstance(loaded.model, CheckpointModel)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    auto = AutoConfig.from_pretrained(path)
    for name in ("num_attention_heads", "num_key_value_heads", "hidden_size", "rms_norm_eps", "max_position_embeddings",
                 "rope_parameters", "hidden_act", "n_head", "n_embd", "multi_query", "layer_norm_epsilon",
                 "activation_function", "n_positions", "scale_attn_weights", "vocab_size"):
        if hasattr(auto, name):
            assert getattr(loaded.model.config, name) == getattr(auto, name), name
    pool = KVPool(loaded.model, 1, 512)
    ids = list(range(3, 80))
    with torch.no_grad():
        want = reference(torch.tensor([ids])).logits[0]
        got = LeanForward(pool.lean_model, torch.float32, torch.device("cpu"))(ids, len(ids))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_the_engine_loads_the_shipped_pair_without_transformers():
    """Its config, weights and tokenizers are read by engine/load/checkpoint.py and engine/load/tokenizer.py:
    transformers is not even imported (seconds of a command line's start)."""
    probe = ("import sys; from engine import LocalEngine, EngineConfig; e = LocalEngine(EngineConfig()); "
             "print(type(e.target.model).__name__, type(e.draft.model).__name__, type(e.target.tokenizer).__name__, "
             "'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "CheckpointModel CheckpointModel FastTokenizer False"


def test_other_checkpoints_load_through_transformers(tmp_path):
    """A family without a lean forward (GPT-2), and a Llama with scaled rotary positions (its
    config read by transformers' class), still load and run the lean forward where they can."""
    gpt2 = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(vocab_size=700, n_embd=16, n_layer=1, n_head=2)).save_pretrained(gpt2)
    scaled = tmp_path / "scaled"
    path = _saved(scaled, "llama")
    cfg = json.loads((scaled / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    (scaled / "config.json").write_text(json.dumps(cfg))
    assert lite_config(path) is None
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(tiny_pair_dirs()[0]).save_pretrained(gpt2)
    assert type(load_model(str(gpt2), lean_only=True).model).__name__ == "GPT2LMHeadModel"
    loaded = load_model(path, lean_only=True, dtype="float32")
    assert type(loaded.model).__name__ == "LlamaForCausalLM" and KVPool(loaded.model, 1, 256).lean_model is not None
