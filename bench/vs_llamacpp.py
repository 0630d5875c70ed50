"""specfill's engine beside llama.cpp's llama-server on the same weights, one table.

    python -m bench.vs_llamacpp --shape qwen2.5-coder-0.5b --specfill dtype=float32 --specfill dtype=bfloat16

THE WEIGHTS ARE RANDOM (bench/real_shapes.py): the text both sides write is noise and is never
judged. This measures speed and memory only.

The sides, on one model of bench/real_shapes.py (its bf16 safetensors as built there):
- llama.cpp: llama-server on 127.0.0.1, one slot, on the weights converted by llama.cpp's own
  convert_hf_to_gguf.py to f16 and to q8_0 (`--outtype q8_0`), cached beside the build. The build
  is the benchmarks' optimized one (-O3, native; tests/e2e/remote/install_llama_server.py
  --release), compiled on first use (tens of minutes on 2 cores); `--llama-build tests` takes the
  tests' -O0 build instead (only to check this command: its figures mean nothing).
- specfill: one row per `--specfill NAME=VALUE[,NAME=VALUE...]`, EngineConfig fields over
  target=<the shape>, draft=none, device=cpu, threads=--threads (default: one row, dtype=auto).
  Each row runs engine.Engine in its own process, so the memory it reports is its own.
  `--baseline REV` adds each specfill row again as the tree at commit REV runs it.

Every side gets the same prompt as token ids (the first --prompt-tokens tokens of bench/files, by
the model's tokenizer), greedy decoding of --new-tokens tokens with no draft, and the same threads.
End tokens do not stop llama.cpp (`ignore_eos`); specfill's engine has no such setting and stops
at any special token, so its row says how many tokens it made when that happens (its figure is
then per token made). The sides take turns: each round starts every side in a rotated order, one
process at a time (so they never compete for the cores or the memory), measures it and stops it;
the table shows the best and the median of --reps rounds.

What each figure is, the same way on both sides:
- decode ms/token: the time from the first generated token to the last, over the tokens after the
  first (the first comes out of the prompt's pass). llama.cpp: its `timings.predicted_ms` over
  `predicted_n - 1`; specfill: latency minus prefill over new tokens - 1.
- prefill ms: the prompt's pass, its first token sampled (llama.cpp `timings.prompt_ms` with
  `cache_prompt` false; specfill `stats.prefill_ms` after its caches are cleared).
- load s: from starting the process to the answer of a first 1-token request on 8 other tokens
  (llama-server: process start, model load, warm-up, /health, that request over HTTP; specfill:
  python start, imports, Engine construction with its kernel measurement, that generate call).
- resident MB: VmHWM (peak) and VmRSS (at the end) of the process serving the model, after the
  generation and the verify runs. llama-server maps the GGUF file (mmap, its default): the pages
  of it that it touched count as resident.
- verify ms for w new tokens: the prompt cached, the cost of running w more tokens through the
  model. specfill: KVSession.append of w tokens with logits for all w (what a verify pass needs),
  on a session of the engine's model pool (best of 3 per round). llama.cpp: a /completion whose
  prompt extends the cached prompt by w tokens, n_predict 1: its `timings.prompt_ms` (its pass
  computes the last position's logits only, and samples one token).
The machine's other load counts in every figure: on a shared machine they are noisy; compare only
figures of one run.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PROG = "python -m bench.vs_llamacpp"
LOG_DIR = Path("/tmp/specfill-bench-vs-llamacpp")
WIDTHS = (1, 2, 4, 8, 16)
WARM_TOKENS = 8                 # the first request's prompt
VERIFY_INNER = 3                # verify runs per width per round (best kept)
FIXED_FIELDS = ("target", "draft", "device", "threads")   # set by the bench for every row
READY_WAIT_S = 900


class UsageError(Exception):
    """A bad command line or a missing part; the message is one line."""


# ------------------------------------------------------------------------------ rows

@dataclass
class Row:
    """One side of the table and what its rounds measured."""
    label: str
    kind: str                         # "specfill" or "llama.cpp"
    overrides: dict = field(default_factory=dict)    # specfill: EngineConfig fields
    root: Path | None = None          # specfill: the tree that runs it (None: this checkout)
    gguf: Path | None = None          # llama.cpp: the model file
    decode_ms: list = field(default_factory=list)
    prefill_ms: list = field(default_factory=list)
    load_s: list = field(default_factory=list)
    hwm_mb: list = field(default_factory=list)
    rss_mb: list = field(default_factory=list)
    verify_ms: dict = field(default_factory=dict)    # width -> [per round]
    tokens: list = field(default_factory=list)       # tokens generated per round
    notes: list = field(default_factory=list)
    error: str = ""


def parse_value(name: str, text: str, default):
    """A field's value from the command line, typed like the field's default."""
    if isinstance(default, bool):
        if text.lower() in ("true", "1", "yes", "on"):
            return True
        if text.lower() in ("false", "0", "no", "off"):
            return False
        raise UsageError(f"--specfill {name}={text}: {name} is true or false")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"--specfill {name}={text}: {name} is a whole number") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise UsageError(f"--specfill {name}={text}: {name} is a number") from None
    if default is None and text.lower() in ("none", "null", ""):
        return None
    return text


def specfill_row(spec: str) -> Row:
    """`NAME=VALUE[,NAME=VALUE...]` of EngineConfig fields; UsageError for a name it lacks."""
    from engine.settings import EngineConfig

    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else None)
                for f in dataclasses.fields(EngineConfig)}
    overrides = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, text = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise UsageError(f"--specfill {spec}: expected NAME=VALUE (an EngineConfig field)")
        if name not in defaults:
            raise UsageError(f"--specfill {part}: EngineConfig has no field {name!r} "
                             f"(fields: {', '.join(n for n in defaults if n not in FIXED_FIELDS)})")
        if name in FIXED_FIELDS:
            raise UsageError(f"--specfill {part}: {name} is set by the bench for every row "
                             f"(target: --shape, draft: none, device: cpu, threads: --threads)")
        overrides[name] = parse_value(name, text.strip(), defaults[name])
    if not overrides:
        raise UsageError(f"--specfill {spec!r}: expected NAME=VALUE (an EngineConfig field)")
    return Row(label="specfill " + " ".join(f"{k}={v}" for k, v in overrides.items()), kind="specfill",
               overrides=overrides)


# ------------------------------------------------------------------------------ prompt

@dataclass
class Prompt:
    ids: list[int]          # the measured prompt (BOS first where the tokenizer adds one)
    warm: list[int]         # the first request's prompt: shares no prefix with `ids`
    after: list[int]        # the code's tokens after the prompt (verify extensions)
    source: str


def code_prompt(model_dir: Path, files: Path, n_tokens: int) -> Prompt:
    """The first n_tokens of the .py files in `files` (sorted, joined) by the model's tokenizer."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    paths = sorted(files.glob("*.py"))
    if not paths:
        raise UsageError(f"--files {files}: no .py files")
    stream = tok.encode("\n".join(p.read_text(encoding="utf-8") for p in paths), add_special_tokens=False)
    with_special = tok.encode("x")          # BOS where the tokenizer puts one before a text
    bos = with_special[:1] if tok.bos_token_id is not None and with_special[:1] == [tok.bos_token_id] else []
    need = n_tokens + WARM_TOKENS + 2 * VERIFY_INNER * sum(WIDTHS)
    if len(stream) < need:
        raise UsageError(f"--prompt-tokens {n_tokens}: the files in {files} make {len(stream)} tokens, "
                         f"{need} are needed")
    prompt = bos + stream[:n_tokens]
    return Prompt(ids=prompt, warm=stream[-WARM_TOKENS:], after=stream[n_tokens:],
                  source=f"{', '.join(p.name for p in paths)} ({len(stream)} tokens), first {n_tokens}")


