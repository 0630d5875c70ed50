"""Pieces every benchmark here shares: where things are, the draft configurations compared, the
command line's parser and the options most benchmarks take, a real server over stdio (started,
waited on), prompts for an engine, a forward-pass counter.

Nothing heavy at import time: `specfill bench` imports this before torch may load.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from pathlib import Path

from bench.eval import file_set
from bench.lsp_client import LspClient, initialize_params
from lsp import commands
from lsp.arguments import EXIT_USAGE, OneLineParser, number

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = Path(__file__).resolve().parent / "files"      # not in the default pair's training data, but
                                                               # tuned on: bench/eval is the evaluation set
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# The ways of drafting compared everywhere, as server settings and options over the base settings:
# "default" is as shipped (draft model + prompt lookup under the cost-aware policy).
DRAFT_CONFIGS: dict[str, dict] = {
    "no-draft": {"draftModel": "none"},
    "ngram": {"draftModel": "ngram"},                                        # prompt lookup only
    "draft": {"promptLookup": False},            # the draft model alone
    "default": {},
}


def bench_parser(prog: str, doc: str, description: str | None = None) -> OneLineParser:
    """A benchmark's command line: a bad one is a one-line error; `--help` shows `description`
    (by default the first line of `doc`, the module's docstring), the options, then all of `doc`
    as written."""
    return OneLineParser(prog=prog, description=doc.splitlines()[0] if description is None else description,
                         formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)


def add_file_options(ap: argparse.ArgumentParser,
                     files_help: str | None = "folder of held-out .py files, or tuning (bench/files) or eval "
                                              "(bench/eval: code nothing shipped was trained or tuned on)",
                     max_files_help: str | None = None, max_files_default: int | None = 3) -> None:
    """--files (a folder of .py files, bench/files by default, or a named set: bench.eval.file_set)
    and --max-files (how many of them, at least 1)."""
    ap.add_argument("--files", type=file_set, default=DEFAULT_FILES, help=files_help)
    ap.add_argument("--max-files", type=number(int, 1), default=max_files_default, help=max_files_help)


def add_model_options(ap: argparse.ArgumentParser, target_help: str | None = None,
                      draft_help: str | None = None) -> None:
    """--target and --draft: the servers' targetModel and draftModel settings ("default" by default)."""
    ap.add_argument("--target", default="default", help=target_help)
    ap.add_argument("--draft", default="default", help=draft_help)


def add_set_option(ap: argparse.ArgumentParser, help: str) -> None:
    """--set NAME=VALUE, repeatable: any other server setting or option (checked by
    bench.replay.server_settings)."""
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help=help)


def usage_error(prog: str, message) -> int:
    """Says what is wrong with the command line in one line on stderr; returns the exit code."""
    print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
    return EXIT_USAGE


def rotated(names: list[str], i: int) -> list[str]:
    """`names` starting at the i-th: who goes first changes from one request to the next, so
    no configuration always runs right after the same other one."""
    if not names:
        return []
    i %= len(names)
    return names[i:] + names[:i]


def server_env(threads: int = 0, root: Path = ROOT) -> dict:
    """The environment of a benchmarked server: the checkout at `root` importable, `threads` torch
    threads (0: the engine's own policy)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
           "TOKENIZERS_PARALLELISM": "false"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def server_command(settings: dict, root: Path = ROOT) -> tuple[list[str], dict]:
    """The command that starts a server of the checkout at `root` with `settings` (settings and
    options in one dict, as bench/ writes them), and the settings section it is initialized with:
    the options go on its command line (`--option NAME=VALUE`). A checkout from before server
    options took every name in its settings section, and gets them all there."""
    command = [sys.executable, "-m", "lsp", "--log-level", "warning"]
    if root != ROOT and "--option" not in (root / "lsp" / "cli.py").read_text(encoding="utf-8"):
        return command, settings
    from lsp.settings import split_options

    section, options = split_options(settings)
    for name, value in options.items():
        command += ["--option", f"{name}={json.dumps(value) if isinstance(value, bool) else value}"]
    return command, section


async def start_server(name: str, settings: dict, env: dict, log_dir: Path, root: Path = ROOT) -> LspClient:
    """A real server over stdio, initialized with `settings` and started with the options among
    them (`server_command`; its stderr in log_dir/server-NAME.log); `root`: the checkout it runs
    from (another commit's, for a side-by-side run)."""
    command, section = server_command(settings, root)
    client = await LspClient.start(command, env, log_dir / f"server-{name}.log", cwd=str(root))
    await client.request("initialize", initialize_params(section, root))
    await client.notify("initialized", {})
    return client


async def start_servers(settings: dict[str, dict], env: dict, log_dir: Path,
                        roots: dict[str, Path] | None = None) -> dict[str, LspClient]:
    """One server per configuration, each loaded before the next starts: a load measures its
    matmul kernels (engine/forward/matmul.py), and loads side by side on 2 cores made those measurements
    disagree (the servers of one run took different kernels for the same model). `roots`: the
    checkout a configuration's server runs from (another commit's, for a side-by-side run; by
    default this one). On a failure the ones started are closed."""
    clients: dict[str, LspClient] = {}
    try:
        for name, s in settings.items():
            root = (roots or {}).get(name, ROOT)
            own_env = env if root == ROOT else {**env, "PYTHONPATH": str(root)}
            clients[name] = await start_server(name, s, own_env, log_dir, root=root)
            await wait_loaded(clients[name])
    except BaseException:
        await close_all(clients)
        raise
    return clients


async def close_all(clients: dict[str, LspClient]) -> None:
    for client in clients.values():
        await client.close()


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


def held_out_prompts(n: int, chars: int, seed: int = 0) -> list[str]:
    """`n` left-to-right prompts: the last `chars` characters before a random line of pygls's
    source (installed with the server; not in the default pair's training data)."""
    import pygls
    files = sorted(p for p in Path(pygls.__file__).parent.rglob("*.py") if p.stat().st_size > 2000)
    rng = random.Random(seed)
    prompts = []
    while len(prompts) < n:
        text = rng.choice(files).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        cut = rng.randrange(len(lines) // 4, len(lines))
        prompts.append("".join(lines[:cut])[-chars:])
    return prompts


def prompt_ids(engine, text: str) -> tuple[list[int], list[int] | None]:
    """`text` as a left-to-right prompt for the engine's target (BOS first) and for its draft
    model (its own tokenizer; None without one)."""
    target = [engine.target.tokenizer.bos_token_id] + engine.target.vocab.encode_text(text)
    if engine.draft is None:
        return target, None
    from completion.pipeline import left_to_right_draft_text

    bos = engine.draft.tokenizer.bos_token_id
    text = left_to_right_draft_text(text, engine.draft.model, engine.draft.vocab.encode_text)   # as `specfill generate`
    return target, ([bos] if bos is not None else []) + engine.draft.vocab.encode_text(text)


class CallCounter:
    """Counts a model's forward passes."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.calls += 1
