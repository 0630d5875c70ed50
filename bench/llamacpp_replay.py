"""llama.cpp's side of the typing replay at a real size: the keystrokes of bench/replay.py (a block
typed back into the middle of each file) sent straight to llama-server's `/infill` with
`--cache-reuse`, as llama.vim does, on a model of bench/real_shapes.py.

    python -m bench.llamacpp_replay --shape qwen2.5-coder-0.5b      # cachetools' source, 16 new tokens

THE WEIGHTS ARE RANDOM: the answers are noise and are never judged; this measures time only.

It types the same keystrokes as `python -m bench.replay` with the same --files, --max-files,
--typed-lines, --seed and --editor-debounce-ms, so its p50/p95 per keystroke can be put beside
specfill's replay on the same shape, e.g.
    python -m bench.replay --files <cachetools> --target <the shape's directory> --draft none \\
        --configs no-draft --set maxNewTokens=16
At each keystroke where the editor asks, one /infill request: the text before the cursor and
after it, cut at line starts to the windows specfill's prompts use (1024 tokens before the cursor,
its first line on a multiple of 16 lines, and 256 after; by the model's tokenizer), greedy,
n_predict --new-tokens, n_indent as specfill sends it, the prompt cache on. As llama.vim sends it,
the cursor line's text before the cursor goes in `prompt`, after the middle sentinel, so that the
prefix and suffix stay the same while typing within a line (`--cursor-line prefix`: at the end of
the prefix, as specfill's own prompts have it). The figure is the
request's wall time on the client (loopback HTTP included); the server's own timings say how
many prompt tokens it took from its cache and how many it computed.

`--cache-reuse N` lets llama-server move cached chunks of at least N tokens to their new places
instead of computing them again. That reuse is APPROXIMATE: a shifted chunk keeps the states it
had before the edit, which no longer see the edited text before it; its answers are not the
model's answers on the new prompt. `--cache-reuse 0` runs the exact prompt cache (common prefix
only) for comparison.
"""
from __future__ import annotations

import functools
import shlex
import statistics
import sys
import time
from pathlib import Path

PROG = "python -m bench.llamacpp_replay"
PREFIX_TOKENS, SUFFIX_TOKENS, STEP_LINES = 1024, 256, 16     # specfill's prompt windows (CompletionOptions)


def default_files() -> Path:
    import cachetools
    return Path(cachetools.__file__).parent


class Windows:
    """The text before and after the cursor, cut at line starts to token budgets."""

    def __init__(self, tokenizer, prefix_tokens: int = PREFIX_TOKENS, suffix_tokens: int = SUFFIX_TOKENS,
                 step_lines: int = STEP_LINES):
        self.tokenizer, self.prefix_tokens, self.suffix_tokens = tokenizer, prefix_tokens, suffix_tokens
        self.step_lines = step_lines

    @functools.lru_cache(maxsize=65536)
    def tokens(self, line: str) -> int:
        return len(self.tokenizer.encode(line, add_special_tokens=False))

    def cut(self, text: str, line: int, col: int) -> tuple[str, str]:
        """(text before the cursor, text after it), each within its window."""
        lines = text.split("\n")
        before = lines[:line] + [lines[line][:col]]
        after = [lines[line][col:]] + lines[line + 1:]
        # the prefix's first line: the first multiple of step_lines whose window fits the budget
        counts = [self.tokens(s + "\n") for s in before]
        total, start = sum(counts), 0
        while total > self.prefix_tokens and start < line:
            nxt = min(line, start + self.step_lines)
            total -= sum(counts[start:nxt])
            start = nxt
        kept, used = [], 0
        for s in after:
            used += self.tokens(s + "\n")
            if kept and used > self.suffix_tokens:
                break
            kept.append(s)
        return "\n".join(before[start:]), "\n".join(kept)


def replay(server_url: str, scripts, windows: Windows, new_tokens: int, line_in_prompt: bool = True,
           log=print) -> list[dict]:
    import httpx
    from bench.replay import request_points
    from engine.remote import infill_indent

    records = []
    with httpx.Client(base_url=server_url, timeout=600) as client:
        for script in scripts:
            for i, text, line, col in request_points(script):
                prefix, suffix = windows.cut(text, line, col)
                body = {"input_prefix": prefix, "input_suffix": suffix, "input_extra": [],
                        "n_predict": new_tokens, "cache_prompt": True, "temperature": 0.0, "top_k": 1,
                        "n_indent": infill_indent(prefix, suffix)}
                if line_in_prompt:
                    # llama.vim's split: the cursor line's text before the cursor goes after the
                    # middle sentinel (`prompt`), so typing within a line changes only the tail
                    head, _, current = prefix.rpartition("\n")
                    body.update(input_prefix=head + "\n" if _ else "", prompt=current)
                t0 = time.perf_counter()
                r = client.post("/infill", json=body)
                ms = (time.perf_counter() - t0) * 1000
                r.raise_for_status()
                t = r.json().get("timings", {})
                records.append({"file": script.name, "keystroke": i, "ms": ms, "prompt_n": t.get("prompt_n", 0),
                                "cache_n": t.get("cache_n", 0), "predicted_n": t.get("predicted_n", 0),
                                "prompt_ms": t.get("prompt_ms", 0.0), "predicted_ms": t.get("predicted_ms", 0.0)})
            log(f"{script.name}: {sum(1 for r in records if r['file'] == script.name)} requests")
    return records