def verify_runs(after: list[int], widths=WIDTHS, count: int = VERIFY_INNER) -> dict[int, list[list[int]]]:
    """`count` runs of w tokens of `after` for each width w, taken in turn from `after`, each
    starting with another token than the run before it: a prompt cache holding the previous
    run shares only the prompt with the next."""
    runs: dict[int, list[list[int]]] = {}
    start, last = 0, None
    for w in widths:
        for _ in range(count):
            while start < len(after) and after[start] == last:
                start += 1
            if start + w > len(after):
                raise UsageError(f"the code after the prompt ({len(after)} tokens) is too short for the verify runs")
            runs.setdefault(w, []).append(after[start:start + w])
            last, start = after[start], start + w
    return runs


# ------------------------------------------------------------------------------ process memory

def memory_mb(pid: int | str = "self") -> tuple[float, float]:
    """(VmHWM, VmRSS) of a process in MB."""
    values = {}
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) / 1024
    return values.get("VmHWM", 0.0), values.get("VmRSS", 0.0)


# ------------------------------------------------------------------------------ specfill's side

def worker() -> None:
    """The specfill process: reads one JSON request a line on stdin, answers one JSON line on stdout.
    First line: {"target", "threads", "overrides", "warm"}; it answers {"ready"} after its first answer."""
    out = sys.stdout
    sys.stdout = sys.stderr          # whatever else prints goes to the log
    first = json.loads(sys.stdin.readline())

    def reply(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    try:
        import torch
        from engine import EngineConfig, LocalEngine
        from engine.settings import GenerationSettings

        config = EngineConfig(target=first["target"], draft="none", device="cpu", threads=first["threads"],
                              **first["overrides"])
        engine = LocalEngine(config)
        engine.generate(first["warm"], settings=GenerationSettings(max_new_tokens=1))
    except Exception as e:  # noqa: BLE001 - the row shows the cause in one line
        reply({"error": " ".join(f"{type(e).__name__}: {e}".split())[:400]})
        return
    reply({"ready": True, "dtype": str(next(engine.target.model.parameters()).dtype).replace("torch.", "")})
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "generate":
            engine.clear_caches()
            res = engine.generate(req["ids"], settings=GenerationSettings(max_new_tokens=req["n"]))
            s = res.stats
            reply({"prefill_ms": s.prefill_ms, "latency_ms": s.latency_ms, "new_tokens": s.new_tokens,
                   "stop_reason": res.stop_reason})
        elif req["cmd"] == "verify":
            prompt = req["ids"]
            session = engine.pool.session_for(prompt)
            session.sync(prompt)
            times = {}
            for w, runs in req["runs"].items():
                best = float("inf")
                for ext in runs:
                    session.crop(len(prompt))
                    t0 = time.perf_counter()
                    session.append(ext, n_logits=len(ext))
                    best = min(best, (time.perf_counter() - t0) * 1000)
                times[w] = best
            session.crop(len(prompt))
            reply({"verify_ms": times})
        elif req["cmd"] == "memory":
            hwm, rss = memory_mb()
            reply({"hwm_mb": hwm, "rss_mb": rss, "torch_threads": torch.get_num_threads()})
        else:
            reply({"bye": True})
            return


class SpecfillProcess:
    def __init__(self, row: Row, model_dir: Path, threads: int, warm: list[int], log_path: Path):
        self.row, self.model_dir, self.threads, self.warm = row, model_dir, threads, warm
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Starts it; seconds from the process start to its first answer."""
        from bench.common import ROOT, server_env
        log = open(self.log_path, "ab")
        root = self.row.root or ROOT
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-c", "from bench.vs_llamacpp import worker; worker()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=str(root),
                                     env=server_env(self.threads, root), text=True)
        first = self.ask({"target": str(self.model_dir), "threads": self.threads, "overrides": self.row.overrides,
                          "warm": self.warm})
        load_s = time.perf_counter() - t0
        if "error" in first:
            self.stop()
            raise RuntimeError(first["error"])
        return load_s

    def ask(self, req: dict) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(30)
            raise RuntimeError(f"the specfill process exited ({self.proc.returncode}); log: {self.log_path}")
        return json.loads(line)

    def generate(self, ids: list[int], n: int) -> dict:
        r = self.ask({"cmd": "generate", "ids": ids, "n": n})
        decode = (r["latency_ms"] - r["prefill_ms"]) / max(1, r["new_tokens"] - 1)
        return {"prefill_ms": r["prefill_ms"], "decode_ms": decode, "tokens": r["new_tokens"],
                "stop": r["stop_reason"]}

    def verify(self, ids: list[int], runs: dict[int, list[list[int]]]) -> tuple[dict[int, float], list[str]]:
        r = self.ask({"cmd": "verify", "ids": ids, "runs": {str(w): v for w, v in runs.items()}})
        return {int(w): ms for w, ms in r["verify_ms"].items()}, []

    def memory(self) -> tuple[float, float]:
        r = self.ask({"cmd": "memory"})
        return r["hwm_mb"], r["rss_mb"]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(30)


# ------------------------------------------------------------------------------ llama.cpp's side

# Run by a separate python with llama.cpp's sources first on sys.path: the converter, with two
# changes. It is told the pre-tokenizer by name where the tokenizer's fingerprint is not in its
# table (the StarCoder-sized tokenizer of bench/real_shapes.py, cut from Qwen's, splits text with
# Qwen's rules). And a model without a SentencePiece file (tokenizer.model) goes on to its
# tokenizer.json at once, as it does where the sentencepiece package is installed.
_CONVERT = r'''
import runpy, sys
from pathlib import Path
from conversion import base
fallback = sys.argv.pop(1)
sentencepiece_vocab = base.TextModel._create_vocab_sentencepiece
def _create_vocab_sentencepiece(self):
    if not (self.dir_model / "tokenizer.model").is_file():
        raise FileNotFoundError(f"File not found: {self.dir_model / 'tokenizer.model'}")
    return sentencepiece_vocab(self)
base.TextModel._create_vocab_sentencepiece = _create_vocab_sentencepiece
known = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return known(self, tokenizer)
    except NotImplementedError:
        if fallback == "-":
            raise
        return fallback
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
runpy.run_path(str(Path(sys.path[0]) / "convert_hf_to_gguf.py"), run_name="__main__")
'''
PRE_TOKENIZER = {"starcoder": "qwen2"}     # real_shapes tokenizer -> llama.cpp pre-tokenizer, if not recognised


def convert(model_dir: Path, shape, outtype: str, sources: Path, cache: Path, log=print) -> Path:
    """The model as a GGUF of `outtype` (f16, q8_0) by llama.cpp's converter, cached by the
    shape's stamp, the converter's source and this script."""
    import hashlib
    converter = sources / "convert_hf_to_gguf.py"
    if not converter.is_file():
        raise UsageError(f"llama.cpp's converter is not in {sources}")
    key = hashlib.sha256(shape.stamp().encode() + converter.read_bytes() + _CONVERT.encode()).hexdigest()[:12]
    out = cache / f"{shape.name}-{key}-{outtype}.gguf"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    t0 = time.monotonic()
    prelude = f"import sys; sys.path[:0] = [{str(sources)!r}, {str(sources / 'gguf-py')!r}]\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(sources), str(sources / "gguf-py")]))
    proc = subprocess.run(["nice", "-n", "10", sys.executable, "-c", prelude + _CONVERT,
                           PRE_TOKENIZER.get(shape.tokenizer, "-"), str(model_dir),
                           "--outtype", outtype, "--outfile", str(partial)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"llama.cpp's converter failed on {model_dir} ({outtype}):\n{proc.stderr[-3000:]}")
    partial.rename(out)
    log(f"{shape.name}: {outtype} GGUF by llama.cpp's converter in {time.monotonic() - t0:.0f} s -> {out}")
    return out


class LlamaProcess:
    def __init__(self, binary: Path, gguf: Path, threads: int, ctx: int, warm: list[int], log_path: Path):
        from tests.e2e.remote.server import free_port
        self.port = free_port()
        self.cmd = [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port),
                    "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-np", "1", "--no-webui"]
        self.warm, self.log_path = warm, log_path
        self.proc: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Starts it; seconds from the process start to its first answer."""
        import httpx
        log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_WAIT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}); log: {self.log_path}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"llama-server not ready in {READY_WAIT_S} s; log: {self.log_path}")
            time.sleep(0.02)
        self.complete(self.warm, 1, cache=False)
        return time.perf_counter() - t0

    def complete(self, ids: list[int], n: int, cache: bool) -> dict:
        import httpx
        r = httpx.post(f"{self.url}/completion", timeout=600, json={
            "prompt": ids, "n_predict": n, "ignore_eos": True, "temperature": 0.0, "cache_prompt": cache})
        r.raise_for_status()
        return r.json()

    def generate(self, ids: list[int], n: int) -> dict:
        t = self.complete(ids, n, cache=False)["timings"]
        return {"prefill_ms": t["prompt_ms"], "decode_ms": t["predicted_ms"] / max(1, t["predicted_n"] - 1),
                "tokens": t["predicted_n"], "stop": "max_tokens", "prompt_n": t["prompt_n"]}

    def verify(self, ids: list[int], runs: dict[int, list[list[int]]]) -> tuple[dict[int, float], list[str]]:
        self.complete(ids, 1, cache=True)               # the prompt in the slot's cache
        times, notes = {}, []
        for w, exts in runs.items():
            best = float("inf")
            for ext in exts:
                t = self.complete(ids + ext, 1, cache=True)["timings"]
                if t["prompt_n"] != w:
                    notes.append(f"verify w={w}: llama-server evaluated {t['prompt_n']} tokens")
                best = min(best, t["prompt_ms"])
            times[w] = best
        return times, notes

    def memory(self) -> tuple[float, float]:
        return memory_mb(self.proc.pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)


