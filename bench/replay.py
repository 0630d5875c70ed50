"""Keystroke-replay latency benchmark: type real source files into the real language server
over stdio, as an editor would, and time every inline completion; then run transformers
`generate()` (with and without `assistant_model`) on the very prompts the server built.

    specfill bench [--files DIR] [--target default --draft default] [--out bench/results]
    python -m bench.replay --help
    python -m bench.replay --append     # type each file's last lines at its end: multi-line answers
    specfill bench --suite [--quick]    # every workload, draft configurations side by side (bench/suite.py)

Where the typing happens (bench/keystrokes.py): by default a block of lines in the middle of each
file, so code always stands right of the cursor and answers are one line; with --append the file's
last lines (a whole function or two) typed back at its end, nothing after the cursor, so the server's
`multiline: auto` answers several lines at fresh indented lines and at ends of lines.

Configurations (all on the same keystrokes; the server configurations run at once, each in its own
server, every keystroke and request going to each in turn, so machine load hits them alike):
  full         specfill as shipped: draft model + prompt lookup under the cost-aware policy,
               KV reuse, completion cache
  no-draft     draftModel none (plain decoding in the engine, still KV reuse + cache)
  no-kv-reuse  kvReuse false (every request prefills its whole prompt; cache still on)
  ngram        draftModel ngram (prompt lookup only)
  draft        the draft model alone (no prompt lookup)
  hf-assisted  transformers generate(assistant_model=draft), re-run for every request
  hf-plain     transformers generate(), re-run for every request
Writes results.md (table, goals, where the time goes), results.json (every request) and
latency.png to the output folder.
"""
from __future__ import annotations

import asyncio
import json
import os
import platform
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import report
from bench.common import (DEFAULT_OUT, DRAFT_CONFIGS, CallCounter, add_file_options, add_model_options,
                          add_set_option, bench_parser, close_all, rotated, server_env, start_servers, usage_error)
from bench.keystrokes import (EDITOR_DEBOUNCE_MS, END, MIDDLE, TypingScript, apply, cursor_after, typing_script,
                              utf16_column)
from bench.lsp_client import LspClient
from engine.remote import is_remote
from lsp import commands
from lsp.arguments import number

SERVER_CONFIGS = {
    "full": DRAFT_CONFIGS["default"],
    "no-draft": DRAFT_CONFIGS["no-draft"],
    "no-kv-reuse": {"kvReuse": False},
    "ngram": DRAFT_CONFIGS["ngram"],
    "draft": DRAFT_CONFIGS["draft"],
}
HF_CONFIGS = ("hf-assisted", "hf-plain")
ALL_CONFIGS = (*SERVER_CONFIGS, *HF_CONFIGS)


class UsageError(Exception):
    """A bad command line, found after parsing (one line on stderr, exit code 2)."""


# ------------------------------------------------------------------------------ the keystrokes

def load_scripts(files_dir: Path, typed_lines: int, seed: int, max_files: int,
                 editor_debounce_ms: float, where: str = MIDDLE) -> list[TypingScript]:
    """The typing of each file (`where`: a block in the MIDDLE, or its last lines at the END)."""
    paths = python_files(files_dir)[:max_files]
    return [typing_script(p.name, p.read_text(encoding="utf-8"), typed_lines, seed, editor_debounce_ms, where)
            for p in paths]


def python_files(folder: Path) -> list[Path]:
    """The .py files in `folder`, sorted by name (UsageError when there are none)."""
    try:
        paths = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".py")
    except OSError as exc:
        raise UsageError(f"--files: cannot read {folder}: {exc.strerror}") from None
    if not paths:
        raise UsageError(f"--files: no .py files in {folder}")
    return paths


def request_points(script: TypingScript):
    """(keystroke index, document text, cursor line, cursor codepoint column) at every request."""
    lines = script.initial_text.split("\n")
    for i, key in enumerate(script.keystrokes):
        lines = apply(lines, key)
        if key.request:
            line, col = cursor_after(key)
            yield i, "\n".join(lines), line, col


