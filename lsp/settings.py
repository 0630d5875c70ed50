"""Every specfill setting, named, documented and validated in one place.

Editors send these as the `specfill` configuration section (VS Code `specfill.*`, Neovim
`settings = { specfill = {...} }` or `init_options`). `python -m lsp.settings --schema` prints
the table as JSON so the editor manifests can be checked against it; `--markdown` prints the
README table. `schema()` is the table as data (name, type, default, allowed values, bounds,
description) for anything that generates an editor's settings from it.

The limits shared with the layers below are theirs (the draft length and device names from
engine/settings.py, the document size from completion/context.py); this table only documents
and enforces them. Importing it loads no torch (lsp/engine_limits.py), so every setting is
checked before any model loads.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from completion.alternatives import MAX_CANDIDATES
from completion.context import MAX_DOCUMENT_CHARS
from completion.templates import FAMILIES, LAYOUTS
from lsp.arguments import keyword_or_path
from lsp.engine_limits import BACKENDS, DEVICE_PATTERN, DEVICES, DTYPES, MAX_DRAFT_LENGTH, QUANTIZE

FIM_TEMPLATES = FAMILIES   # the prompt formats completion/templates.py knows

MODEL_KEYS = ("targetModel", "draftModel", "device", "dtype", "quantize", "cudaGraphs", "trustRemoteCode",
              "maxCacheTokens", "kvReuse", "promptLookup", "datastore", "backend", "apiKey", "apiKeyEnv",
              "verifyTls", "caBundle", "connectTimeoutMs", "readTimeoutMs")
"""Settings whose change needs the models reloaded (the others apply to the next request)."""


class SettingsError(ValueError):
    """An invalid setting value: the message names the setting, the value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str, message: str | None = None):
        self.name, self.value, self.allowed = name, value, allowed
        # `allowed` is markdown (the README table); messages are plain text.
        super().__init__(message or f"invalid value for specfill.{name}: {value!r} "
                                    f"(allowed: {allowed.replace('`', '')})")