def percentile(values: list[float], p: float) -> float:
    from completion.stats import percentile as pct
    return pct(values, p)


def summary(records: list[dict]) -> str:
    lat = [r["ms"] for r in records]
    med = lambda key: statistics.median(r[key] for r in records)  # noqa: E731
    lines = ["| requests | p50 ms | p95 ms | mean ms | prompt tokens computed (median) | taken from the cache (median) "
             "| tokens generated (median) | server prompt ms (median) | server decode ms (median) |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| {len(records)} | {percentile(lat, 50):.0f} | {percentile(lat, 95):.0f} | {statistics.mean(lat):.0f} "
             f"| {med('prompt_n'):.0f} | {med('cache_n'):.0f} | {med('predicted_n'):.0f} "
             f"| {med('prompt_ms'):.0f} | {med('predicted_ms'):.0f} |"]
    return "\n".join(lines)


def main(argv=None) -> int:
    from bench.common import bench_parser
    from bench.keystrokes import EDITOR_DEBOUNCE_MS
    from bench.real_shapes import NOISE_NOTE, SHAPES
    from lsp.arguments import number

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--shape", default="qwen2.5-coder-0.5b", choices=list(SHAPES))
    ap.add_argument("--scaled", action="store_true", help="the shape's scaled-down copy (to check this command)")
    ap.add_argument("--files", type=Path, default=None, help="folder of .py files to type (default: cachetools' source)")
    ap.add_argument("--max-files", type=number(int, 1), default=3)
    ap.add_argument("--typed-lines", type=number(int, 1), default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--editor-debounce-ms", type=number(float, 0), default=EDITOR_DEBOUNCE_MS)
    ap.add_argument("--new-tokens", type=number(int, 1), default=16)
    ap.add_argument("--cache-reuse", type=number(int, 0), default=256,
                    help="llama-server --cache-reuse (0: the exact prompt cache only)")
    ap.add_argument("--cursor-line", choices=("prompt", "prefix"), default="prompt",
                    help="where the cursor line's text before the cursor goes: after the middle sentinel "
                         "(prompt, as llama.vim sends it) or at the end of input_prefix")
    ap.add_argument("--outtype", default="f16", choices=("f16", "bf16", "q8_0", "f32"),
                    help="the GGUF the converter writes")
    ap.add_argument("--llama-build", choices=("release", "tests"), default="release")
    ap.add_argument("--threads", type=number(int, 1), default=2)
    ap.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = ap.parse_args(argv)

    from bench import real_shapes
    from bench.replay import UsageError as ReplayUsage, load_scripts
    from bench.vs_llamacpp import LOG_DIR, UsageError, convert, llama_binary
    from tests.e2e.remote import install_llama_server as install
    from tests.e2e.remote.server import LlamaServer

    files = args.files or default_files()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        scripts = load_scripts(files, args.typed_lines, args.seed, args.max_files, args.editor_debounce_ms)
        binary, sources = llama_binary(args.llama_build, log)
    except (UsageError, ReplayUsage) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    shape = real_shapes.scaled(args.shape) if args.scaled else SHAPES[args.shape]
    try:
        model_dir = real_shapes.model_dir(shape, log=log)
    except real_shapes.ShapeError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    gguf = convert(model_dir, shape, args.outtype, sources, install.cache_dir().parent / "gguf", log=log)
    from transformers import AutoTokenizer
    windows = Windows(AutoTokenizer.from_pretrained(model_dir))
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    server = LlamaServer(binary, gguf, ctx=4096, slots=1, threads=args.threads,
                         extra=("-tb", str(args.threads), "--cache-reuse", str(args.cache_reuse)))
    t0 = time.perf_counter()
    server.start()
    ready_s = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        records = replay(server.url, scripts, windows, args.new_tokens, args.cursor_line == "prompt", log=log)
        took = time.perf_counter() - t0
    finally:
        server.stop()
    n_keys = sum(len(s.keystrokes) for s in scripts)
    build = "optimized (-O3, native)" if args.llama_build == "release" else "the tests' -O0 build: its figures mean nothing"
    reuse = (f"--cache-reuse {args.cache_reuse} (APPROXIMATE: shifted chunks keep states that do not see the edit)"
             if args.cache_reuse else "--cache-reuse 0 (exact: the common prefix only)")
    report = "\n".join([
        f"llama.cpp /infill typing replay: {shape.name} ({shape.hub_id}'s shape{', scaled down' if args.scaled else ''}, "
        f"{args.outtype} GGUF) - {NOISE_NOTE}.",
        f"`{PROG} {shlex.join(argv)}`",
        f"{len(scripts)} files of {files} ({', '.join(s.name for s in scripts)}), {args.typed_lines} lines typed "
        f"in the middle of each, seed {args.seed}: {n_keys} keystrokes, {len(records)} requests; "
        f"{args.new_tokens} new tokens, greedy; llama-server {install.VERSION}, {build}, one slot, "
        f"-t {args.threads}, {reuse}, the cursor line's text before the cursor in {args.cursor_line}; ready {ready_s:.1f} s after start; replay {took:.0f} s. "
        "On a shared machine the figures are noisy.",
        "",
        summary(records),
    ])
    print(report)
    if args.out:
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
