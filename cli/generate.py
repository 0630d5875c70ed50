"""`specfill generate`: continue a prompt file with the target model, drafted speculatively.

The engine (and with it torch) is imported inside `generate_main`, after the arguments are
checked (against the engine's own limits, lsp/engine_limits.py), so that importing the command
line loads no torch (see cli/main.py) and a bad argument is refused at once."""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import TYPE_CHECKING

from engine.remote import BACKENDS, is_remote      # (no models: torch is not imported)
from lsp.arguments import EXIT_USAGE, OneLineParser, keyword_or_path, number
from lsp.engine_limits import DEVICE_PATTERN, DEVICES, DTYPES, MAX_DRAFT_LENGTH, QUANTIZE

# The settings of a remote target, named as in the editor settings (lsp/settings.py `remote`).
REMOTE_SETTINGS = tuple(f"remote.{name}" for name in ("backend", "apiKey", "apiKeyEnv", "verifyTls", "caBundle",
                                                      "connectTimeoutMs", "readTimeoutMs"))
# Options that choose local models or their decoding: nothing to do on a remote target.
LOCAL_ONLY = ("draft", "draft_length", "no_lookup", "datastore", "device", "dtype",
              "quantize", "threads", "trust_remote_code")

if TYPE_CHECKING:
    from engine import LoadedModel


def draft_length(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or 1-{MAX_DRAFT_LENGTH}, got {value!r}") from None
    if not 1 <= n <= MAX_DRAFT_LENGTH:
        raise argparse.ArgumentTypeError(f"expected 'auto' or 1-{MAX_DRAFT_LENGTH}, got {n}")
    return n


def datastore(value: str) -> str:
    """--datastore: `auto` and `none` in any case; a path as given (the engine checks the file)."""
    return keyword_or_path(value, ("auto", "none"))


def _device(value: str) -> str:
    if not re.fullmatch(DEVICE_PATTERN, value):
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(DEVICES)} or cuda:N, got {value!r}")
    return value


