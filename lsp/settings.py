"""Every specfill setting and server option, named, documented and validated in one place.

Settings (`Settings`) are what an editor user sets: the `specfill` configuration section (VS Code
`specfill.*`, Neovim `settings = { specfill = {...} }` or `init_options`). The connection to a
remote target nests under one of them, `remote` (`Remote`). `python -m lsp.settings --schema`
prints them as JSON for the editors' sync scripts; `--markdown` prints the README table.

Server options (`Options`) choose how the server works inside: what benchmarks switch off to
measure what a part brings, and the limits tests shrink. No editor sends them: they come from the
server's command line (`specfill serve --option NAME=VALUE`), and `specfill complete`, `specfill
generate` and bench/ take them with `--set` beside the settings. `python -m lsp.settings --options`
lists them. An option is fixed for a server's life.

The limits shared with the layers below are theirs (the draft length and device names from
engine/settings.py, the document size from completion/context.py); these tables only document
and enforce them. Importing this loads no torch (lsp/engine_limits.py), so every value is
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
from completion.edit_formats import FORMAT_NAMES as EDIT_FORMATS
from completion.templates import FAMILIES, LAYOUTS
from lsp.arguments import keyword_or_path
from lsp.engine_limits import BACKENDS, DEVICE_PATTERN, DEVICES, DTYPES, MAX_DRAFT_LENGTH, QUANTIZE

FIM_TEMPLATES = FAMILIES   # the prompt formats completion/templates.py knows

SECRET_SHOWN_AS = "(set)"
OPTION_FLAG = "specfill serve --option"   # how a server is given an option


class SettingsError(ValueError):
    """An invalid setting or option value: the message names it, the value and what is allowed."""

    def __init__(self, name: str, value: Any, allowed: str, message: str | None = None):
        self.name, self.value, self.allowed = name, value, allowed
        # `allowed` is markdown (the README table); messages are plain text.
        super().__init__(message or f"invalid value for {shown_name(name)}: {value!r} "
                                    f"(allowed: {allowed.replace('`', '')})")


def _quoted(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _setting(default: Any, description: str, allowed: str, secret: bool = False, **extra: Any) -> Any:
    # A secret stays out of repr (the settings are logged) and out of to_dict (specfill.stats).
    return field(default=default, repr=not secret,
                 metadata={"description": description, "allowed": allowed, "secret": secret, **extra})


def _digits_between(lo: str, hi: str) -> list[str]:
    """Regular expressions that together match every digit string from `lo` to `hi`, two
    strings of the same length."""
    if lo == hi:
        return [lo]
    if len(lo) == 1:
        return [f"[{lo}-{hi}]"]
    if lo[0] == hi[0]:
        return [lo[0] + rest for rest in _digits_between(lo[1:], hi[1:])]
    n = len(lo) - 1
    head, tail = [], []
    first, last = int(lo[0]), int(hi[0])
    if lo[1:] != "0" * n:          # lo's first digit takes only lo's tail upwards
        head = [lo[0] + rest for rest in _digits_between(lo[1:], "9" * n)]
        first += 1
    if hi[1:] != "9" * n:          # hi's first digit takes only up to hi's tail
        tail = [hi[0] + rest for rest in _digits_between("0" * n, hi[1:])]
        last -= 1
    middle = []
    if first <= last:
        digit = str(first) if first == last else f"[{first}-{last}]"
        middle = [digit + ("[0-9]" if n == 1 else f"[0-9]{{{n}}}")]
    return head + middle + tail


def integer_pattern(lo: int, hi: int) -> str:
    """A regular expression (the same in Python and JavaScript) that matches exactly the
    integers `lo`..`hi` (0 <= lo <= hi) written in decimal without leading zeros."""
    parts = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):
        smallest = 10 ** (digits - 1) if digits > 1 else 0
        parts += _digits_between(str(max(lo, smallest)), str(min(hi, 10 ** digits - 1)))
    return "|".join(parts)


def _keyword_or_integer(keyword: str, lo: int, hi: int) -> dict:
    """The metadata of a setting that is `keyword` or an integer lo-hi: an editor shows it as text
    checked against `pattern`."""
    return {"min": lo, "max": hi, "keywords": (keyword,),
            "pattern": f"^({keyword}|{integer_pattern(lo, hi)})$"}


@dataclass(frozen=True)
class Remote:
    """How to reach a remote `targetModel` (a URL): the `remote` setting's fields."""

    backend: str = _setting(
        "auto", "How to talk to a remote `targetModel` (a URL): `llamacpp` (llama.cpp's `/infill`, the server builds "
        "the FIM prompt), `openai` (`/v1/completions` with the prompt built by specfill, for vLLM, "
        "TGI, Ollama) or `auto` (ask the server).", _quoted(BACKENDS), choices=BACKENDS)
    apiKey: str = _setting(
        "", "API key sent to the remote server (as `Authorization: Bearer`); never logged or shown in "
        "stats. Prefer `apiKeyEnv`.", "a string (empty: none)", secret=True, empty=True)
    apiKeyEnv: str = _setting(
        "", "Name of an environment variable of the server process that holds the API key (used "
        "when `apiKey` is empty).", "an environment variable name (empty: none)", empty=True,
        pattern=r"^$|^[A-Za-z_][A-Za-z0-9_]*$", keep_case=True)
    verifyTls: bool = _setting(
        True, "Check a remote `https://` server's certificate; off only for a test server.",
        "true or false")
    caBundle: str = _setting(
        "", "A CA bundle file (PEM) to check the remote server's certificate against, for a "
        "private CA.",
        "a file path (empty: the system's CAs)", empty=True)
    connectTimeoutMs: int = _setting(
        3000, "Longest wait to connect to the remote server.", "integer 100-60000", min=100, max=60000)
    readTimeoutMs: int = _setting(
        30000, "Longest wait for the next part of a remote answer.", "integer 100-600000",
        min=100, max=600000)

    def to_dict(self) -> dict[str, Any]:
        return _shown_dict(self)


