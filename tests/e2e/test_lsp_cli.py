"""`specfill complete` and `specfill serve` as processes (through the command line in cli/),
with the real tiny model pair."""
from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types

from lsp import commands
from lsp.cli import complete_main

from tests.e2e.lsp_helpers import (ROOT, SERVER_ENV, init_params, make_client, reference,
                         stop_client, tiny_pair, wait_until)

pytestmark = pytest.mark.timeout(300)

SPECFILL = [sys.executable, "-m", "cli"]   # what the `specfill` script runs
SOURCE = "import os\n\n\ndef walk(root):\n    for name in os.listdir(root):\n        \n"
AT = (6, 9)   # 1-based: the empty indented line


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SPECFILL, *args], capture_output=True, text=True, env=SERVER_ENV,
                          cwd=ROOT, timeout=240)


def model_args() -> list[str]:
    target, draft = tiny_pair()
    # the same settings as tests/e2e/lsp_helpers.tiny_options, so `reference` applies
    return ["--target", target, "--draft", draft, "--device", "cpu", "--dtype", "float32",
            "--set", "extraTokens=0", "--max-new-tokens", "24"]


@pytest.fixture(scope="module")
def source_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "walk.py"
    path.write_text(SOURCE)
    return path


def test_an_empty_answer_keeps_its_run_in_json_and_says_why(source_file, capsys):
    """At the end of the `def` line with one-line answers the tiny pair's first line is empty:
    nothing is shown, but --json carries what was decoded and what cut it."""
    line, col = 4, len("def walk(root):") + 1
    assert reference(source_file.resolve().as_uri(), SOURCE, line - 1, col - 1, maxNewTokens=24,
                     multiline="never") == ""
    done = run("complete", f"{source_file}:{line}:{col}", *model_args(), "--multiline", "never", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"] == ""
    stats = out["stats"]
    assert stats["decoded_tokens"] >= 1 and stats["stop_reason"] and stats["cut_by"] == "newline", stats
    assert "before any text" in stats["empty_reason"], stats
    # without --json: nothing on stdout, one line on stderr saying why
    assert complete_main([f"{source_file}:{line}:{col}", *model_args(), "--multiline", "never"]) == 0
    out, err = capsys.readouterr()
    last = err.splitlines()[-1]   # (what comes before it: the tiny pair being built in this process)
    assert out == "" and last.startswith("specfill complete: nothing to show here: "), err
    assert stats["empty_reason"] in last, err


def test_complete_prints_what_the_server_pipeline_gives(source_file, capsys):
    line, col = AT
    expected = reference(source_file.resolve().as_uri(), SOURCE, line - 1, col - 1, maxNewTokens=24)
    assert expected, "the tiny pair should complete here"
    done = run("complete", f"{source_file}:{line}:{col}", *model_args(), "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["text"] == expected
    assert out["stats"]["new_tokens"] >= 1 and "latency_ms" in out["stats"]
    # without --json: the ghost text itself (in-process: the same function the command runs)
    assert complete_main([f"{source_file}:{line}:{col}", *model_args()]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected.rstrip("\n")


# `specfill complete` as the script runs it (cli.main.main with no arguments), with an exit hook
# that says on stderr whether Python's finalization ran
AS_SCRIPT = ("import atexit, sys\n"
             "atexit.register(lambda: print('finalized', file=sys.stderr))\n"
             "from cli.main import main\n"
             "sys.exit(main())\n")


def test_complete_ends_its_process_once_the_answer_is_written(source_file):
    """The command line ends its process right after the answer (no seconds of torch's teardown):
    the answer, piped, is whole; refusals keep their exit code and their line."""
    line, col = AT
    expected = reference(source_file.resolve().as_uri(), SOURCE, line - 1, col - 1, maxNewTokens=24)
    done = subprocess.run([sys.executable, "-c", AS_SCRIPT, "complete", f"{source_file}:{line}:{col}", *model_args()],
                          capture_output=True, text=True, env=SERVER_ENV, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip("\n") == expected.rstrip("\n")
    assert "finalized" not in done.stderr
    refused = subprocess.run([sys.executable, "-c", AS_SCRIPT, "complete", f"{source_file}:99:1", *model_args()],
                             capture_output=True, text=True, env=SERVER_ENV, cwd=ROOT, timeout=240)
    assert refused.returncode == 2 and "has 6 lines" in refused.stderr and "finalized" not in refused.stderr
    # other commands end as Python ends them
    version = subprocess.run([sys.executable, "-c", AS_SCRIPT, "--version"], capture_output=True, text=True,
                             env=SERVER_ENV, cwd=ROOT, timeout=240)
    assert version.returncode == 0 and "finalized" in version.stderr


@pytest.mark.parametrize("location, message", [
    ("{file}:99:1", "has 6 lines"),
    ("{file}:1:200", "asked for column 200"),
    ("/no/such/file.py:1:1", "cannot read"),
])
def test_complete_rejects_bad_locations_clearly(source_file, capsys, location, message):
    assert complete_main([location.format(file=source_file), *model_args()]) == 2
    assert message in capsys.readouterr().err


def test_complete_rejects_bad_settings_and_models_clearly(source_file, capsys):
    with pytest.raises(SystemExit) as exit_:
        complete_main([f"{source_file}:0:1"])
    assert exit_.value.code == 2 and "1-based" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        complete_main([f"{source_file}:1:1", "--draft-length", "40"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "draftLength" in err and "1-16" in err
    assert complete_main([f"{source_file}:1:1", "--target", "/no/such/model", "--draft", "none"]) == 2
    err = capsys.readouterr().err
    assert "/no/such/model" in err and "Traceback" not in err
    binary = source_file.with_name("blob.py")
    binary.write_bytes(b"abc\x00\xff\xfedef\n")
    assert complete_main([f"{binary}:1:2", *model_args()]) == 2
    assert "binary" in capsys.readouterr().err


@pytest.mark.asyncio
async def test_specfill_serve_speaks_lsp_on_stdout_only():
    client = make_client()
    await client.start_io(*SPECFILL, "serve", env=SERVER_ENV)
    try:
        result = await client.initialize_session(init_params({"enable": False}))
        assert result.capabilities.inline_completion_provider is not None
        reply = await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=commands.STATS))
        assert reply["settings"]["enable"] is False and reply["models"]["loaded"] is False
        await client.shutdown_session()
        await wait_until(lambda: client.exit_code is not None, 30, "the server to exit")
        assert client.exit_code == 0
    finally:
        await stop_client(client)


def test_the_command_line_loads_no_torch_before_a_subcommand_runs():
    # `specfill serve` points stdout at stderr first; torch must not load (and may not
    # write to stdout) before that. The engine's modules that need no model (engine.remote,
    # engine.settings) import no torch: engine/__init__.py loads the rest on first use.
    probe = ("import sys, cli.main; "
             "print(sorted(m for m in ('torch', 'transformers', 'engine.engine', 'engine.load.models') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=SERVER_ENV, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_serve_on_a_busy_port_is_one_line_and_exit_code_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run("serve", "--tcp", f"127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"specfill serve: cannot listen on 127.0.0.1:{port}: "), done.stderr
    assert "Traceback" not in done.stderr


def test_serve_in_a_terminal_says_what_it_waits_for_and_ctrl_c_ends_it_at_once():
    """A person who runs `specfill serve` gets one line on stderr (it speaks LSP on stdin, how to
    connect an editor), and the first Ctrl-C (SIGINT, as the terminal sends it) ends it."""
    terminal, tty = pty.openpty()
    try:
        server = subprocess.Popen([*SPECFILL, "serve"], stdin=tty, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env=SERVER_ENV, cwd=ROOT)
        try:
            first = server.stderr.readline().decode()
            assert first.startswith("specfill serve: waiting for an editor's LSP messages on stdin"), first
            assert "--tcp" in first and "Ctrl-C" in first, first
            time.sleep(1.0)   # well into its start: reading stdin, its worker thread up
            assert server.poll() is None
            server.send_signal(signal.SIGINT)
            assert server.wait(timeout=10) == 130
            assert server.stdout.read() == b""   # nothing on the LSP wire
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    finally:
        os.close(terminal)
        os.close(tty)