def file_uri(script: TypingScript) -> str:
    return f"file:///bench/{script.name}"


# ------------------------------------------------------------------------------ through the server

async def replay_servers(settings: dict[str, dict], scripts: list[TypingScript], time_scale: float,
                         editor_debounce_ms: float, out_dir: Path, env: dict) -> list[dict]:
    """Every server configuration at once, each in its own server, fed the same keystrokes."""
    clients = await start_servers(settings, env, out_dir / "logs")
    try:
        return await replay_interleaved(clients, scripts, time_scale, editor_debounce_ms)
    finally:
        await close_all(clients)


@dataclass
class _Seen:
    """What a server reports after a request: its decode jobs, the last one and its last model
    run; against the same before the request, they tell the request's own job and run apart
    (a cache hit runs no model)."""
    jobs: int
    last_job: dict
    last_run: dict | None


async def _seen(client: LspClient) -> _Seen:
    server = (await client.execute(commands.STATS))["server"]
    return _Seen(server["decode_jobs"], server["last_job"], await client.execute(commands.LAST_COMPLETION))


async def replay_interleaved(clients: dict[str, LspClient], scripts: list[TypingScript], time_scale: float,
                             editor_debounce_ms: float) -> list[dict]:
    """Type `scripts` into every server alike: each keystroke goes to all of them, and at each
    request every server is asked in turn (who goes first rotates), so a busy machine slows all
    configurations alike."""
    records: list[dict] = []
    names = list(clients)
    n_requests = 0
    for script in scripts:
        uri = file_uri(script)
        for client in clients.values():
            await client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 0, "text": script.initial_text}})
        seen = {name: await _seen(client) for name, client in clients.items()}
        lines = script.initial_text.split("\n")
        for version, key in enumerate(script.keystrokes, start=1):
            pos = {"line": key.line, "character": utf16_column(lines[key.line], key.character)}
            for client in clients.values():
                await client.notify("textDocument/didChange", {
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"range": {"start": pos, "end": pos}, "text": key.text}]})
            lines = apply(lines, key)
            if key.request:
                line, col = cursor_after(key)
                position = {"line": line, "character": utf16_column(lines[line], col)}
                for name in rotated(names, n_requests):
                    records.append(await _request(clients[name], name, seen, uri, position, script, version - 1,
                                                  line, col, key, editor_debounce_ms))
                n_requests += 1
            if time_scale > 0:
                await asyncio.sleep(key.gap_ms * time_scale / 1000)
        for client in clients.values():
            await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return records


async def _request(client: LspClient, config: str, seen: dict[str, _Seen], uri: str, position: dict,
                   script: TypingScript, keystroke: int, line: int, col: int, key,
                   editor_debounce_ms: float) -> dict:
    result, ms = await client.timed_request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": position, "context": {"triggerKind": 2}})
    # Per-request figures: the worker job (time, cache hit) and the model run, if any.
    before, now = seen[config], await _seen(client)
    seen[config] = now
    items = (result or {}).get("items", []) if isinstance(result, dict) else (result or [])
    return report.server_record(
        config, script.name, keystroke, line, col, key.request, key.gap_ms - editor_debounce_ms, ms,
        items[0]["insertText"] if items else "", now.last_job if now.jobs > before.jobs else {},
        now.last_run if now.last_run and now.last_run != before.last_run else {})


# ------------------------------------------------------------------------------ transformers generate()

class _Captured(Exception):
    def __init__(self, target_ids, draft_ids, settings, stop_ids, stop_check):
        super().__init__("prompt captured")
        self.target_ids, self.draft_ids, self.settings, self.stop_ids = target_ids, draft_ids, settings, stop_ids
        self.stop_check = stop_check

    def decided(self, text: str) -> bool:
        """The pipeline's own stop: its answer being decided."""
        return self.stop_check is not None and self.stop_check(text) is not None