@dataclass(frozen=True)
class Options:
    """Server options: set on the server's command line, by benchmarks and tests, never by an
    editor (module docstring)."""

    kvReuse: bool = _setting(
        True, "Keep the models' KV caches between requests, so a keystroke recomputes only the "
        "changed end of the prompt; off only to measure what reuse saves.", "true or false")
    promptLookup: bool = _setting(
        True, "Draft from the text itself too (the prompt, recent completions, the whole document "
        "and the other open documents) beside a draft model; the policy uses whichever pays. Off "
        "only to measure the draft model alone.", "true or false")
    lookupDocuments: bool = _setting(
        True, "Prompt lookup reads the whole document and the other open documents too, not only "
        "the prompt and recent completions (their text tokenized in blocks of lines when a "
        "document opens, while the server is idle, and cached, so a keystroke re-reads one "
        "block); off only to measure what that brings.", "true or false")
    datastore: str = _setting(
        "auto", "The target's own answers that prompt lookup drafts from too (a table made by "
        "`python -m training.datastore`): `auto` (the target directory's `datastore.npz`, shipped "
        "with the default pair), `none`, or a file path.", "`auto`, `none` or a file path")
    stopWhileDecoding: bool = _setting(
        True, "Stop decoding the moment the answer is decided (its last line is complete, a line "
        "dedents, repeats the code below or loops), so a multi-line answer costs only what is "
        "shown; off only to measure what this saves (the text shown is the same).", "true or false")
    cudaGraphs: bool = _setting(
        False, "Run the local models' forward passes as replayed CUDA graphs (the lean forward at "
        "fixed shapes, each captured on its first call), which cuts the per-step launch overhead "
        "on a GPU. CUDA only: on another device the server says so and runs them as usual.",
        "true or false")
    fimLayout: str = _setting(
        "auto", "Order of prefix and suffix in the prompt: PSM (prefix first), SPM (suffix "
        "first: typing only appends, so the KV cache stays valid), or PSM-LINE (PSM whose middle "
        "begins with the cursor line's text: typing within a line only appends); `auto`: SPM "
        "where the model family was trained on it, else PSM-LINE.",
        f"`auto`, {_quoted(LAYOUTS)}", choices=("auto", *LAYOUTS))
    draftFimTemplate: str = _setting(
        "auto", "The draft model's own prompt format (it may be another family than the target's).",
        f"`auto`, {_quoted(FIM_TEMPLATES)}", choices=("auto", *FIM_TEMPLATES))
    draftPromptTokens: Any = _setting(
        "auto", "Tokens of the draft model's prompt (its own tokens): the text nearest the cursor "
        "within the target's window. `auto`: what the draft's config.json recommends "
        "(`specfill_draft_prompt_tokens`), else the whole window. Decoding stays lossless at any "
        "value; `python -m bench.draft_window` compares values for a pair.",
        "`auto` or an integer 16-32768", **_keyword_or_integer("auto", 16, 32768))
    extraContextFrom: str = _setting(
        "open", "Where the context from other documents comes from (newest first within "
        "`extraTokens`): `open` (a document's top when opened), `edits` (around its latest edit), "
        "`yanks` (text yanked, Neovim), `visits` (around the line a file was left at, and in Neovim "
        "where the cursor rested). `python -m bench.context_sources` compares them.",
        "comma-separated `open`, `edits`, `yanks`, `visits`",
        pattern=r"^(open|edits|yanks|visits)(,(open|edits|yanks|visits))*$")
    debounceMs: int = _setting(
        0, "Wait after a request before decoding starts; a newer request for the same document "
        "during the wait replaces it. Editors debounce themselves and a superseded decode stops "
        "within one step, so 0 (answer at once); tests hold a request on the server with it.",
        "integer 0-5000", min=0, max=5000)
    maxDocumentChars: int = _setting(
        2_000_000, "Documents longer than this (characters) get no completions and are not kept "
        "in memory.", f"integer 1000-{MAX_DOCUMENT_CHARS}", min=1000, max=MAX_DOCUMENT_CHARS)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Settings:
    """specfill settings; field names are the camelCase names editors use. `options` are the
    server's options (not a setting: see `Options`)."""

    enable: bool = _setting(True, "Offer completions at all.", "true or false")
    targetModel: str = _setting(
        "default", "The model whose output you get: `default` (the shipped pair), a Hugging Face "
        "hub id (must already be in the local cache), a local directory, or the `http(s)://` URL "
        "of a server that runs it (llama.cpp, vLLM, TGI, Ollama; see `remote`).",
        "`default`, hub id, local path or URL")
    draftModel: str = _setting(
        "default", "The small model that proposes tokens for the target to verify: `default`, a "
        "hub id, a local directory, `ngram` (prompt lookup, no model) or `none` (plain decoding).",
        "`default`, hub id, local path, `ngram`, `none`")
    draftLength: Any = _setting(
        "auto", "Tokens drafted per target call; `auto` picks, each round, the drafter (prompt "
        "lookup, the draft model or none) and the length that give the most tokens per "
        "millisecond, from acceptance and costs it measures as it goes.",
        f"`auto` or an integer 1-{MAX_DRAFT_LENGTH}", **_keyword_or_integer("auto", 1, MAX_DRAFT_LENGTH))
    maxNewTokens: int = _setting(64, "Most tokens generated for one completion.",
                                 "integer 1-1024", min=1, max=1024)
    maxLines: int = _setting(8, "Most lines in one multi-line completion.",
                             "integer 1-200", min=1, max=200)
    multiline: str = _setting(
        "auto", "Multi-line completions: `auto` (one line when code follows the cursor), "
        "`always`, or `never` (stop at the end of the line).",
        "`auto`, `always`, `never`", choices=("auto", "always", "never"))
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
    fimTemplate: str = _setting(
        "auto", "Fill-in-the-middle prompt format; `auto` picks it from the target's tokenizer, "
        "`plain` completes from the prefix only.",
        f"`auto`, {_quoted(FIM_TEMPLATES)}", choices=("auto", *FIM_TEMPLATES))
    prefixTokens: int = _setting(1024, "Tokens of text before the cursor put in the prompt.",
                                 "integer 16-32768", min=16, max=32768)
    suffixTokens: int = _setting(256, "Tokens of text after the cursor put in the prompt.",
                                 "integer 0-32768", min=0, max=32768)
    extraTokens: int = _setting(
        256, "Tokens of context taken from other open documents; 0 turns it off.",
        "integer 0-32768", min=0, max=32768)
    timeBudgetMs: int = _setting(
        0, "Stop decoding after this many milliseconds and show what is ready; 0 = no limit.",
        "integer 0-60000", min=0, max=60000)
    maxCacheTokens: int = _setting(
        8192, "KV cache budget, in tokens, of each local model's sessions (one per open document) "
        "together: the longest prompt plus completion, and all that is kept between requests; "
        "the least recently used document's cache goes first. Memory: this many tokens times the "
        "model's KV bytes per token (Qwen2.5-Coder-0.5B in bfloat16: 12 KB; CodeLlama-7B: 512 KB).",
        "integer 256-131072", min=256, max=131072)
    trustRemoteCode: bool = _setting(
        False, "Allow model repositories to run their own Python code when loading. Off unless "
        "you trust the model's source.", "true or false")
    prefetch: bool = _setting(
        True, "Once a suggestion is shown, compute the next one in the background as if it were "
        "accepted, so accepting shows the following suggestion from the cache. It runs only while "
        "no request needs the models; a request anywhere else stops it at once.", "true or false")
    nextEdit: str = _setting(
        "off", "Next-edit suggestions: a model that reads your recent edits and the lines around the "
        "cursor and suggests the edit you make next (the editors ask after a change settles). `off`; "
        "`demo` (the shipped demo target, which shows the mechanics but cannot predict edits); a local "
        "model directory (a Zeta or sweep-next-edit checkpoint); or the `http(s)://` URL of an "
        "OpenAI-compatible server that runs one (`/v1/completions`, reached as `remote` says).",
        "`off`, `demo`, local path or URL")
    nextEditFormat: str = _setting(
        "auto", "The edit model's prompt format: `zeta` (Zed's Zeta), `sweep` (sweep-next-edit), or `auto` "
        "(from the model's name or path, else zeta; the demo's own copy format for `demo`).",
        f"`auto`, {_quoted(EDIT_FORMATS)}", choices=("auto", *EDIT_FORMATS))
    remote: Remote = field(default_factory=Remote)     # one object: `remote: {backend, apiKey, ...}`
    options: Options = field(default_factory=Options)  # not a setting: the server's command line

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The settings as an editor writes them (`remote` nested, a secret shown as set); the
        options apart (`options.to_dict()`)."""
        d = {name: getattr(self, name) for name in FIELDS}
        d["remote"] = self.remote.to_dict()
        return d

    def model_key(self) -> tuple:
        """What identifies the loaded models: a change here means a reload."""
        return tuple(getattr(self, k) for k in MODEL_KEYS)


def _shown_dict(table) -> dict[str, Any]:
    d = dataclasses.asdict(table)
    for f in dataclasses.fields(table):
        if f.metadata.get("secret") and d[f.name]:
            d[f.name] = SECRET_SHOWN_AS
    return d


def _table(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


FIELDS = {name: f for name, f in _table(Settings).items() if name not in ("remote", "options")}
"""The plain settings (each one value), by name."""
REMOTE_FIELDS = _table(Remote)
OPTION_FIELDS = _table(Options)
NESTED = {"remote": REMOTE_FIELDS}
"""The settings that are an object of their own fields."""
SETTING_NAMES = (*FIELDS, "remote")
"""The keys of an editor's `specfill` section, in order."""

