"""The `specfill` command line's errors: each is exactly one line on stderr, plain text, exit code
2, nothing on stdout; and the two checks that come before any model loads (binary input, a hub
id that is not cached) answer without loading one."""
from __future__ import annotations

import subprocess
import sys

import pytest

from cli.main import main
from lsp.arguments import SPECFILL_VERSION
from tests.e2e.lsp_helpers import ROOT, SERVER_ENV

pytestmark = pytest.mark.timeout(300)

SPECFILL = [sys.executable, "-m", "cli"]   # what the `specfill` script runs


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SPECFILL, *args], capture_output=True, text=True,
                          env={**SERVER_ENV, **(env or {})}, cwd=ROOT, timeout=240)


def in_process(args: list[str], capsys, entry=main) -> tuple[int, str, str]:
    """`specfill ARGS` (or another command line's `entry`) in this process: exit code, stdout, stderr."""
    try:
        code = entry(args)
    except SystemExit as exit_:   # argparse exits
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *expected: str) -> None:
    assert code == 2, (code, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line:\n{err}"
    assert "`" not in err and "usage:" not in err, err
    for part in expected:
        assert part in err, err


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "ok.py"
    path.write_text("x = 1\n")
    (path.parent / "empty").mkdir()   # a folder without .py files
    (path.parent / "big.py").write_text("x = 1\n" * 200)        # 1200 characters
    (path.parent / "latin1.py").write_bytes(b"caf\xe9 = 1\n")  # not UTF-8
    return path


@pytest.mark.parametrize("args, expected", [
    (["bogus"], ["unknown command 'bogus'", "generate, complete, serve, bench"]),
    ([], ["missing command"]),
    (["complete", "{src}:x:1"], ["expected FILE:LINE:COL"]),
    (["complete", "{src}:0:1"], ["1-based"]),
    (["complete", "{src}"], ["FILE:LINE:COL"]),
    (["complete", "{src}:1:1", "--set", "draftLenght=3"], ["unknown setting 'draftLenght'", "did you mean draftLength?"]),
    (["complete", "{src}:1:1", "--set", "maxNewToken=3"], ["unknown setting 'maxNewToken'", "did you mean maxNewTokens?"]),
    (["complete", "{src}:1:1", "--set", "maxNewTokens"], ["expected NAME=VALUE"]),
    (["complete", "{big}:1:1", "--set", "maxDocumentChars=1000"], ["1200 characters, over maxDocumentChars (1000)"]),
    (["complete", "{latin1}:1:5"], ["not valid UTF-8 text (line 1, column 4)"]),
    (["complete", "{src}:1:1", "--target", "./no/such/model"], ["target model './no/such/model': no such directory"]),
    (["complete", "{src}:1:1", "--set", "maxNewTokens=lots"], ["specfill.maxNewTokens", "'lots'", "1-1024"]),
    (["complete", "{src}:1:1", "--draft-length", "40"], ["draftLength", "1-16"]),
    (["complete", "{src}:1:1", "--multiline", "sometimes"], ["multiline", "auto, always, never"]),
    (["complete", "{src}:1:1", "--device", "tpu"], ["device", "cuda:N"]),
    (["complete", "{src}:1:1", "--log-level", "loud"], ["invalid choice: 'loud'"]),
    (["complete", "{src}:9:1"], ["has 1 lines, asked for line 9"]),
    (["complete", "{src}:1:50"], ["asked for column 50"]),
    (["complete", "/no/such/file.py:1:1"], ["cannot read /no/such/file.py"]),
    (["generate", "--prompt-file", "{src}", "--temperature", "-1"], ["--temperature", "at least 0"]),
    (["generate", "--prompt-file", "{src}", "--top-p", "0"], ["--top-p"]),
    (["generate", "--prompt-file", "{src}", "--top-k", "-3"], ["--top-k"]),
    (["generate", "--prompt-file", "{src}", "--max-new-tokens", "0"], ["--max-new-tokens", "at least 1"]),
    (["generate", "--prompt-file", "{src}", "--draft-length", "99"], ["1-16"]),
    (["generate", "--prompt-file", "{src}", "--dtype", "int3"], ["invalid choice: 'int3'"]),
    (["generate", "--prompt-file", "{src}", "--device", "tpu"], ["cuda:N"]),
    (["generate", "--prompt-file", "/no/such/prompt"], ["cannot read prompt file"]),
    (["generate"], ["--prompt-file"]),
    (["serve", "--tcp", "x:y"], ["expected HOST:PORT"]),
    (["serve", "--tcp", "host:70000"], ["port out of range"]),
    (["serve", "--bogus"], ["unrecognized arguments: --bogus"]),
    (["serve", "--option", "debounceMs=lots"], ["--option: invalid value for option debounceMs: 'lots'", "0-5000"]),
    (["serve", "--option", "debounce=3"], ["unknown option 'debounce' (did you mean debounceMs?)"]),
    (["serve", "--option", "maxNewTokens=3"], ["maxNewTokens is a setting, not a server option"]),
    (["complete", "{src}:1:1", "--set", "fimLayout=mps"], ["option fimLayout", "'mps'", "psm-line"]),
    (["complete", "{src}:1:1", "--set", "remote.readTimeout=5"], ["did you mean remote.readTimeoutMs?"]),
    (["bench", "--bogus"], ["specfill bench: unrecognized arguments: --bogus"]),
    (["bench", "--configs", "full,fastest"], ["unknown configuration(s) fastest", "no-draft"]),
    (["bench", "--typed-lines", "0"], ["--typed-lines", "at least 1"]),
    (["bench", "--time-scale", "-1"], ["--time-scale", "at least 0"]),
    (["bench", "--files", "/no/such/folder"], ["--files", "cannot read /no/such/folder"]),
    (["bench", "--files", "{empty}"], ["--files", "no .py files in"]),
    (["bench", "--set", "maxNewTokens=lots"], ["--set", "specfill.maxNewTokens", "'lots'"]),
    (["bench", "--suite", "--bogus"], ["specfill bench --suite: unrecognized arguments: --bogus"]),
    (["bench", "--suite", "--workloads", "generate,typing"], ["unknown workload(s) typing", "end-of-line"]),
    (["bench", "--suite", "--configs", "fastest"], ["unknown configuration(s) fastest", "draft"]),
    (["bench", "--suite", "--prompts", "0"], ["--prompts", "at least 1"]),
    (["bench", "--suite", "--threads", "x"], ["--threads", "expected an integer"]),
    (["bench", "--suite", "--files", "/no/such/folder"], ["--files", "cannot read /no/such/folder"]),
])
def test_each_command_line_error_is_one_line_with_exit_code_2(args, expected, source, capsys):
    args = [a.replace("{src}", str(source)).replace("{empty}", str(source.parent / "empty"))
            .replace("{big}", str(source.parent / "big.py")).replace("{latin1}", str(source.parent / "latin1.py"))
            for a in args]
    assert_one_line_error(*in_process(args, capsys), *expected)


def test_version_and_help_go_to_stdout(capsys):
    for args in (["--version"], ["serve", "--version"]):
        code, out, err = in_process(args, capsys)
        assert code == 0 and err == ""
        assert out.startswith(f"specfill {SPECFILL_VERSION} (Python ") and "torch " in out
        assert "; CPU 16-bit: " in out      # which 16-bit checkpoints run in 16 bits here
        assert "; 16-bit rows kernel: " in out     # engine/forward/rows16.c, or why not
        assert out.count("\n") == 1
    code, out, err = in_process(["--help"], capsys)
    assert code == 0 and err == "" and "generate" in out and "--version" in out
    code, out, err = in_process(["complete", "--help"], capsys)
    assert code == 0 and err == "" and "FILE:LINE:COL" in out


def test_the_installed_command_answers_the_same(source):
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith(f"specfill {SPECFILL_VERSION} ")
    done = run("bogus")
    assert_one_line_error(done.returncode, done.stdout, done.stderr, "unknown command 'bogus'")
    done = run("generate", "--prompt-file", str(source), "--temperature", "-1")
    assert_one_line_error(done.returncode, done.stdout, done.stderr, "--temperature")


def test_a_binary_file_is_refused_before_any_model_loads(tmp_path):
    blob = tmp_path / "blob.py"
    blob.write_bytes(b"abc\x00\xff\xfedef\n")
    # Refused before torch is even imported (let alone a model loaded); a model that does not
    # exist would print another error if the load were reached.
    probe = ("import sys; from cli.main import main; code = main(sys.argv[1:]); "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules)); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, "complete", f"{blob}:1:2", "--target", "/no/such/model"],
                          capture_output=True, text=True, env=SERVER_ENV, cwd=ROOT, timeout=240)
    assert_one_line_error(done.returncode, "", done.stderr, "binary")
    assert done.stdout == "[]\n"
    assert "/no/such/model" not in done.stderr


