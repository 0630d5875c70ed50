"""Model loading errors and the `specfill generate` command line."""
import json
import shutil
import subprocess
import sys

import pytest
from transformers import AutoModelForCausalLM, ViTConfig

from engine import LocalEngine, EngineConfig, ModelLoadError, load_model
from tests.tiny_models import tiny_pair_dirs


def test_unknown_directory_is_one_clear_line():
    with pytest.raises(ModelLoadError) as e:
        load_model("/no/such/model", role="target")
    assert "'/no/such/model'" in str(e.value) and "no such directory" in str(e.value)
    assert "\n" not in str(e.value)


def test_not_a_causal_lm(tmp_path):
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="not a causal language model"):
        load_model(str(tmp_path), role="draft")


def test_missing_tokenizer(tmp_path):
    target_dir, _ = tiny_pair_dirs()
    AutoModelForCausalLM.from_pretrained(target_dir).save_pretrained(tmp_path / "m")
    with pytest.raises(ModelLoadError, match="tokenizer"):
        load_model(str(tmp_path / "m"))


def test_bad_device_and_dtype_names():
    target_dir, _ = tiny_pair_dirs()
    with pytest.raises(ModelLoadError, match="device"):
        LocalEngine(EngineConfig(target=target_dir, draft="none", device="tpu"))
    with pytest.raises(ModelLoadError, match="dtype"):
        LocalEngine(EngineConfig(target=target_dir, draft="none", dtype="int3"))


def test_half_precision_weights_load_in_float32_on_cpu(tmp_path):
    target_dir, _ = tiny_pair_dirs()
    shutil.copytree(target_dir, tmp_path / "half")
    AutoModelForCausalLM.from_pretrained(target_dir, dtype="float16").save_pretrained(tmp_path / "half")
    loaded = load_model(str(tmp_path / "half"), device="cpu")
    assert next(loaded.model.parameters()).dtype.is_floating_point
    assert str(next(loaded.model.parameters()).dtype) == "torch.float32"


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True,
                          input=stdin, timeout=300)


def test_generate_json(tmp_path):
    target_dir, draft_dir = tiny_pair_dirs()
    prompt = tmp_path / "p.py"
    prompt.write_text("def add(a, b):\n    return", encoding="utf-8")
    out = _cli("generate", "--target", target_dir, "--draft", draft_dir, "--prompt-file", str(prompt),
               "--max-new-tokens", "12", "--json")
    assert out.returncode == 0, out.stderr
    obj = json.loads(out.stdout)
    assert isinstance(obj["text"], str) and obj["text"]
    for key in ("target_calls", "drafted", "accepted", "new_tokens", "prefill_tokens", "reused_tokens", "latency_ms"):
        assert key in obj["stats"]
    assert obj["stats"]["new_tokens"] == 12
    plain = _cli("generate", "--target", target_dir, "--draft", "none", "--prompt-file", str(prompt),
                 "--max-new-tokens", "12", "--json")
    assert json.loads(plain.stdout)["text"] == obj["text"]


def test_generate_reports_bad_input():
    target_dir, _ = tiny_pair_dirs()
    out = _cli("generate", "--target", "/no/such/dir", "--draft", "none", "--prompt-file", "-", stdin="x")
    assert out.returncode == 2 and "no such directory" in out.stderr
    out = _cli("generate", "--target", target_dir, "--draft", "none", "--prompt-file", "/no/file")
    assert out.returncode == 2 and "cannot read prompt file" in out.stderr
    out = _cli("generate", "--target", target_dir, "--draft-length", "99", "--prompt-file", "-", stdin="x")
    assert out.returncode == 2 and "1-16" in out.stderr