MODEL_KEYS = ("targetModel", "draftModel", "device", "dtype", "quantize", "trustRemoteCode",
              "maxCacheTokens", "remote", "options")
"""Settings whose change needs the models reloaded (the others apply to the next request)."""

# Client-side keys in the same section: vscode-languageclient's `specfill.trace.server` and the
# VS Code extension's `specfill.server.command/args` and `specfill.trigger`.
IGNORED_KEYS = {"trace", "server", "trigger"}


def shown_name(name: str) -> str:
    """How a message names a setting (`specfill.remote.apiKey`) or an option (`option kvReuse`)."""
    if name in OPTION_FIELDS:
        return f"option {name}"
    return f"specfill.{name}"


# ------------------------------------------------------------------------------- one value

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


def _check_value(f: dataclasses.Field, name: str, value: Any) -> Any:
    """`value` checked against field `f` and made what the field holds; `name` is how messages
    name it (`remote.readTimeoutMs`)."""
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
    if f.name == "datastore":   # a path keeps its case; the file is checked when the models load
        return keyword_or_path(value, ("auto", "none"))
    if f.name == "nextEdit":    # a path or URL keeps its case; the model is checked when it loads
        return keyword_or_path(value, ("off", "demo"))
    if f.name in ("targetModel", "draftModel"):
        low = value.lower()
        if low in ("default", "ngram", "none"):
            if f.name == "targetModel" and low in ("ngram", "none"):
                raise SettingsError(name, value, "`default`, hub id, local path or URL")
            return low
        if f.name == "draftModel" and low.startswith(("http://", "https://")):
            raise SettingsError(name, value, "`default`, hub id, local path, `ngram`, `none` "
                                             "(a remote server runs its own drafting)")
    return value