class PromptCapture:
    """Stands in for the engine inside a CompletionPipeline: the pipeline builds the exact
    prompt, generation settings and stop ids the server would, and hands them to `generate`,
    which stops the pipeline there. Everything else is the real engine."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def decode(self, prompt, settings, cancel=None, stop_check=None):
        # the prompt's lookup texts (the documents prompt lookup reads) only guide the engine's
        # drafting: transformers generate() has no use for them
        p = prompt.tokens()
        raise _Captured(list(p.target_ids), p.draft_ids, settings, tuple(p.stop_ids), stop_check)


def capture_prompt(pipeline, request, options) -> _Captured:
    try:
        pipeline.complete(request, options)
    except _Captured as captured:
        return captured
    raise RuntimeError("the completion pipeline answered without asking the model")


def _stop_on_text_class():
    from transformers import StoppingCriteria

    class StopOnText(StoppingCriteria):
        """Stop once `decided(generated text)` says so (a newline, a decided answer)."""

        def __init__(self, tokenizer, prompt_len: int, decided):
            self.tokenizer, self.prompt_len, self.decided = tokenizer, prompt_len, decided

        def __call__(self, input_ids, scores, **kwargs):
            import torch

            text = self.tokenizer.decode(input_ids[0, self.prompt_len:].tolist())
            done = self.decided(text)
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    return StopOnText


def replay_transformers(configs: list[str], settings: dict, scripts: list[TypingScript],
                        editor_debounce_ms: float = EDITOR_DEBOUNCE_MS) -> list[dict]:
    import torch

    from completion.context import parse_document
    from completion.pipeline import CompletionPipeline
    from completion.postprocess import clean_completion
    from lsp import backend
    from lsp.settings import settings_from

    from transformers import StoppingCriteriaList

    StopOnText = _stop_on_text_class()
    parsed = settings_from(settings)
    loaded = backend.load_backend(parsed)
    engine = loaded.engine
    pipeline = CompletionPipeline(PromptCapture(engine))
    options = backend.completion_options(parsed)
    from bench.engine_vs_transformers import transformers_model

    target, tt = transformers_model(engine.target, "target")
    draft, dt = transformers_model(engine.draft, "draft") if engine.draft is not None else (None, None)
    counter = CallCounter(target)
    pad = tt.pad_token_id if tt.pad_token_id is not None else (tt.eos_token_id or 0)

    def generate(captured, assisted: bool) -> tuple[str, int]:
        gen = captured.settings
        kw = dict(max_new_tokens=gen.max_new_tokens, do_sample=False, pad_token_id=pad,
                  eos_token_id=list(captured.stop_ids) or None)
        if captured.stop_check is not None:
            # The pipeline's stops as a criterion (generate(stop_strings=...) fails with
            # assistant_model: the assistant gets the strings but no tokenizer).
            kw.update(stopping_criteria=StoppingCriteriaList([StopOnText(tt, len(captured.target_ids),
                                                                         captured.decided)]))
        if assisted:
            kw.update(assistant_model=draft)
            if dt.get_vocab() != tt.get_vocab():   # Universal Assisted Generation
                kw.update(tokenizer=tt, assistant_tokenizer=dt)
        x = torch.tensor([captured.target_ids], device=target.device)
        out = target.generate(x, attention_mask=torch.ones_like(x), **kw)
        new = out[0, x.shape[1]:].tolist()
        if new and new[-1] in captured.stop_ids:   # counted like the engine: stop token excluded
            new = new[:-1]
        return tt.decode(new, skip_special_tokens=True), len(new)

    def replay_one(config: str, assisted: bool) -> list:
        out, warmed = [], False
        for script in scripts:
            uri = file_uri(script)
            pipeline.note_document(uri, backend.encodable(script.initial_text))   # as didOpen does
            try:
                for index, text, line, col in request_points(script):
                    request = backend.completion_request(uri, text, line, col)
                    if not warmed:   # lazy initialisation is not what a user waits for each time
                        generate(capture_prompt(pipeline, request, options), assisted)
                        warmed = True
                    counter.calls = 0
                    t0 = time.perf_counter()
                    captured = capture_prompt(pipeline, request, options)
                    out_text, new_tokens = generate(captured, assisted)
                    cleaned = clean_completion(out_text, parse_document(text, line, col), options.multiline,
                                               options.max_lines, options.tab_size)
                    ms = (time.perf_counter() - t0) * 1000
                    key = script.keystrokes[index]
                    out.append(report.hf_record(
                        config, script.name, index, line, col, key.request,
                        key.gap_ms - editor_debounce_ms, ms, cleaned.text if cleaned else "", out_text,
                        new_tokens, counter.calls, len(captured.target_ids)))
            finally:
                pipeline.forget_document(uri)
        return out

    records = []
    for config in configs:
        assisted = config == "hf-assisted"
        if assisted and draft is None:
            print(f"specfill bench: skipping {config}: draft {settings.get('draftModel')!r} is not a model",
                  file=sys.stderr)
            continue
        try:
            records += replay_one(config, assisted)
        except RuntimeError as exc:   # e.g. assisted generation across two tokenizers in this transformers
            print(f"specfill bench: skipping {config}: transformers' generate failed: "
                  f"{str(exc).splitlines()[0]}", file=sys.stderr)
    counter.handle.remove()
    return records


# ------------------------------------------------------------------------------ CLI

PROG = "specfill bench"


def parse_args(argv):
    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--suite", action="store_true",
                    help="run the benchmark suite instead: every workload, draft configurations interleaved "
                         "(specfill bench --suite --help)")
    add_file_options(ap, "folder of .py files to type (default: bench/files, not in the default pair's training data)",
                     "type at most this many files (sorted by name)")
    ap.add_argument("--typed-lines", type=number(int, 1), default=12,
                    help="lines typed per file (a block in the middle; with --append the last lines, "
                         "widened to whole top-level functions)")
    ap.add_argument("--append", action="store_true",
                    help="type each file's last lines at its end (new code, nothing after the cursor: "
                         "multi-line answers) instead of a block in the middle")
    add_model_options(ap, "targetModel setting", "draftModel setting")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    add_set_option(ap, "any other server setting, e.g. --set maxNewTokens=32 (repeatable), as for `specfill complete`")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS),
                    help=f"comma-separated subset of {','.join(ALL_CONFIGS)}")
    ap.add_argument("--time-scale", type=number(float, 0), default=0.1,
                    help="real sleep per keystroke gap, as a fraction of the typist's gap (1 = real time; "
                         "the server only works when asked, so this only stretches the run)")
    ap.add_argument("--editor-debounce-ms", type=number(float, 0), default=EDITOR_DEBOUNCE_MS,
                    help="quiet time after a keystroke before the editor asks for a completion")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=number(int, 0), default=0,
                    help="torch threads for server and generate() (0 = the engine's auto policy)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench/results)")
    ap.add_argument("--machine", default="", help="words describing the machine, quoted in the report")
    return ap.parse_args(argv)


def chosen(names: str, known, what: str = "configuration") -> list[str]:
    """The comma-separated `names`, each one of `known` (else UsageError)."""
    picked = [c.strip() for c in names.split(",") if c.strip()]
    unknown = [c for c in picked if c not in known]
    if unknown or not picked:
        raise UsageError(f"unknown {what}(s) {', '.join(unknown) or repr(names)} (choose from {', '.join(known)})")
    return picked


def server_settings(target: str, draft: str, device: str = "auto", dtype: str = "auto",
                    assignments: list[str] = ()) -> dict:
    """The base server settings: the models, and any `--set NAME=VALUE`, a setting or a server
    option (checked as the server would)."""
    settings = {"targetModel": target, "draftModel": draft, "device": device, "dtype": dtype}
    from lsp.settings import SettingsError, parse_assignment   # the settings table loads torch

    try:
        settings.update(parse_assignment(item) for item in assignments)
    except SettingsError as exc:
        raise UsageError(f"--set: {exc}") from None
    return settings


def cpu_name() -> str:
    """The CPU's model name where Linux says it (figures differ by CPU maker and generation:
    the lean forward's matmul kernels are measured per machine for that reason), else the arch."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def target_is_real_sized(target: str) -> bool:
    """Whether the server's engine counts `target` real-sized (engine/forward/threads.py gives it the
    physical cores); False for a URL or a model whose weights are not on this machine."""
    from engine.load.checkpoint import checkpoint_numel
    from engine.load.models import ModelLoadError, local_folder, resolve_name
    from engine.forward.precision import real_sized

    try:
        folder = local_folder(resolve_name(target, "target"))
    except (ModelLoadError, ValueError):    # the demo pair missing; a URL is no hub id
        return False
    return folder is not None and real_sized(checkpoint_numel(folder))