# ------------------------------------------------------------------------------ rounds

def measure(row: Row, side, prompt: Prompt, new_tokens: int, runs: dict) -> None:
    """One round of one side: start, generate, verify, memory, stop; failures end the row."""
    try:
        row.load_s.append(side.start())
        g = side.generate(prompt.ids, new_tokens)
        row.prefill_ms.append(g["prefill_ms"])
        row.decode_ms.append(g["decode_ms"])
        row.tokens.append(g["tokens"])
        if g["tokens"] < new_tokens:
            row.notes.append(f"stopped at an end token after {g['tokens']} tokens ({g['stop']})")
        if g.get("prompt_n", len(prompt.ids)) != len(prompt.ids):
            row.notes.append(f"prefill: llama-server evaluated {g['prompt_n']} of the prompt's {len(prompt.ids)} tokens")
        verified, notes = side.verify(prompt.ids, runs)
        row.notes.extend(notes)
        for w, ms in verified.items():
            row.verify_ms.setdefault(w, []).append(ms)
        hwm, rss = side.memory()
        row.hwm_mb.append(hwm)
        row.rss_mb.append(rss)
    except Exception as e:  # noqa: BLE001 - one line in the table, the other rows go on
        row.error = " ".join(str(e).split())[:300] or type(e).__name__
    finally:
        side.stop()