# ------------------------------------------------------------------ an editor's section

def _nested(raw: dict) -> dict:
    """`raw` with dotted keys (`remote.apiKey`, as VS Code names its settings) put into their
    object (`remote: {apiKey}`); a dotted key wins over the same key in the object."""
    out: dict = {}
    for name, value in raw.items():
        outer, dot, inner = name.partition(".") if isinstance(name, str) else (name, "", "")
        if dot and outer in NESTED:
            base = out.get(outer)
            out[outer] = {**(base if isinstance(base, dict) else {}), inner: value}
        elif name in NESTED and isinstance(out.get(name), dict) and isinstance(value, dict):
            out[name] = {**value, **out[name]}
        else:
            out[name] = value
    return out


def _apply_nested(name: str, value: Any, previous, errors: list[SettingsError] | None):
    """The `remote` object `previous` with the object `value` applied (keys left out keep their
    value; `null` is the default). Bad values raise, or with `errors` are collected there and keep
    their previous value. Unknown keys are skipped (`unknown_keys` names them)."""
    fields = NESTED[name]
    if value is None:
        return type(previous)()
    if not isinstance(value, dict):
        err = SettingsError(name, value, f"an object of {', '.join(f'`{k}`' for k in fields)}")
        if errors is None:
            raise err
        errors.append(err)
        return previous
    changes = {}
    for key, v in value.items():
        if key not in fields:
            continue
        try:
            changes[key] = fields[key].default if v is None else _check_value(fields[key], f"{name}.{key}", v)
        except SettingsError as exc:
            if errors is None:
                raise
            errors.append(exc)
    return dataclasses.replace(previous, **changes)


