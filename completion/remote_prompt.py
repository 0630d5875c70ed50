"""Prompts for a remote target (engine/remote.py), which tokenizes on its own side.

Windows are cut as for a local model, but by an estimate of tokens (characters / 3: code
tokenizers average 3-4 characters per token, so this errs towards shorter prompts); the prefix
window still moves in steps of whole lines, which keeps the server's prefix cache warm.

* llama.cpp (`/infill`): prefix, suffix and other files' chunks go as text; the server builds
  the FIM prompt with its model's own tokens.
* OpenAI-compatible (`/v1/completions`): the prompt is text with the family's sentinels as
  completion/templates.py spells them (the server's tokenizer turns them back into the special
  tokens), so the family must be known: from `fimTemplate`, else from the served model's name.
"""
from __future__ import annotations

import math
import re

from completion.templates import FAMILIES, SPECS, ExtraChunk

CHARS_PER_TOKEN = 3

# Model names -> family, for servers that say which model they serve (vLLM, Ollama, TGI).
NAME_PATTERNS = (
    (r"starcoder2", "starcoder2"), (r"starcoder|santacoder|bigcode", "starcoder"),
    (r"deepseek", "deepseek"), (r"qwen", "qwen"), (r"codegemma", "codegemma"),
    (r"codestral", "codestral"), (r"codellama|code-llama|code_llama", "codellama"),
)


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def family_from_name(name: str) -> str | None:
    low = (name or "").lower()
    for pattern, family in NAME_PATTERNS:
        if re.search(pattern, low):
            return family
    return None


def resolve_family(setting: str, model_name: str) -> str:
    """The `/v1/completions` prompt family: the setting, else detected from the model name."""
    if setting != "auto":
        return setting
    family = family_from_name(model_name)
    if family is None:
        raise ValueError(f"cannot tell the FIM format of remote model {model_name or '(unnamed)'!r}; "
                         f"set specfill.fimTemplate to one of {', '.join(FAMILIES)}")
    return family


def text_layout(family: str, wanted: str) -> str:
    layouts = SPECS[family].layouts
    return layouts[0] if wanted == "auto" or wanted not in layouts else wanted


def build_text(family: str, prefix: str, suffix: str, layout: str,
               extra: tuple[ExtraChunk, ...] = (), path: str = "file", repo: str = "repo") -> str:
    """The FimTemplate.build prompt as text (no BOS: servers add it themselves)."""
    spec = SPECS[family]
    head = ""
    if extra and spec.file_sep and spec.repo_name:
        if family == "qwen":
            head = f"{spec.repo_name}{repo}\n" + "".join(
                f"{spec.file_sep}{c.path}\n{c.text if c.text.endswith(chr(10)) else c.text + chr(10)}" for c in extra)
        else:
            head = f"{spec.repo_name}{repo}" + "".join(f"{spec.file_sep}{c.path}\n{c.text}" for c in extra)
        head += f"{spec.file_sep}{path}\n"
    elif extra:
        prefix = "".join(c.text if c.text.endswith("\n") else c.text + "\n" for c in extra) + prefix
    if family == "plain":
        return head + prefix
    pre, suf = spec.prefix[0], spec.suffix[0]
    mid = spec.middle[0] if spec.middle else ""
    if family == "codestral":
        return head + suf + suffix + pre + prefix
    if layout == "spm":
        return head + pre + suf + suffix + mid + prefix
    return head + pre + prefix + suf + suffix + mid


def stop_strings(family: str) -> tuple[str, ...]:
    """Sentinels that end a middle, as text (for servers that print special tokens)."""
    return tuple(s for s in SPECS[family].stops if s.startswith("<"))
