"""Keystroke-replay latency benchmark: type real source files into the real language server
over stdio, as an editor would, and time every inline completion; then run transformers
`generate()` (with and without `assistant_model`) on the very prompts the server built.

    specfill bench [--files DIR] [--target default --draft default] [--out bench/results]
    python -m bench.replay --help

Configurations (all on the same keystrokes):
  full         specfill as shipped: draft model + prompt lookup under the cost-aware controller,
               KV reuse, completion cache
  no-draft     draftModel none (plain decoding in the engine, still KV reuse + cache)
  no-kv-reuse  kvReuse false (every request prefills its whole prompt; cache still on)
  ngram        draftModel ngram (prompt lookup only)
  draft-heuristic  the draft model alone with the old +2/-1 draft length rule
  hf-assisted  transformers generate(assistant_model=draft), re-run for every request
  hf-plain     transformers generate(), re-run for every request
Writes results.md (table, goals, where the time goes), results.json (every request) and
latency.png to the output folder.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

from bench import report
from bench.keystrokes import EDITOR_DEBOUNCE_MS, TypingScript, apply, cursor_after, typing_script, utf16_column
from bench.lsp_client import LspClient, initialize_params
from lsp import commands

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = Path(__file__).resolve().parent / "files"
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

SERVER_CONFIGS = {
    "full": {},
    "no-draft": {"draftModel": "none"},
    "no-kv-reuse": {"kvReuse": False},
    "ngram": {"draftModel": "ngram"},
    "draft-heuristic": {"draftControl": "heuristic", "promptLookup": False},
}
HF_CONFIGS = ("hf-assisted", "hf-plain")
ALL_CONFIGS = (*SERVER_CONFIGS, *HF_CONFIGS)


# ------------------------------------------------------------------------------ the keystrokes

def load_scripts(files_dir: Path, typed_lines: int, seed: int, max_files: int,
                 editor_debounce_ms: float) -> list[TypingScript]:
    paths = sorted(p for p in files_dir.iterdir() if p.is_file() and p.suffix == ".py")[:max_files]
    if not paths:
        raise SystemExit(f"specfill bench: no .py files in {files_dir}")
    return [typing_script(p.name, p.read_text(encoding="utf-8"), typed_lines, seed, editor_debounce_ms)
            for p in paths]


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

async def replay_server(config: str, settings: dict, scripts: list[TypingScript], time_scale: float,
                        editor_debounce_ms: float, out_dir: Path, env: dict) -> list[dict]:
    command = [sys.executable, "-m", "lsp", "--log-level", "warning"]
    client = await LspClient.start(command, env, out_dir / "logs" / f"server-{config}.log", cwd=str(ROOT))
    records: list[dict] = []
    try:
        await client.request("initialize", initialize_params(settings, ROOT))
        await client.notify("initialized", {})
        await wait_loaded(client)
        for script in scripts:
            records += await replay_file(client, config, script, time_scale, editor_debounce_ms)
    finally:
        await client.close()
    return records


async def wait_loaded(client: LspClient, timeout: float = 900.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stats = await client.execute(commands.STATS)
        if stats["models"]["loaded"] and not stats["models"]["loading"]:
            return stats
        if stats["server"]["load_failures"]:
            raise SystemExit(f"specfill bench: the server could not load the models: {client.messages}")
        await asyncio.sleep(0.2)
    raise SystemExit("specfill bench: models did not load in time")


async def replay_file(client: LspClient, config: str, script: TypingScript, time_scale: float,
                      editor_debounce_ms: float) -> list[dict]:
    uri = file_uri(script)
    await client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 0, "text": script.initial_text}})
    lines = script.initial_text.split("\n")
    stats = await client.execute(commands.STATS)
    jobs = stats["server"]["decode_jobs"]
    last = await client.execute(commands.LAST_COMPLETION)
    records = []
    for version, key in enumerate(script.keystrokes, start=1):
        pos = {"line": key.line, "character": utf16_column(lines[key.line], key.character)}
        await client.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": pos, "end": pos}, "text": key.text}]})
        lines = apply(lines, key)
        if key.request:
            line, col = cursor_after(key)
            result, ms = await client.timed_request("textDocument/inlineCompletion", {
                "textDocument": {"uri": uri},
                "position": {"line": line, "character": utf16_column(lines[line], col)},
                "context": {"triggerKind": 2}})
            # Per-request figures: the worker job (time, cache hit) and the model run, if any.
            stats = await client.execute(commands.STATS)
            ran_job = stats["server"]["decode_jobs"] > jobs
            jobs = stats["server"]["decode_jobs"]
            previous, last = last, await client.execute(commands.LAST_COMPLETION)
            items = (result or {}).get("items", []) if isinstance(result, dict) else (result or [])
            records.append(report.server_record(
                config, script.name, version - 1, line, col, key.request,
                key.gap_ms - editor_debounce_ms, ms, items[0]["insertText"] if items else "",
                stats["server"]["last_job"] if ran_job else {},
                last if last and last != previous else {}))
        if time_scale > 0:
            await asyncio.sleep(key.gap_ms * time_scale / 1000)
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    return records


# ------------------------------------------------------------------------------ transformers generate()

class _Captured(Exception):
    def __init__(self, target_ids, draft_ids, settings, stop_ids, stop_check):
        super().__init__("prompt captured")
        self.target_ids, self.draft_ids, self.settings, self.stop_ids = target_ids, draft_ids, settings, stop_ids
        self.stop_check = stop_check

    def decided(self, text: str) -> bool:
        """The pipeline's own stops: its stop strings, or its answer being decided."""
        return (any(s in text for s in self.settings.stop_strings)
                or (self.stop_check is not None and self.stop_check(text) is not None))