def _parse_section(raw: Any, previous: Settings, errors: list[SettingsError] | None) -> Settings:
    if raw is None:
        return previous
    if not isinstance(raw, dict):
        err = SettingsError("<section>", raw, "an object of specfill settings")
        if errors is None:
            raise err
        errors.append(err)
        return previous
    changes: dict[str, Any] = {}
    for name, value in _nested(raw).items():
        if name in NESTED:
            changes[name] = _apply_nested(name, value, getattr(previous, name), errors)
        elif name in FIELDS:
            try:
                changes[name] = FIELDS[name].default if value is None else _check_value(FIELDS[name], name, value)
            except SettingsError as exc:
                if errors is None:
                    raise
                errors.append(exc)
    return previous.replace(**changes)


def parse_settings(raw: dict | None, previous: Settings) -> Settings:
    """`previous` with the values in `raw` (a `specfill` section) applied.

    Keys not in `raw` keep their previous value; a `null` value resets that setting to its
    default. Unknown keys are ignored (see `unknown_keys`), and so are options, which an editor
    does not set. Raises SettingsError naming the first invalid value; nothing is applied then.
    """
    return _parse_section(raw, previous, None)


def parse_settings_leniently(raw: dict | None, previous: Settings) -> tuple[Settings, list[SettingsError]]:
    """`parse_settings` for a section from an editor: the valid values apply, an invalid one
    keeps its previous value and is returned, so one mistake does not undo the user's other
    settings (their models, say). A section that is not an object changes nothing."""
    errors: list[SettingsError] = []
    return _parse_section(raw, previous, errors), errors