def run_rounds(rows: list[Row], make_side, prompt: Prompt, new_tokens: int, reps: int, log=print) -> None:
    from bench.common import rotated
    runs = verify_runs(prompt.after)
    for rep in range(reps):
        for label in rotated([r.label for r in rows], rep):
            row = next(r for r in rows if r.label == label)
            if row.error:
                continue
            measure(row, make_side(row), prompt, new_tokens, runs)
            log(f"round {rep + 1}/{reps}: {row.label}: "
                + (f"error: {row.error}" if row.error else
                   f"decode {row.decode_ms[-1]:.1f} ms/token, prefill {row.prefill_ms[-1]:.0f} ms, "
                   f"load {row.load_s[-1]:.1f} s, peak {row.hwm_mb[-1]:.0f} MB"))


# ------------------------------------------------------------------------------ table

def best_median(values: list[float], spec: str) -> str:
    if not values:
        return "-"
    best, med = min(values), statistics.median(values)
    return format(best, spec) if len(values) == 1 else f"{format(best, spec)} / {format(med, spec)}"


def ratio(a: list[float], b: list[float]) -> str:
    return f"{min(a) / min(b):.2f}x" if a and b and min(b) > 0 else "-"


def tables(rows: list[Row], prompt: Prompt, new_tokens: int, f16: Row | None, q8: Row | None) -> str:
    head = "| |" + "".join(f" {r.label} |" for r in rows)
    rule = "|---|" + "---|" * len(rows)
    lines = [head, rule]

    def add(name, cell):
        lines.append(f"| {name} |" + "".join(f" {'failed' if r.error else cell(r)} |" for r in rows))

    add(f"decode ms/token (best / median), {new_tokens} tokens", lambda r: best_median(r.decode_ms, ".1f"))
    add(f"prefill ms of {len(prompt.ids)} tokens", lambda r: best_median(r.prefill_ms, ".0f"))
    add("load s (process start to first answer)", lambda r: best_median(r.load_s, ".2f"))
    add("resident MB, peak (VmHWM)", lambda r: best_median(r.hwm_mb, ".0f"))
    add("resident MB, at the end (VmRSS)", lambda r: best_median(r.rss_mb, ".0f"))
    for ref in (f16, q8):
        if ref is not None and not ref.error:
            tag = ref.label.removeprefix("llama.cpp ")
            add(f"decode / llama.cpp {tag}", lambda r, ref=ref: ratio(r.decode_ms, ref.decode_ms))
            add(f"prefill / llama.cpp {tag}", lambda r, ref=ref: ratio(r.prefill_ms, ref.prefill_ms))
            add(f"load / llama.cpp {tag}", lambda r, ref=ref: ratio(r.load_s, ref.load_s))
            add(f"peak memory / llama.cpp {tag}", lambda r, ref=ref: ratio(r.hwm_mb, ref.hwm_mb))
    out = ["\n".join(lines), ""]
    vhead = "| verify: w new tokens after the prompt, ms (best / median) |" + "".join(f" w={w} |" for w in WIDTHS)
    vlines = [vhead, "|---|" + "---|" * len(WIDTHS)]
    for r in rows:
        if r.error or not r.verify_ms:
            continue
        vlines.append(f"| {r.label} |" + "".join(f" {best_median(r.verify_ms.get(w, []), '.1f')} |" for w in WIDTHS))
        one = min(r.verify_ms[WIDTHS[0]])
        vlines.append(f"| {r.label}, relative to w=1 |"
                      + "".join(f" {min(r.verify_ms[w]) / one:.2f}x |" for w in WIDTHS))
    out += ["\n".join(vlines), ""]
    for r in rows:
        if r.error:
            out.append(f"- {r.label}: failed: {r.error}")
        for note in dict.fromkeys(r.notes):
            out.append(f"- {r.label}: {note}")
    return "\n".join(out).rstrip() + "\n"