class PromptCapture:
    """Stands in for the engine inside a CompletionPipeline: the pipeline builds the exact
    prompt, generation settings and stop ids the server would, and hands them to `generate`,
    which stops the pipeline there. Everything else is the real engine."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate(self, target_ids, draft_ids=None, settings=None, stop_ids=(), cancel=None, stop_check=None):
        raise _Captured(list(target_ids), draft_ids, settings, tuple(stop_ids), stop_check)


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


class CallCounter:
    """Counts a model's forward passes."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.calls += 1


def replay_transformers(configs: list[str], settings: dict, scripts: list[TypingScript],
                        editor_debounce_ms: float = EDITOR_DEBOUNCE_MS) -> list[dict]:
    import torch

    from completion.context import parse_document
    from completion.pipeline import CompletionPipeline
    from completion.postprocess import clean_completion
    from lsp import backend
    from lsp.settings import Settings, parse_settings

    from transformers import StoppingCriteriaList

    StopOnText = _stop_on_text_class()
    parsed = parse_settings(settings, Settings())
    loaded = backend.load_backend(parsed)
    engine = loaded.engine
    pipeline = CompletionPipeline(PromptCapture(engine))
    options = backend.completion_options(parsed)
    target, tt = engine.target.model, engine.target.tokenizer
    draft = engine.draft.model if engine.draft is not None else None
    dt = engine.draft.tokenizer if engine.draft is not None else None
    counter = CallCounter(target)
    pad = tt.pad_token_id if tt.pad_token_id is not None else (tt.eos_token_id or 0)

    def generate(captured, assisted: bool) -> tuple[str, int]:
        gen = captured.settings
        kw = dict(max_new_tokens=gen.max_new_tokens, do_sample=False, pad_token_id=pad,
                  eos_token_id=list(captured.stop_ids) or None)
        if gen.stop_strings or captured.stop_check is not None:
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

    records = []
    for config in configs:
        assisted = config == "hf-assisted"
        if assisted and draft is None:
            print(f"specfill bench: skipping {config}: draft {settings.get('draftModel')!r} is not a model",
                  file=sys.stderr)
            continue
        warmed = False
        for script in scripts:
            uri = file_uri(script)
            pipeline.note_document(uri, backend.encodable(script.initial_text))   # as didOpen does
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
                records.append(report.hf_record(
                    config, script.name, index, line, col, key.request,
                    key.gap_ms - editor_debounce_ms, ms, cleaned.text if cleaned else "", out_text,
                    new_tokens, counter.calls, len(captured.target_ids)))
            pipeline.forget_document(uri)
    counter.handle.remove()
    return records