def unknown_keys(raw: dict | None) -> list[str]:
    """The keys of an editor's section that are no setting (nested ones as `remote.key`)."""
    if not isinstance(raw, dict):
        return []
    unknown = []
    for name, value in _nested(raw).items():
        if name in NESTED:
            if isinstance(value, dict):
                unknown += [f"{name}.{k}" for k in value if k not in NESTED[name]]
        elif name not in FIELDS and name not in IGNORED_KEYS:
            unknown.append(name)
    return sorted(unknown)


# ---------------------------------------------------------------- options and command lines

def parse_options(raw: dict, previous: Options | None = None) -> Options:
    """`previous` (by default the defaults) with the options in `raw` applied; `null` resets one.
    Raises SettingsError for an unknown option or a bad value."""
    previous = Options() if previous is None else previous
    changes = {}
    for name, value in raw.items():
        if name not in OPTION_FIELDS:
            raise SettingsError(name, value, "an option name", unknown_option(name))
        changes[name] = OPTION_FIELDS[name].default if value is None else _check_value(OPTION_FIELDS[name], name, value)
    return dataclasses.replace(previous, **changes)


def split_options(values: dict) -> tuple[dict, dict]:
    """A dict of settings and options, as `--set` gives them or bench/ writes them, parted into
    (the `specfill` section an editor would send, the server's options)."""
    section = {k: v for k, v in values.items() if k not in OPTION_FIELDS}
    return section, {k: v for k, v in values.items() if k in OPTION_FIELDS}


def settings_from(values: dict, previous: Settings | None = None) -> Settings:
    """Settings and options from one dict (`split_options`), for the command line tools, bench/
    and tests; raises SettingsError for a bad value or an unknown name."""
    previous = Settings() if previous is None else previous
    section, options = split_options(values)
    unknown = unknown_keys(section)
    if unknown:
        raise SettingsError(unknown[0], section.get(unknown[0]), "a setting or option name",
                            unknown_setting(unknown[0], options=True))
    return parse_settings(section, previous).replace(options=parse_options(options, previous.options))


def parse_assignment(item: str, options_only: bool = False) -> tuple[str, Any]:
    """One `NAME=VALUE` from a command line (`--set maxNewTokens=32`, `--set remote.readTimeoutMs=500`,
    `--set kvReuse=false`): the name and its validated value. With `options_only`, only an option
    (`specfill serve --option`). Raises SettingsError for an unknown name or a bad value."""
    name, eq, value = item.partition("=")
    name = name.strip()
    if not eq or not name:
        raise SettingsError(item, item, "NAME=VALUE", f"expected NAME=VALUE, got {item!r}")
    if name in OPTION_FIELDS:
        return name, _check_value(OPTION_FIELDS[name], name, value)
    if options_only:
        raise SettingsError(name, item, "an option name", unknown_option(name))
    outer, dot, inner = name.partition(".")
    if dot and outer in NESTED and inner in NESTED[outer]:
        return name, _check_value(NESTED[outer][inner], name, value)
    if name not in FIELDS:
        raise SettingsError(name, item, "a setting name", unknown_setting(name, options=True))
    return name, _check_value(FIELDS[name], name, value)


# ------------------------------------------------------------------------ names not known

def _nested_names() -> list[str]:
    return [f"{outer}.{inner}" for outer, fields in NESTED.items() for inner in fields]


def _closest(name: str, known) -> str | None:
    known = list(known)
    if name in known:
        return name
    by_lower = {k.lower(): k for k in known}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    close = difflib.get_close_matches(name.lower(), by_lower, n=1)
    return by_lower[close[0]] if close else None


def closest_setting(name: str, options: bool = False) -> str | None:
    """The known setting `name` is most likely a misspelling of (None: none is close); with
    `options`, an option too. Case is ignored (`maxnewtokens`), and so is a `specfill.` prefix
    written in front of it. A nested name is matched within its object (`remote.apikey`)."""
    bare = name.removeprefix("specfill.")
    outer, dot, inner = bare.partition(".")
    if dot and outer in NESTED:
        close = _closest(inner, NESTED[outer])
        return f"{outer}.{close}" if close else None
    return _closest(bare, [*SETTING_NAMES, *_nested_names(), *(OPTION_FIELDS if options else ())])