@pytest.mark.parametrize("args", [
    ["complete", "{src}:1:1", "--set", "temperature=5"],
    ["complete", "{src}:1:1", "--set", "tempreature=0.5"],
    ["complete", "{src}:1:1", "--draft", "./no/such/draft"],
    ["complete", "{big}:1:1", "--set", "maxDocumentChars=1000", "--target", "/no/such/model"],
    ["generate", "--prompt-file", "{src}", "--top-k", "-3"],
], ids=["value", "name", "model-path", "document", "generate"])
def test_settings_and_arguments_are_refused_before_torch_is_imported(args, source):
    """What the command line says is checked before any model loads, and before torch and
    transformers are imported (seconds): a bad value is refused at once."""
    args = [a.replace("{src}", str(source)).replace("{big}", str(source.parent / "big.py")) for a in args]
    probe = ("import sys\nfrom cli.main import main\ntry:\n    code = main(sys.argv[1:])\n"
             "except SystemExit as exit_:\n    code = exit_.code\n"
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\nsys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                          env=SERVER_ENV, cwd=ROOT, timeout=240)
    assert_one_line_error(done.returncode, "", done.stderr)
    assert done.stdout == "[]\n"


@pytest.mark.parametrize("env", [{"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}],
                         ids=["offline", "unreachable"])
def test_an_uncached_hub_id_fails_at_once_with_one_line(tmp_path, env):
    # An empty cache and no hub: one line naming the model and the cache, no retries.
    prompt = tmp_path / "p.txt"
    prompt.write_text("def f():\n")
    done = run("generate", "--target", "someorg/not-cached-model", "--draft", "none",
               "--prompt-file", str(prompt), env={"HF_HOME": str(tmp_path / "hf"), **env})
    assert_one_line_error(done.returncode, done.stdout, done.stderr,
                          "'someorg/not-cached-model'", "not in the local Hugging Face cache")
    assert "Retrying" not in done.stderr
