"""The `datastore` server option and `specfill generate --datastore`: validated like every
setting, a model key, and on the command line a file that cannot serve the target is one line naming it
(exit 2, as other load errors); `none` and `auto` both work on the shipped pair, give the same
greedy text, and only `auto` (the pair ships a datastore.npz) has lookup proposals from it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.drafters import datastore
from lsp.cli import complete_main
from lsp.settings import Options, Settings, SettingsError, parse_assignment, parse_options, settings_from
from tests.e2e.test_cli_errors import assert_one_line_error, in_process

pytestmark = pytest.mark.timeout(300)

PROMPT = "def fib(n):\n    if n < 2:\n        return n\n"


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("datastore") / "prompt.py"
    path.write_text(PROMPT)
    return str(path)


def generate(capsys, prompt_file: str, *args: str) -> tuple[int, str, str]:
    return in_process(["generate", "--prompt-file", prompt_file, "--max-new-tokens", "32", *args], capsys)


def test_the_option_is_auto_by_default_keeps_a_paths_case_and_names_the_loaded_models():
    assert Options().datastore == "auto"
    assert parse_options({"datastore": " NONE "}).datastore == "none"
    assert parse_options({"datastore": "Auto"}).datastore == "auto"
    assert parse_options({"datastore": "/Stores/Mine.npz"}).datastore == "/Stores/Mine.npz"
    assert parse_options({"datastore": None}, Options(datastore="none")).datastore == "auto"
    assert parse_assignment("datastore=none") == ("datastore", "none")
    assert settings_from({"datastore": "none"}).model_key() != Settings().model_key()
    for bad in ("", "   ", 3, True):
        with pytest.raises(SettingsError, match="option datastore"):
            parse_options({"datastore": bad})


def test_a_missing_datastore_file_is_one_line_naming_it(prompt_file, capsys):
    code, out, err = generate(capsys, prompt_file, "--draft", "ngram", "--datastore", "/nonexistent.npz")
    assert_one_line_error(code, out, err, "specfill generate: ", "'/nonexistent.npz'", "no such file")


def test_a_datastore_that_cannot_serve_the_target_is_one_line_naming_it(prompt_file, tmp_path, capsys):
    weights = tmp_path / "weights.npz"   # some other program's arrays
    np.savez(weights, weights=np.zeros(3))
    code, out, err = generate(capsys, prompt_file, "--datastore", str(weights))
    assert_one_line_error(code, out, err, str(weights), "not a datastore file")

    other = tmp_path / "other.npz"   # ids of a tokenizer that is not the shipped target's
    datastore.save(other, [([1, 2], [3, 4, 5])], {"a": 0, "b": 1})
    code, out, err = generate(capsys, prompt_file, "--datastore", str(other))
    assert_one_line_error(code, out, err, str(other), "made for another tokenizer")


def test_complete_reports_a_missing_datastore_like_a_bad_model(tmp_path, capsys):
    source = tmp_path / "a.py"
    source.write_text(PROMPT)
    code, out, err = in_process([f"{source}:3:17", "--set", "datastore=/nonexistent.npz"], capsys,
                                entry=complete_main)
    assert_one_line_error(code, out, err, "'/nonexistent.npz'", "no such file")


def test_a_remote_target_refuses_the_option(prompt_file, capsys):
    code, out, err = generate(capsys, prompt_file, "--target", "http://127.0.0.1:9", "--datastore", "none")
    assert_one_line_error(code, out, err, "--datastore", "a remote target decodes on its server")


def test_none_and_auto_give_the_same_text_and_only_auto_drafts_from_the_store(prompt_file, capsys):
    answers = {}
    for setting in ("none", "AUTO"):
        code, out, err = generate(capsys, prompt_file, "--datastore", setting, "--json")
        assert code == 0, err
        answers[setting] = json.loads(out)
    assert answers["none"]["text"] == answers["AUTO"]["text"]       # lossless either way
    assert "datastore" not in answers["none"]["stats"]["lookup"]["proposed"]
    lookup = answers["AUTO"]["stats"]["lookup"]
    assert lookup["proposed"]["datastore"] >= 1
    assert 0 <= lookup["agreed"]["datastore"] <= lookup["tokens"]["datastore"]