def _quoted(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _setting(default: Any, description: str, allowed: str, secret: bool = False, **extra: Any) -> Any:
    # A secret stays out of repr (the settings are logged) and out of to_dict (specfill.stats).
    return field(default=default, repr=not secret,
                 metadata={"description": description, "allowed": allowed, "secret": secret, **extra})


SECRET_SHOWN_AS = "(set)"


@dataclass(frozen=True)
class Settings:
    """specfill settings; field names are the camelCase names editors use."""

    enable: bool = _setting(True, "Offer completions at all.", "true or false")
    targetModel: str = _setting(
        "default", "The model whose output you get: `default` (the shipped pair), a Hugging Face "
        "hub id (must already be in the local cache), a local directory, or the `http(s)://` URL "
        "of a server that runs it (llama.cpp, vLLM, TGI, Ollama; see `backend`).",
        "`default`, hub id, local path or URL")
    draftModel: str = _setting(
        "default", "The small model that proposes tokens for the target to verify: `default`, a "
        "hub id, a local directory, `ngram` (prompt lookup, no model) or `none` (plain decoding).",
        "`default`, hub id, local path, `ngram`, `none`")
    draftLength: Any = _setting(
        "auto", "Tokens drafted per target call; `auto` picks, each round, the drafter (prompt "
        "lookup, the draft model or none) and the length that give the most tokens per "
        "millisecond, from acceptance and costs it measures as it goes.",
        f"`auto` or an integer 1-{MAX_DRAFT_LENGTH}", min=1, max=MAX_DRAFT_LENGTH,
        keywords=("auto",))
    promptLookup: bool = _setting(
        True, "Draft from the text itself too (the prompt, recent completions, the whole document "
        "and the other open documents) beside a draft model; the controller uses whichever pays.",
        "true or false")
    datastore: str = _setting(
        "auto", "The target's own answers that prompt lookup drafts from too (a table made by "
        "`python -m training.datastore`): `auto` (the target directory's `datastore.npz`, shipped "
        "with the default pair), `none`, or a file path.", "`auto`, `none` or a file path")
    maxNewTokens: int = _setting(64, "Most tokens generated for one completion.",
                                 "integer 1-1024", min=1, max=1024)
    maxLines: int = _setting(8, "Most lines in one multi-line completion.",
                             "integer 1-200", min=1, max=200)
    temperature: float = _setting(
        0.0, "Sampling temperature; 0 is greedy (output equals the target's own greedy output).",
        "number 0-2", min=0.0, max=2.0)
    candidates: int = _setting(
        1, "Suggestions to cycle through at one position (Neovim `<M-]>` / `<M-[>`): the first is "
        "the greedy one, the others exact samples from the target (at `temperature`, or 1 when it "
        "is 0), without duplicates, made only when you ask to cycle.",
        f"integer 1-{MAX_CANDIDATES}", min=1, max=MAX_CANDIDATES)
    device: str = _setting(
        "auto", "Where the models run (`auto`: CUDA, else MPS, else CPU; `cuda:N` picks one GPU).",
        f"{_quoted(DEVICES)}, `cuda:N`", pattern=DEVICE_PATTERN)
    dtype: str = _setting(
        "auto", "Precision the local models compute in. `auto`: on a GPU bfloat16 (else float16); on "
        "a CPU a checkpoint's own 16-bit precision for a real-sized model where the CPU computes it "
        "natively (`specfill --version` says which it does), else float32 (small models, float32 "
        "checkpoints). The server's log says what it chose and why.", _quoted(DTYPES), choices=DTYPES)
    quantize: str = _setting(
        "none", "The local models' weights in fewer bits (CPU only): `int8` (half the memory of 16 "
        "bits, faster decoding, and verifying several drafted tokens costs little more than one) or "
        "`int4` (a quarter, the fastest decoding, but verifying several tokens costs several times "
        "one); a small cost in quality (`python -m bench.quality`). The output is exactly that of "
        "the quantized target alone.", _quoted(QUANTIZE), choices=QUANTIZE)
    cudaGraphs: bool = _setting(
        False, "Run the local models' forward passes as replayed CUDA graphs (the lean forward at "
        "fixed shapes, each captured on its first call), which cuts the per-step launch overhead "
        "on a GPU. CUDA only: on another device the server says so and runs them as "
        "usual. Off by default: tried on one GPU model (H200) so far.", "true or false")
    fimTemplate: str = _setting(
        "auto", "Fill-in-the-middle prompt format; `auto` picks it from the target's tokenizer, "
        "`plain` completes from the prefix only.",
        f"`auto`, {_quoted(FIM_TEMPLATES)}",
        choices=("auto", *FIM_TEMPLATES))
    draftFimTemplate: str = _setting(
        "auto", "The draft model's own prompt format (it may be another family than the target's).",
        f"`auto`, {_quoted(FIM_TEMPLATES)}",
        choices=("auto", *FIM_TEMPLATES))
    draftPromptTokens: Any = _setting(
        "auto", "Tokens of the draft model's prompt (its own tokens): the text nearest the cursor "
        "within the target's window. `auto`: what the draft's config.json recommends "
        "(`specfill_draft_prompt_tokens`; the shipped draft: 256, where it is accepted far more "
        "often than with the whole window), else the whole window. Decoding stays lossless at "
        "any value; `python -m bench.draft_window` compares values for your pair.",
        "`auto` or an integer 16-32768", min=16, max=32768, keywords=("auto",))
    fimLayout: str = _setting(
        "auto", "Order of prefix and suffix in the prompt: PSM (prefix first), SPM (suffix "
        "first: typing only appends, so the KV cache stays valid), or PSM-LINE (PSM whose middle "
        "begins with the cursor line's text: typing within a line only appends); `auto`: SPM "
        "where the model family was trained on it, else PSM-LINE.",
        f"`auto`, {_quoted(LAYOUTS)}", choices=("auto", *LAYOUTS))
    prefixTokens: int = _setting(1024, "Tokens of text before the cursor put in the prompt.",
                                 "integer 16-32768", min=16, max=32768)
    suffixTokens: int = _setting(256, "Tokens of text after the cursor put in the prompt.",
                                 "integer 0-32768", min=0, max=32768)
    extraTokens: int = _setting(
        256, "Tokens of context taken from other open documents; 0 turns it off.",
        "integer 0-32768", min=0, max=32768)
    extraContextFrom: str = _setting(
        "open", "Where that context comes from (newest first within `extraTokens`): `open` (a "
        "document's top when opened), `edits` (around its latest edit), `yanks` (text you yanked, "
        "Neovim), `visits` (around the line you left a file at, and in Neovim where the cursor "
        "rested). Only `open` by default: the others changed nothing the shipped pair shows "
        "(README, extra context); try them with a pair trained on repository context.",
        "comma-separated `open`, `edits`, `yanks`, `visits`",
        pattern=r"^(open|edits|yanks|visits)(,(open|edits|yanks|visits))*$")
    multiline: str = _setting(
        "auto", "Multi-line completions: `auto` (one line when code follows the cursor), "
        "`always`, or `never` (stop at the end of the line).",
        "`auto`, `always`, `never`", choices=("auto", "always", "never"))
    debounceMs: int = _setting(
        0, "Server-side wait after a request before decoding starts; a newer request for the "
        "same document during the wait replaces it. Editors already debounce and a superseded "
        "decode stops within one step, so 0 (answer at once) is the default.", "integer 0-5000",
        min=0, max=5000)
    timeBudgetMs: int = _setting(
        0, "Stop decoding after this many milliseconds and show what is ready; 0 = no limit.",
        "integer 0-60000", min=0, max=60000)
    maxCacheTokens: int = _setting(
        8192, "KV cache budget, in tokens, of each local model's sessions (one per open document) "
        "together: the longest prompt plus completion, and all that is kept between requests; "
        "the least recently used document's cache goes first. Memory: this many tokens times the "
        "model's KV bytes per token (Qwen2.5-Coder-0.5B in bfloat16: 12 KB; CodeLlama-7B: 512 KB).",
        "integer 256-131072", min=256, max=131072)
    kvReuse: bool = _setting(
        True, "Keep the models' KV caches between requests, so a keystroke recomputes only the "
        "changed end of the prompt; off only to measure what reuse saves.", "true or false")
    lookupDocuments: bool = _setting(
        True, "Prompt lookup (`draftModel: ngram`, or `promptLookup`) reads the whole document and "
        "the other open documents too, not only the prompt and recent completions (their text "
        "tokenized in blocks of lines when a document opens, while the server is idle, and cached, "
        "so a keystroke re-reads one block); off only to measure what that brings.", "true or false")
    stopWhileDecoding: bool = _setting(
        True, "Stop decoding the moment the answer is decided (its last line is complete, a line "
        "dedents, repeats the code below or loops), so a multi-line answer costs only what is "
        "shown; off only to measure what this saves (the text shown is the same).", "true or false")
    maxDocumentChars: int = _setting(
        2_000_000, "Documents longer than this (characters) get no completions and are not kept "
        "in memory.", f"integer 1000-{MAX_DOCUMENT_CHARS}", min=1000, max=MAX_DOCUMENT_CHARS)
    backend: str = _setting(
        "auto", "How to talk to a remote `targetModel` (a URL): `llamacpp` (llama.cpp's `/infill`, "
        "the server builds the FIM prompt), `openai` (`/v1/completions` with the prompt built by "
        "specfill, for vLLM, TGI, Ollama) or `auto` (ask the server).",
        _quoted(BACKENDS), choices=BACKENDS)
    apiKey: str = _setting(
        "", "API key sent to a remote `targetModel` (as `Authorization: Bearer`); never logged or "
        "shown in stats. Prefer `apiKeyEnv`.", "a string (empty: none)", secret=True, empty=True)
    apiKeyEnv: str = _setting(
        "", "Name of an environment variable of the server process that holds the API key (used "
        "when `apiKey` is empty).", "an environment variable name (empty: none)", empty=True,
        pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*$", keep_case=True)
    verifyTls: bool = _setting(
        True, "Check a remote `https://` server's certificate; off only for a test server.",
        "true or false")
    caBundle: str = _setting(
        "", "A CA bundle file (PEM) to check a remote server's certificate against, for a "
        "private CA.", "a file path (empty: the system's CAs)", empty=True)
    connectTimeoutMs: int = _setting(
        3000, "Longest wait to connect to a remote `targetModel`.", "integer 100-60000",
        min=100, max=60000)
    readTimeoutMs: int = _setting(
        30000, "Longest wait for the next part of a remote answer.", "integer 100-600000",
        min=100, max=600000)
    trustRemoteCode: bool = _setting(
        False, "Allow model repositories to run their own Python code when loading. Off unless "
        "you trust the model's source.", "true or false")
    prefetch: bool = _setting(
        True, "Once a suggestion is shown, compute the next one in the background as if it were "
        "accepted, so accepting shows the following suggestion from the cache. It runs only while "
        "no request needs the models; a request anywhere else stops it at once.", "true or false")

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for name, f in FIELDS.items():
            if f.metadata.get("secret") and d[name]:
                d[name] = SECRET_SHOWN_AS
        return d

    def model_key(self) -> tuple:
        """What identifies the loaded models: a change here means a reload."""
        return tuple(getattr(self, k) for k in MODEL_KEYS)


FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
# Client-side keys in the same section: vscode-languageclient's `specfill.trace.server` and the
# VS Code extension's `specfill.server.command/args` (how to start this server).
IGNORED_KEYS = {"trace", "server"}


def _check_int(name: str, value: Any, meta: dict) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingsError(name, value, meta["allowed"])
    if not meta["min"] <= value <= meta["max"]:
        raise SettingsError(name, value, meta["allowed"])
    return value


def _check_value(name: str, value: Any) -> Any:
    f = FIELDS[name]
    meta = f.metadata
    allowed = meta["allowed"]
    if isinstance(value, str) and value.strip().lower() in meta.get("keywords", ()):
        return value.strip().lower()
    if isinstance(f.default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise SettingsError(name, value, allowed)
    if "min" in meta and isinstance(meta["min"], int) and not isinstance(meta["min"], bool):
        return _check_int(name, value, meta)
    if isinstance(f.default, float):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise SettingsError(name, value, allowed) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SettingsError(name, value, allowed)
        if not meta["min"] <= value <= meta["max"]:
            raise SettingsError(name, value, allowed)
        return float(value)
    # strings
    shown = SECRET_SHOWN_AS if meta.get("secret") else value   # an error message never holds a key
    if meta.get("empty") and isinstance(value, str) and not value.strip():
        return ""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise SettingsError(name, shown, allowed)
    value = value.strip()
    if "choices" in meta:
        if value.lower() not in meta["choices"]:
            raise SettingsError(name, value, allowed)
        return value.lower()
    if "pattern" in meta:
        if not re.fullmatch(meta["pattern"], value if meta.get("keep_case") else value.lower()):
            raise SettingsError(name, value, allowed)
        return value if meta.get("keep_case") else value.lower()
    if name == "datastore":   # a path keeps its case; the file is checked when the models load
        return keyword_or_path(value, ("auto", "none"))
    if name in ("targetModel", "draftModel"):
        low = value.lower()
        if low in ("default", "ngram", "none"):
            if name == "targetModel" and low in ("ngram", "none"):
                raise SettingsError(name, value, "`default`, hub id, local path or URL")
            return low
        if name == "draftModel" and low.startswith(("http://", "https://")):
            raise SettingsError(name, value, "`default`, hub id, local path, `ngram`, `none` "
                                             "(a remote server runs its own drafting)")
    return value


def parse_settings(raw: dict | None, previous: Settings) -> Settings:
    """`previous` with the values in `raw` (a `specfill` section) applied.

    Keys not in `raw` keep their previous value; a `null` value resets that setting to its
    default. Unknown keys are ignored (see `unknown_keys`). Raises SettingsError naming the first
    invalid value; nothing is applied then.
    """
    if raw is None:
        return previous
    if not isinstance(raw, dict):
        raise SettingsError("<section>", raw, "an object of specfill settings")
    changes: dict[str, Any] = {}
    for name, value in raw.items():
        if name not in FIELDS:
            continue
        changes[name] = FIELDS[name].default if value is None else _check_value(name, value)
    return previous.replace(**changes)


def parse_settings_leniently(raw: dict | None, previous: Settings) -> tuple[Settings, list[SettingsError]]:
    """`parse_settings` for a section from an editor: the valid values apply, an invalid one
    keeps its previous value and is returned, so one mistake does not undo the user's other
    settings (their models, say). A section that is not an object changes nothing."""
    if raw is None:
        return previous, []
    if not isinstance(raw, dict):
        return previous, [SettingsError("<section>", raw, "an object of specfill settings")]
    changes: dict[str, Any] = {}
    errors: list[SettingsError] = []
    for name, value in raw.items():
        if name not in FIELDS:
            continue
        try:
            changes[name] = FIELDS[name].default if value is None else _check_value(name, value)
        except SettingsError as exc:
            errors.append(exc)
    return previous.replace(**changes), errors


def unknown_keys(raw: dict | None) -> list[str]:
    if not isinstance(raw, dict):
        return []
    return sorted(k for k in raw if k not in FIELDS and k not in IGNORED_KEYS)


def document_too_large(chars: int, limit: int) -> str | None:
    """Why a document of `chars` characters gets no completions under `maxDocumentChars`
    `limit` (None: it is not too large); the server and `specfill complete` say the same."""
    if chars <= limit:
        return None
    return (f"{chars} characters, over maxDocumentChars ({limit}); no completions for it "
            f"(the setting goes up to {FIELDS['maxDocumentChars'].metadata['max']})")


def schema() -> list[dict[str, Any]]:
    """One entry per setting: name, type, default, allowed values, description (and bounds)."""
    out = []
    for f in dataclasses.fields(Settings):
        meta = f.metadata
        if isinstance(f.default, bool):
            type_ = "boolean"
        elif isinstance(f.default, float):
            type_ = "number"
        elif isinstance(f.default, int):
            type_ = "integer"
        elif "keywords" in meta:
            type_ = ["string", "integer"]
        else:
            type_ = "string"
        entry = {"name": f.name, "type": type_, "default": f.default,
                 "allowed": meta["allowed"], "description": meta["description"]}
        for k in ("min", "max"):
            if k in meta:
                entry[k] = meta[k]
        if "choices" in meta:
            entry["enum"] = list(meta["choices"])
        if "pattern" in meta:
            entry["pattern"] = meta["pattern"]
        out.append(entry)
    return out


def parse_assignment(item: str) -> tuple[str, Any]:
    """One `NAME=VALUE` from a command line (`--set maxNewTokens=32`): the setting's name and
    its validated value. Raises SettingsError for an unknown name or a bad value."""
    name, eq, value = item.partition("=")
    name = name.strip()
    if not eq or not name:
        raise SettingsError(item, item, "NAME=VALUE", f"expected NAME=VALUE, got {item!r}")
    if name not in FIELDS:
        raise SettingsError(name, item, "a setting name", unknown_setting(name))
    return name, _check_value(name, value)


def closest_setting(name: str) -> str | None:
    """The known setting `name` is most likely a misspelling of (None: none is close). Case
    is ignored (`maxnewtokens`), and so is a `specfill.` prefix written in front of it."""
    bare = name.removeprefix("specfill.")
    if bare in FIELDS:
        return bare
    by_lower = {known.lower(): known for known in FIELDS}
    if bare.lower() in by_lower:
        return by_lower[bare.lower()]
    close = difflib.get_close_matches(bare.lower(), by_lower, n=1)
    return by_lower[close[0]] if close else None


def unknown_setting(name: str, list_known: bool = True) -> str:
    """The one line that names an unknown setting and the known one it is closest to, for the
    command line and the editors alike. When none is close: every known name (`list_known`,
    the command line), or where the list is (an editor's notice, which must stay one line)."""
    close = closest_setting(name)
    if close:
        hint = f"did you mean {close}?"
    elif list_known:
        hint = f"known: {', '.join(FIELDS)}"
    else:
        hint = "python -m lsp.settings --markdown lists the known ones"
    return f"unknown setting {name!r} ({hint})"


def markdown_table() -> str:
    rows = ["| Setting | Default | Allowed | Description |", "|---|---|---|---|"]
    for e in schema():
        rows.append(f"| `{e['name']}` | `{json.dumps(e['default'])}` | {e['allowed']} | "
                    f"{e['description']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--markdown"]:
        print(markdown_table())
    else:  # --schema (default)
        print(json.dumps(schema(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