# ------------------------------------------------------------------------------ CLI

def parse_args(argv):
    from bench.common import DEFAULT_FILES, bench_parser
    from bench.real_shapes import SHAPES
    from lsp.arguments import number

    ap = bench_parser(PROG, __doc__)
    ap.add_argument("--shape", required=True, choices=list(SHAPES), help="the model shape (bench/real_shapes.py)")
    ap.add_argument("--scaled", action="store_true",
                    help="the shape's scaled-down copy (a few MB; to check this command, not to measure)")
    ap.add_argument("--specfill", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]",
                    help="a specfill row: EngineConfig fields (repeatable; default: one row dtype=auto)")
    ap.add_argument("--baseline", metavar="REV", default=None,
                    help="also run each specfill row as the tree at this commit runs it")
    ap.add_argument("--llama", default="f16,q8_0",
                    help="llama.cpp rows: GGUF types for the converter's --outtype, comma-separated "
                         "(default f16,q8_0; 'none': no llama.cpp rows)")
    ap.add_argument("--llama-build", choices=("release", "tests"), default="release",
                    help="release: the optimized build, compiled on first use; tests: the tests' -O0 build")
    ap.add_argument("--threads", type=number(int, 1), default=2, help="threads of every side")
    ap.add_argument("--prompt-tokens", type=number(int, 16), default=400)
    ap.add_argument("--new-tokens", type=number(int, 2), default=64)
    ap.add_argument("--reps", type=number(int, 1), default=3, help="rounds (each side once per round)")
    ap.add_argument("--files", type=Path, default=DEFAULT_FILES, help="the prompt's code (.py files)")
    ap.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    return ap.parse_args(argv)