def machine_description(words: str = "", remote: bool = False) -> str:
    """This machine, and the threads its engine computes with; for a remote target the server
    computes, with threads of its own, so no count of this process is given."""
    import torch

    threads = "a remote target (its server's threads)" if remote else f"{torch.get_num_threads()} threads"
    found = f"{os.cpu_count()} CPU cores ({cpu_name()}, {platform.machine()}), torch {torch.__version__}, {threads}"
    return f"{words}; {found}" if words else found


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--suite" in argv:
        from bench.suite import main as suite_main
        return suite_main([a for a in argv if a != "--suite"], prog=f"{PROG} --suite")
    args = parse_args(argv)
    try:
        return run(args, argv)
    except UsageError as exc:
        return usage_error(PROG, exc)


def run(args, argv: list[str]) -> int:
    configs = chosen(args.configs, ALL_CONFIGS)
    where = END if args.append else MIDDLE
    scripts = load_scripts(args.files, args.typed_lines, args.seed, args.max_files, args.editor_debounce_ms, where)
    settings = server_settings(args.target, args.draft, args.device, args.dtype, args.set)
    # generate() here runs with the same thread policy as the server's engine
    from engine.forward.threads import set_threads
    set_threads(args.threads, "auto", real_sized=target_is_real_sized(args.target))
    args.out.mkdir(parents=True, exist_ok=True)
    env = server_env(args.threads)
    n_requests = sum(1 for s in scripts for k in s.keystrokes if k.request)
    print(f"{PROG}: {len(scripts)} files, {sum(len(s.keystrokes) for s in scripts)} keystrokes, "
          f"{n_requests} completion requests per configuration", file=sys.stderr)

    meta = {"command": shlex.join(["specfill", "bench", *argv]),
            "machine": machine_description(args.machine, is_remote(args.target)),
            "settings": settings, "files": [s.name for s in scripts], "typed_lines": args.typed_lines, "typed_at": where,
            "editor_debounce_ms": args.editor_debounce_ms, "time_scale": args.time_scale,
            "requests_per_config": n_requests, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    records: list[dict] = []
    servers = {c: {**settings, **SERVER_CONFIGS[c]} for c in configs if c in SERVER_CONFIGS}
    if servers:
        t0 = time.perf_counter()
        records += asyncio.run(replay_servers(servers, scripts, args.time_scale, args.editor_debounce_ms,
                                              args.out, env))
        print(f"{PROG}: {', '.join(servers)} (interleaved) done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        write_outputs(records, configs, meta, args.out)   # a later failure keeps what was measured
    hf = [c for c in configs if c in HF_CONFIGS]
    if hf:
        t0 = time.perf_counter()
        records += replay_transformers(hf, settings, scripts, args.editor_debounce_ms)
        print(f"{PROG}: {', '.join(hf)} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    text, png = write_outputs(records, configs, meta, args.out)
    print(text)
    print(f"{PROG}: wrote {args.out / 'results.md'}, results.json" + (f", {png.name}" if png else ""),
          file=sys.stderr)
    return 0


def write_outputs(records: list[dict], configs: list[str], meta: dict, out: Path):
    summary = report.summarize(records, [c for c in configs if any(r["config"] == c for r in records)])
    text = report.markdown(summary, meta)
    (out / "results.md").write_text(text, encoding="utf-8")
    (out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "requests": records},
                                                 indent=1), encoding="utf-8")
    return text, report.plot(records, summary, out / "latency.png")


if __name__ == "__main__":
    raise SystemExit(main())