def removed_setting(name: str) -> str | None:
    """One line for a name that is no editor setting any more (None: it never was one): a remote
    connection's field, now inside `remote`, or a server option."""
    bare = name.removeprefix("specfill.")
    if bare in REMOTE_FIELDS:
        return f"specfill.{bare} is no longer a setting: it is specfill.remote.{bare}"
    if bare in OPTION_FIELDS:
        return (f"specfill.{bare} is no longer a setting: it is a server option "
                f"({OPTION_FLAG} {bare}=VALUE)")
    return None


def unknown_setting(name: str, list_known: bool = True, options: bool = False) -> str:
    """The one line that names an unknown setting and the known one it is closest to, for the
    command line and the editors alike; a setting that moved says where to. When none is close:
    every known name (`list_known`, the command line), or where the list is (an editor's notice,
    which must stay one line). `options`: a command line that takes options too."""
    moved = removed_setting(name)
    if moved and not (options and name in OPTION_FIELDS):
        return moved
    close = closest_setting(name, options)
    if close:
        hint = f"did you mean {close}?"
    elif list_known:
        hint = f"known: {', '.join([*FIELDS, *_nested_names()])}"
    else:
        hint = "python -m lsp.settings --markdown lists the known ones"
    return f"unknown setting {name!r} ({hint})"


def unknown_option(name: str) -> str:
    """The one line for an unknown server option (a setting given as one says so)."""
    if name in FIELDS or name in NESTED or closest_setting(name) == name:
        return f"{name} is a setting, not a server option (an editor sets it)"
    close = _closest(name, OPTION_FIELDS)
    hint = f"did you mean {close}?" if close else f"known: {', '.join(OPTION_FIELDS)}"
    return f"unknown option {name!r} ({hint})"


def document_too_large(chars: int, limit: int) -> str | None:
    """Why a document of `chars` characters gets no completions under the `maxDocumentChars`
    option `limit` (None: it is not too large); the server and `specfill complete` say the same."""
    if chars <= limit:
        return None
    return (f"{chars} characters, over maxDocumentChars ({limit}); no completions for it "
            f"(a server option, up to {OPTION_FIELDS['maxDocumentChars'].metadata['max']}: "
            f"{OPTION_FLAG} maxDocumentChars=N)")


# ------------------------------------------------------------------------ the tables as data

def _entry(name: str, f: dataclasses.Field) -> dict[str, Any]:
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
    entry = {"name": name, "type": type_, "default": f.default,
             "allowed": meta["allowed"], "description": meta["description"]}
    for k in ("min", "max"):
        if k in meta:
            entry[k] = meta[k]
    if "choices" in meta:
        entry["enum"] = list(meta["choices"])
    if "pattern" in meta:
        entry["pattern"] = meta["pattern"]
    if meta.get("secret"):
        entry["secret"] = True
    return entry


def schema() -> list[dict[str, Any]]:
    """One entry per setting, nested ones by their dotted name (`remote.apiKey`): name, type,
    default, allowed values, description (and bounds, choices, pattern)."""
    out = []
    for f in dataclasses.fields(Settings):
        if f.name in NESTED:
            out += [_entry(f"{f.name}.{name}", inner) for name, inner in NESTED[f.name].items()]
        elif f.name in FIELDS:
            out.append(_entry(f.name, f))
    return out


def options_schema() -> list[dict[str, Any]]:
    """`schema()` for the server options."""
    return [_entry(name, f) for name, f in OPTION_FIELDS.items()]


def _markdown(entries: list[dict[str, Any]], head: str) -> str:
    rows = [f"| {head} | Default | Allowed | Description |", "|---|---|---|---|"]
    for e in entries:
        rows.append(f"| `{e['name']}` | `{json.dumps(e['default'])}` | {e['allowed']} | "
                    f"{e['description']} |")
    return "\n".join(rows)


def markdown_table() -> str:
    return _markdown(schema(), "Setting")


def options_markdown_table() -> str:
    return _markdown(options_schema(), "Option")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--markdown"]:
        print(markdown_table())
    elif argv[:1] == ["--options"]:
        print(options_markdown_table())
    else:  # --schema (default)
        print(json.dumps(schema(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