def llama_binary(build: str, log=print) -> tuple[Path, Path]:
    """(llama-server, llama.cpp's python sources) of the build; the release one is built if missing."""
    from tests.e2e.remote import install_llama_server as install
    release = build == "release"
    found = install.installed(release)
    if found is None and not release:
        raise UsageError(f"the tests' llama-server is not built in {install.cache_dir()}: run "
                         "python -m tests.e2e.remote.install_llama_server first")
    if found is None:
        log(f"building the optimized llama-server into {install.cache_dir(True)} (nice; tens of minutes on 2 cores)")
        try:
            found = install.install(log=log, release=True)
        except install.BuildToolMissing as e:
            raise UsageError(str(e)) from None
    return found, install.sources_path(release)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        specfill_rows = [specfill_row(s) for s in (args.specfill or ["dtype=auto"])]
        outtypes = [] if args.llama.strip().lower() == "none" else [t.strip() for t in args.llama.split(",") if t.strip()]
        bad = [t for t in outtypes if t not in ("f16", "bf16", "q8_0", "f32")]
        if bad:
            raise UsageError(f"--llama {args.llama}: {', '.join(bad)} is not an outtype of llama.cpp's converter "
                             "used here (f32, f16, bf16, q8_0)")
        if not args.files.is_dir():
            raise UsageError(f"--files {args.files}: no such folder")
        baseline = None
        if args.baseline:
            from bench.round_cost import commit_of
            baseline = commit_of(args.baseline)
            if baseline is None:
                raise UsageError(f"--baseline {args.baseline}: not a commit of this repository")
        binary, sources = llama_binary(args.llama_build, log) if outtypes else (None, None)
    except UsageError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2

    from bench import real_shapes
    from bench.replay import cpu_name
    from tests.e2e.remote import install_llama_server as install

    shape = real_shapes.scaled(args.shape) if args.scaled else real_shapes.SHAPES[args.shape]
    try:
        model_dir = real_shapes.model_dir(shape, log=log)
    except real_shapes.ShapeError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    prompt = code_prompt(model_dir, args.files, args.prompt_tokens)
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    rows = list(specfill_rows)
    if baseline:
        from bench.round_cost import tree_at
        root = tree_at(baseline, Path(tempfile.mkdtemp(prefix="specfill-baseline-")))
        rows += [Row(label=f"{baseline} {r.label}", kind=r.kind, overrides=r.overrides, root=root)
                 for r in specfill_rows]
    f16 = q8 = None
    for t in outtypes:
        gguf = convert(model_dir, shape, t, sources, install.cache_dir().parent / "gguf", log=log)
        rows.append(Row(label=f"llama.cpp {t}", kind="llama.cpp", gguf=gguf))
        f16 = rows[-1] if t == "f16" else f16
        q8 = rows[-1] if t == "q8_0" else q8
    ctx = max(1024, len(prompt.ids) + args.new_tokens + 2 * max(WIDTHS) + 8)

    def make_side(row: Row):
        log_path = LOG_DIR / f"{row.label.replace(' ', '_').replace('=', '-')}.log"
        if row.kind == "specfill":
            return SpecfillProcess(row, model_dir, args.threads, prompt.warm, log_path)
        return LlamaProcess(binary, row.gguf, args.threads, ctx, prompt.warm, log_path)

    t0 = time.monotonic()
    run_rounds(rows, make_side, prompt, args.new_tokens, args.reps, log=log)
    n_params = real_shapes.parameter_count(shape)
    build = {"release": "optimized (-O3, native)", "tests": "the tests' -O0 build: its figures mean nothing"}
    report = "\n".join([
        f"specfill vs llama.cpp: {shape.name} ({shape.hub_id}'s shape, {n_params / 1e6:.0f}M parameters, bf16 "
        f"safetensors{', scaled down' if args.scaled else ''}) - {real_shapes.NOISE_NOTE}.",
        f"`{PROG} {shlex.join(argv)}`",
        f"{args.threads} threads each; prompt: {len(prompt.ids)} token ids ({prompt.source}); greedy, "
        f"{args.new_tokens} new tokens, no draft; best / median of {args.reps} rounds, the sides in turn, "
        f"one process at a time; {time.monotonic() - t0:.0f} s in all. "
        f"Machine: {os.cpu_count()} cores ({cpu_name()}), shared: the figures are noisy.",
        (f"llama.cpp: llama-server {install.VERSION}, {build[args.llama_build]}, "
         f"one slot, flags `{' '.join(['-t', str(args.threads), '-tb', str(args.threads), '-c', str(ctx), '-np', '1'])}`, "
         "GGUF by its convert_hf_to_gguf.py." if outtypes else "llama.cpp: not run (--llama none)."),
        "",
        tables(rows, prompt, args.new_tokens, f16, q8),
    ])
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