def generate_main(argv: list[str]) -> int:
    p = OneLineParser(prog="specfill generate",
                                description="Continue a prompt with the target model, drafted speculatively.")
    p.add_argument("--target", default="default",
                   help="hub id, local dir, 'default', or a server's http(s):// URL (a remote target)")
    p.add_argument("--draft", default="default", help="hub id, local dir, 'default', 'ngram' or 'none'")
    p.add_argument("--prompt-file", required=True, help="text file with the prompt ('-' for stdin)")
    p.add_argument("--max-new-tokens", type=number(int, 1), default=64)
    p.add_argument("--draft-length", type=draft_length, default="auto", help="'auto' or a number of tokens")
    p.add_argument("--no-lookup", action="store_true", help="no prompt lookup beside the draft model")
    p.add_argument("--datastore", type=datastore, default="auto", metavar="auto|none|PATH",
                   help="the target's own answers that prompt lookup drafts from too: auto (the target "
                        "directory's datastore.npz, if any), none, or a .npz file")
    p.add_argument("--temperature", type=number(float, 0), default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=number(int, 0), default=0, help="0 = off")
    p.add_argument("--top-p", type=number(float, 0, 1, low_open=True), default=1.0, help="1 = off")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--device", default="auto", type=_device, help=f"{', '.join(DEVICES)} or cuda:N")
    p.add_argument("--dtype", default="auto", choices=DTYPES,
                   help="auto: a real-sized 16-bit checkpoint in its own precision where the CPU computes it, else float32")
    p.add_argument("--quantize", default="none", choices=QUANTIZE, help="int8: 8-bit weights (CPU)")
    p.add_argument("--threads", type=number(int, 0), default=0, help="torch CPU threads (0 = auto: the physical cores for a real-sized model, half the cores for a small one)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="replay the lean forward as CUDA graphs (CUDA only; run on one H200 so far)")
    p.add_argument("--backend", default=None, choices=BACKENDS,
                   help="remote target only: the protocol (as the remote.backend setting; default auto)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help=f"remote target only: one of {', '.join(REMOTE_SETTINGS)} "
                        "(as for specfill complete; repeatable), e.g. --set remote.apiKeyEnv=TEAM_KEY")
    p.add_argument("--json", action="store_true", help="print one JSON object {text, stats}")
    args = p.parse_args(argv)

    try:   # before the engine (and torch) loads: a bad file fails at once
        prompt = sys.stdin.read() if args.prompt_file == "-" else open(args.prompt_file, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        print(f"{p.prog}: cannot read prompt file {args.prompt_file!r}: {e}", file=sys.stderr)
        return EXIT_USAGE

    if is_remote(args.target):
        if args.cuda_graphs:
            p.error("--cuda-graphs is for a local target (a remote server runs its own forward)")
        return generate_remote(p, args, prompt)
    if args.backend is not None or args.set:
        p.error(f"--{'backend' if args.backend is not None else 'set'} is for a remote target "
                "(--target http(s)://...)")

    from engine import LocalEngine, EngineConfig, GenerationSettings, ModelLoadError

    try:
        engine = LocalEngine(EngineConfig(target=args.target, draft=args.draft, device=args.device,
                                          dtype=args.dtype, quantize=args.quantize,
                                          trust_remote_code=args.trust_remote_code,
                                          threads=args.threads, lookup=not args.no_lookup,
                                          datastore=args.datastore, cuda_graphs=args.cuda_graphs))
    except ModelLoadError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return EXIT_USAGE
    target_ids = encode_prompt(engine.target, prompt)
    draft_ids = None
    if engine.draft is not None:   # the end of the prompt the draft reads best from (its config)
        from completion.pipeline import left_to_right_draft_text
        draft_ids = encode_prompt(engine.draft, left_to_right_draft_text(prompt, engine.draft.model,
                                                                         engine.draft.vocab.encode_text))
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, draft_length=args.draft_length,
                                  temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                  seed=args.seed)
    try:
        result = engine.generate(target_ids, draft_ids, settings)
    except ValueError as e:
        print(f"{p.prog}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        stats = result.stats.as_dict()
        stats.update(result.figures)   # what prompt lookup proposed, by source (as specfill.stats)
        print(json.dumps({"text": result.text, "stop_reason": result.stop_reason, "stats": stats,
                          "matmul_kernels": engine.matmul_kernels()}))
    else:
        s = result.stats
        print(result.text)
        print(f"[{s.new_tokens} tokens in {s.latency_ms:.0f} ms, {s.target_calls} target calls, "
              f"{s.tokens_per_target_call:.2f} tokens/call, acceptance {s.acceptance_rate:.2f}, "
              f"stop: {result.stop_reason}]", file=sys.stderr)
    return 0


def encode_prompt(loaded: LoadedModel, text: str) -> list[int]:
    """Plain left-to-right prompt: BOS (when the tokenizer has one) + the text as text."""
    bos = loaded.tokenizer.bos_token_id
    return ([bos] if bos is not None else []) + loaded.vocab.encode_text(text)


def generate_remote(p: OneLineParser, args: argparse.Namespace, prompt: str) -> int:
    """The prompt continued by a remote server (llama.cpp, vLLM, TGI, ...) as plain text: the
    server adds BOS and tokenizes, as `specfill complete --target URL` settings say how to reach it."""
    for name in LOCAL_ONLY:
        if getattr(args, name) != p.get_default(name):
            flag = "--" + name.replace("_", "-")
            p.error(f"{flag} chooses local models or their decoding; a remote target decodes on its server")
    from lsp.settings import SettingsError, parse_assignment, settings_from

    raw: dict = {"targetModel": args.target}
    try:
        for item in args.set:
            name, value = parse_assignment(item)
            if name not in REMOTE_SETTINGS:
                p.error(f"--set {name}: not a remote target's setting (one of {', '.join(REMOTE_SETTINGS)})")
            raw[name] = value
        if args.backend is not None:
            raw["remote.backend"] = args.backend
        settings = settings_from(raw)
    except SettingsError as exc:
        p.error(str(exc))

    from engine import GenerationSettings, ModelLoadError
    from engine.remote import RemoteError, TextPrompt
    from lsp.backend import remote_engine

    try:
        engine = remote_engine(settings)     # the same settings -> client as `serve` and `complete`
    except ModelLoadError as exc:
        print(f"{p.prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    gen = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                             top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    try:
        result = engine.generate(TextPrompt(prompt), gen)
    except RemoteError as exc:      # one line, never the key (engine/remote.py)
        print(f"{p.prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        engine.close()
    info, s = engine.info, result.stats
    stats = {"url": engine.settings.base_url, "backend": info.backend if info else None,
             "model": info.model if info else "", "new_tokens": s.new_tokens, "latency_ms": s.latency_ms,
             # the server's own figures (llama.cpp sends them with its last event; 0 when not)
             "prompt_tokens": s.prefill_tokens + s.reused_tokens, "cached_prompt_tokens": s.reused_tokens,
             "prompt_ms": s.prefill_ms}
    if args.json:
        print(json.dumps({"text": result.text, "stop_reason": result.stop_reason, "stats": stats}))
    else:
        print(result.text)
        print(f"[{s.new_tokens} tokens in {s.latency_ms:.0f} ms from {stats['url']} ({stats['backend']}), "
              f"prompt {stats['prompt_tokens']} tokens ({s.reused_tokens} cached), "
              f"stop: {result.stop_reason}]", file=sys.stderr)
    return 0
