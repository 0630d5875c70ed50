"""Prompt formats of edit models, one table entry each (as completion/templates.py's FIM families).

An edit model reads the user's recent edits and the region around the cursor, and writes the
region again as it expects it to be after the user's next edit (completion/next_edit.py parses
that rewrite into an edit). An entry's `prompt` is the whole prompt with `{fields}`:

* `{edits}`: the recent edits, each written by `edit` (`{path}`, `{diff}`: a unified-diff hunk,
  `{old}` / `{new}`: the lines it removed and added), oldest first, joined by `edits_joiner`;
* `{path}`: the document's path as a prompt names files (the last two parts of its URI);
* `{region}`: the region's lines (no line break after the last), with `cursor` at the cursor
  where the format marks it; `{original}`: the region before the document's latest edit group;
* `{before}` / `{after}`: `context` lines above and below the region (each line ended by a line
  break / each begun by one); `{file_start}`: `file_start` where the excerpt starts the file.

The model's answer ends at one of `stops` (tokens), at `end` (text, then the answer must hold it),
or, for `by_lines`, after as many lines as the region has. Spellings in `sentinels` are written
as the model's one special token where its tokenizer has them (else as text); the user's text is
always encoded as text, so a sentinel typed in a document stays text. A remote server gets the
prompt as text, sentinels spelled out, and tokenizes it itself.

Formats:

* zeta (Zed's Zeta, Qwen2.5-Coder-7B fine-tuned): confirmed from Zed's sources (its zeta1
  prompt): the instruction, `### User Edits:` with `User edited "path":` and a fenced unified
  diff per edit (oldest first, joined by a blank line), `### User Excerpt:` with the fenced
  excerpt holding `<|editable_region_start|>`, `<|user_cursor_is_here|>` and
  `<|editable_region_end|>` (and `<|start_of_file|>` at the file's start), then `### Response:`.
  Not confirmed: Zed's answers repeat the excerpt's head (the fence and the lines above the
  region) before the region; here that head is written at the start of the response in the
  prompt, so the model's answer begins with the region itself and ends at
  `<|editable_region_end|>`. The context shown around the region (5 lines) is this server's
  choice, and so is the window (10 lines above and below the cursor).
* sweep (sweep-next-edit, Qwen2.5-Coder based): the `<|file_sep|>` layout as llama.vim-style
  clients and published examples write it: each recent edit as `<|file_sep|>{path}.diff` with
  `original:` and `updated:` lines, then `<|file_sep|>original/{path}` (the window before the
  latest change), `<|file_sep|>current/{path}` (the window now) and `<|file_sep|>updated/{path}`,
  after which the model writes the updated window and ends with `<|file_sep|>` or
  `<|endoftext|>`. Not confirmed from Sweep's own code: whether a line break follows the
  `updated/{path}` line in training (written here), whether the diffs carry context lines (none
  here), and the window size (10 lines above and below the cursor here). No cursor marker.
* copy (the demo, `nextEdit: demo`): the shipped demo target cannot predict edits and does not
  even copy text reliably; it is given the region and a blank line, and its next lines, as many
  as the region has, are read as the region rewritten. It shows the mechanics (the request, the
  parse, the minimal edit, the editors' display); its suggestions mean nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

FORMAT_NAMES = ("zeta", "sweep")          # what the nextEditFormat setting names (besides auto)

ZETA_INSTRUCTION = ("You are a code completion assistant and your task is to analyze user edits and then "
                    "rewrite an excerpt that the user provides, suggesting the appropriate edits within the "
                    "excerpt, taking into account the cursor location.")


@dataclass(frozen=True)
class EditFormat:
    name: str
    prompt: str                        # the prompt with its {fields} (module docstring)
    edit: str = ""                     # one recent edit
    edits_joiner: str = ""
    sentinels: tuple[str, ...] = ()    # written as one token where the tokenizer has it
    stops: tuple[str, ...] = ()        # tokens that end the answer (besides the tokenizer's end token)
    end: str | None = None             # text that ends the rewrite in the answer
    start: str | None = None           # text before the rewrite, where the answer repeats it
    cursor: str = ""                   # the cursor's mark in {region}
    file_start: str = ""               # {file_start} where the excerpt begins at the file's start
    above: int = 10                    # the region: lines above and below the cursor's line
    below: int = 10
    context: int = 0                   # lines shown above and below the region
    by_lines: bool = False             # the answer is as many lines as the region has
    history: bool = True               # the prompt shows recent edits (none: no edits needed)


ZETA_START, ZETA_CURSOR, ZETA_END = "<|editable_region_start|>", "<|user_cursor_is_here|>", "<|editable_region_end|>"

FORMATS: dict[str, EditFormat] = {
    "zeta": EditFormat(
        "zeta",
        prompt=("### Instruction:\n" + ZETA_INSTRUCTION + "\n\n### User Edits:\n\n{edits}\n\n### User Excerpt:\n\n"
                "```{path}\n{file_start}{before}" + ZETA_START + "\n{region}\n" + ZETA_END + "{after}\n```\n\n"
                "### Response:\n```{path}\n{file_start}{before}" + ZETA_START + "\n"),
        edit='User edited "{path}":\n```diff\n{diff}```', edits_joiner="\n\n",
        stops=("<|endoftext|>",), end="\n" + ZETA_END, start=ZETA_START + "\n", cursor=ZETA_CURSOR,
        file_start="<|start_of_file|>\n", context=5),
    "sweep": EditFormat(
        "sweep",
        prompt=("{edits}<|file_sep|>original/{path}\n{original}\n<|file_sep|>current/{path}\n{region}\n"
                "<|file_sep|>updated/{path}\n"),
        edit="<|file_sep|>{path}.diff\noriginal:\n{old}\nupdated:\n{new}\n",
        sentinels=("<|file_sep|>",), stops=("<|file_sep|>", "<|endoftext|>")),
    "copy": EditFormat("copy", prompt="{region}\n\n", above=2, below=2, by_lines=True, history=False),
}

_FIELD = re.compile(r"\{(\w+)\}")

# How a served or local model's name tells its format (`nextEditFormat: auto`).
NAME_PATTERNS = ((r"^demo$", "copy"), (r"sweep", "sweep"), (r"zeta", "zeta"))


def format_for(setting: str, model_name: str) -> EditFormat:
    """The entry for a `nextEditFormat` setting: a named one, or (`auto`) the one the model's
    name or path names (`demo`, the shipped demo target: copy), else zeta."""
    if setting in FORMATS:
        return FORMATS[setting]
    low = (model_name or "").lower()
    for pattern, name in NAME_PATTERNS:
        if re.search(pattern, low):
            return FORMATS[name]
    return FORMATS["zeta"]


Segment = tuple[bool, str]    # (is a sentinel, text)


def render(template: str, fields: dict[str, str | list[Segment]], sentinels: tuple[str, ...]) -> list[Segment]:
    """`template` with its fields filled in, as segments: the template's own text cut at its
    sentinels; a field's value is text (a str) or segments already rendered (a list). Adjacent
    text is joined."""
    out: list[Segment] = []
    pos = 0
    for m in _FIELD.finditer(template):
        out += _cut(template[pos:m.start()], sentinels)
        value = fields[m.group(1)]
        out += [(False, value)] if isinstance(value, str) else value
        pos = m.end()
    out += _cut(template[pos:], sentinels)
    joined: list[Segment] = []
    for special, text in out:
        if not text:
            continue
        if joined and not special and not joined[-1][0]:
            joined[-1] = (False, joined[-1][1] + text)
        else:
            joined.append((special, text))
    return joined


def _cut(text: str, sentinels: tuple[str, ...]) -> list[Segment]:
    if not sentinels or not text:
        return [(False, text)]
    pattern = "(" + "|".join(re.escape(s) for s in sentinels) + ")"
    return [(i % 2 == 1, part) for i, part in enumerate(re.split(pattern, text)) if part]


def as_text(segments: list[Segment]) -> str:
    return "".join(text for _, text in segments)