# ------------------------------------------------------------------------------ CLI

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="specfill bench", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--files", type=Path, default=DEFAULT_FILES,
                    help="folder of .py files to type (default: bench/files, not in the default pair's training data)")
    ap.add_argument("--max-files", type=int, default=3, help="type at most this many files (sorted by name)")
    ap.add_argument("--typed-lines", type=int, default=12, help="lines typed per file (a block in the middle)")
    ap.add_argument("--target", default="default", help="targetModel setting")
    ap.add_argument("--draft", default="default", help="draftModel setting")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="any other server setting, e.g. --set maxNewTokens=32 (repeatable), "
                         "as for `specfill complete`")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS),
                    help=f"comma-separated subset of {','.join(ALL_CONFIGS)}")
    ap.add_argument("--time-scale", type=float, default=0.1,
                    help="real sleep per keystroke gap, as a fraction of the typist's gap (1 = real time; "
                         "the server only works when asked, so this only stretches the run)")
    ap.add_argument("--editor-debounce-ms", type=float, default=EDITOR_DEBOUNCE_MS,
                    help="quiet time after a keystroke before the editor asks for a completion")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads for server and generate() (0 = the engine's auto policy)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default bench/results)")
    ap.add_argument("--machine", default="", help="words describing the machine, quoted in the report")
    return ap.parse_args(argv)


def server_settings(args) -> dict:
    settings = {"targetModel": args.target, "draftModel": args.draft, "device": args.device,
                "dtype": args.dtype}
    from lsp.settings import SettingsError, parse_assignment   # the settings table loads torch

    try:
        settings.update(parse_assignment(item) for item in args.set)
    except SettingsError as exc:
        raise SystemExit(f"specfill bench: --set: {exc}") from None
    return settings


def machine_description(args) -> str:
    import torch

    words = f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), " \
            f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    return f"{args.machine}; {words}" if args.machine else words


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in ALL_CONFIGS]
    if unknown:
        raise SystemExit(f"specfill bench: unknown configuration(s) {unknown}; choose from {list(ALL_CONFIGS)}")
    # generate() here runs with the same thread policy as the server's engine
    from engine.threads import set_threads
    set_threads(args.threads, "auto")
    args.out.mkdir(parents=True, exist_ok=True)
    scripts = load_scripts(args.files, args.typed_lines, args.seed, args.max_files, args.editor_debounce_ms)
    settings = server_settings(args)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    n_requests = sum(1 for s in scripts for k in s.keystrokes if k.request)
    print(f"specfill bench: {len(scripts)} files, {sum(len(s.keystrokes) for s in scripts)} keystrokes, "
          f"{n_requests} completion requests per configuration", file=sys.stderr)

    command = shlex.join(["specfill", "bench", *(sys.argv[1:] if argv is None else argv)])
    meta = {"command": command.strip(), "machine": machine_description(args), "settings": settings,
            "files": [s.name for s in scripts], "typed_lines": args.typed_lines,
            "editor_debounce_ms": args.editor_debounce_ms, "time_scale": args.time_scale,
            "requests_per_config": n_requests, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    records: list[dict] = []
    for config in [c for c in configs if c in SERVER_CONFIGS]:
        t0 = time.perf_counter()
        records += asyncio.run(replay_server(config, {**settings, **SERVER_CONFIGS[config]}, scripts,
                                             args.time_scale, args.editor_debounce_ms, args.out, env))
        print(f"specfill bench: {config} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        write_outputs(records, configs, meta, args.out)   # a later failure keeps what was measured
    hf = [c for c in configs if c in HF_CONFIGS]
    if hf:
        t0 = time.perf_counter()
        records += replay_transformers(hf, settings, scripts, args.editor_debounce_ms)
        print(f"specfill bench: {', '.join(hf)} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    text, png = write_outputs(records, configs, meta, args.out)
    print(text)
    print(f"specfill bench: wrote {args.out / 'results.md'}, results.json" + (f", {png.name}" if png else ""),
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
