"""lsp/settings.py, lsp/positions.py and CLI argument parsing: pure functions, no server."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from completion.context import MAX_DOCUMENT_CHARS
from engine.settings import DEVICES, DTYPES, MAX_DRAFT_LENGTH
from lsp.cli import parse_location, parse_tcp
from lsp.positions import split_lines, to_client, to_codepoints
from lsp.settings import (FIELDS, FIM_TEMPLATES, OPTION_FIELDS, REMOTE_FIELDS, Options, Remote, Settings,
                          SettingsError, closest_setting, document_too_large, integer_pattern,
                          markdown_table, options_markdown_table, options_schema, parse_assignment,
                          parse_options, parse_settings, parse_settings_leniently, removed_setting,
                          schema, settings_from, split_options, unknown_keys, unknown_setting)


def test_defaults_name_the_builtin_pair_and_keep_remote_code_off():
    s = Settings()
    assert (s.targetModel, s.draftModel, s.draftLength) == ("default", "default", "auto")
    assert s.trustRemoteCode is False and s.enable is True and s.temperature == 0.0


def test_values_are_applied_and_coerced():
    s = parse_settings({"draftLength": "4", "multiline": "Never", "temperature": 0.5,
                        "maxNewTokens": 32.0, "enable": "false", "device": "CUDA",
                        "draftModel": "NGRAM", "fimTemplate": "StarCoder"}, Settings())
    assert (s.draftLength, s.multiline, s.temperature, s.maxNewTokens) == (4, "never", 0.5, 32)
    assert (s.enable, s.device, s.draftModel, s.fimTemplate) == (False, "cuda", "ngram", "starcoder")
    assert parse_settings({"draftLength": "AUTO"}, s).draftLength == "auto"
    assert parse_settings({"device": "CUDA:1"}, s).device == "cuda:1"


def test_missing_keys_keep_previous_and_null_resets_to_default():
    prev = parse_settings({"maxNewTokens": 9, "timeBudgetMs": 5}, Settings())
    s = parse_settings({"maxNewTokens": None}, prev)
    assert s.maxNewTokens == Settings().maxNewTokens and s.timeBudgetMs == 5
    assert parse_settings(None, prev) is prev


def test_the_remote_connection_is_one_object_whose_keys_apply_one_by_one():
    s = parse_settings({"targetModel": "http://h:1", "remote": {"backend": "LlamaCpp", "readTimeoutMs": "500"}},
                       Settings())
    assert s.remote == Remote(backend="llamacpp", readTimeoutMs=500)
    # as in the section itself: a key left out keeps its value, null is its default
    s = parse_settings({"remote": {"apiKeyEnv": "TEAM_KEY", "readTimeoutMs": None}}, s)
    assert s.remote == Remote(backend="llamacpp", apiKeyEnv="TEAM_KEY")
    assert parse_settings({"remote": None}, s).remote == Remote()
    # VS Code names a nested setting with a dot: the same object
    assert parse_settings({"remote.backend": "openai", "remote": {"verifyTls": False}}, Settings()).remote == \
        Remote(backend="openai", verifyTls=False)
    # the key is a secret in what the server shows
    keyed = parse_settings({"remote": {"apiKey": "sekrit"}}, Settings())
    assert keyed.to_dict()["remote"]["apiKey"] == "(set)" and "sekrit" not in repr(keyed)


def test_the_settings_table_loads_no_torch_and_reads_the_engines_own_limits():
    probe = ("import sys, lsp.settings, lsp.cli, lsp.server; "
             "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    # lsp/engine_limits.py reads the engine's source: the same values the engine imports
    import engine.remote
    import engine.settings
    from lsp import engine_limits
    for name in ("MAX_DRAFT_LENGTH", "DEVICES", "DEVICE_PATTERN", "DTYPES", "QUANTIZE"):
        assert getattr(engine_limits, name) == getattr(engine.settings, name), name
    assert engine_limits.BACKENDS == engine.remote.BACKENDS


@pytest.mark.parametrize("typed, meant", [
    ("maxNewToken", "maxNewTokens"), ("draftLenght", "draftLength"), ("Temperature", "temperature"),
    ("specfill.maxLines", "maxLines"), ("enabled", "enable"), ("tempreature", "temperature"),
    ("remote.apikey", "remote.apiKey"), ("remote.readTimeout", "remote.readTimeoutMs"), ("remot", "remote"),
    ("xyzzy", None),
])
def test_an_unknown_setting_is_named_with_the_closest_known_one(typed, meant):
    line = unknown_setting(typed)
    assert line.startswith(f"unknown setting {typed!r} (")
    if meant:
        assert closest_setting(typed) == meant and f"did you mean {meant}?" in line
    else:
        assert closest_setting(typed) is None and "known: enable, " in line
        # an editor's notice stays one line: it says where the list is instead
        short = unknown_setting(typed, list_known=False)
        assert "lsp.settings --markdown" in short and len(short) < 100
    # the command line says the same (parse_assignment is what --set runs)
    with pytest.raises(SettingsError) as err:
        parse_assignment(f"{typed}=1")
    assert str(err.value) == line


def test_names_are_derived_from_the_table():
    # Whatever the table holds: every field is known, and a field's own name is never unknown.
    for name in [*FIELDS, "remote", *(f"remote.{k}" for k in REMOTE_FIELDS)]:
        assert closest_setting(name) == name
        assert unknown_keys({name: None}) == []
    assert unknown_keys({"remote": {"apikey": "x", "backend": "auto"}}) == ["remote.apikey"]


@pytest.mark.parametrize("name, where", [
    ("kvReuse", "server option (specfill serve --option kvReuse=VALUE)"),
    ("debounceMs", "server option (specfill serve --option debounceMs=VALUE)"),
    ("maxDocumentChars", "server option"), ("cudaGraphs", "server option"), ("fimLayout", "server option"),
    ("apiKey", "it is specfill.remote.apiKey"), ("backend", "it is specfill.remote.backend"),
    ("readTimeoutMs", "it is specfill.remote.readTimeoutMs"),
])
def test_a_removed_setting_is_one_line_saying_where_it_went(name, where):
    """An editor that still sends a setting that became a server option or moved into `remote`:
    one line saying so; the rest of the section applies."""
    line = unknown_setting(name, list_known=False)
    assert line.startswith(f"specfill.{name} is no longer a setting") and where in line and "\n" not in line
    assert removed_setting(f"specfill.{name}") == line
    raw = {name: True, "maxNewTokens": 7}
    assert unknown_keys(raw) == [name]
    assert parse_settings(raw, Settings()) == Settings(maxNewTokens=7)   # ignored, nothing else lost


def test_a_document_is_too_large_past_max_document_chars():
    assert document_too_large(2000, 2000) is None
    why = document_too_large(2001, 2000)
    assert why.startswith("2001 characters, over maxDocumentChars (2000)")


def test_an_editors_section_keeps_its_valid_values_when_one_is_invalid():
    prev = parse_settings({"maxNewTokens": 9}, Settings())
    s, errors = parse_settings_leniently({"targetModel": "/models/x", "temperature": 5, "maxNewTokens": None}, prev)
    assert (s.targetModel, s.temperature, s.maxNewTokens) == ("/models/x", 0.0, Settings().maxNewTokens)
    assert [e.name for e in errors] == ["temperature"]
    same, errors = parse_settings_leniently(["not", "an", "object"], prev)
    assert same is prev and len(errors) == 1


def test_unknown_keys_are_ignored_but_reported():
    raw = {"draftLenght": 3, "trace": {"server": "verbose"}, "server": {"command": "specfill"},
           "maxNewTokens": 5}
    assert parse_settings(raw, Settings()).maxNewTokens == 5
    assert unknown_keys(raw) == ["draftLenght"]


@pytest.mark.parametrize("name, value", [
    ("draftLength", 0), ("draftLength", 17), ("draftLength", "fast"), ("draftLength", 2.5),
    ("maxNewTokens", True), ("maxNewTokens", -1), ("temperature", "hot"),
    ("temperature", float("nan")), ("temperature", 3), ("multiline", "sometimes"),
    ("enable", 1), ("device", "tpu"), ("device", "cuda:"), ("device", "cuda:x"), ("device", "mps:1"),
    ("dtype", "int4"), ("fimTemplate", "gpt"), ("targetModel", ""), ("targetModel", "none"),
    ("draftModel", 3), ("trustRemoteCode", "yes please"), ("remote", 5), ("remote.readTimeoutMs", 50),
    ("remote.backend", "grpc"), ("remote.apiKeyEnv", "NOT A NAME"), ("remote.verifyTls", "no"),
])
def test_invalid_values_name_setting_value_and_allowed(name, value):
    with pytest.raises(SettingsError) as err:
        parse_settings({name: value, "maxNewTokens": 3} if name != "maxNewTokens" else {name: value},
                       Settings())
    msg = str(err.value)
    assert f"specfill.{name}: {value!r}" in msg and "allowed:" in msg and "\n" not in msg


@pytest.mark.parametrize("name, value", [
    ("fimLayout", "mps"), ("debounceMs", 10**6), ("maxDocumentChars", "big"), ("cudaGraphs", 1),
    ("cudaGraphs", "on"), ("draftPromptTokens", 8), ("extraContextFrom", "open,nowhere"), ("datastore", ""),
])
def test_invalid_options_name_option_value_and_allowed(name, value):
    with pytest.raises(SettingsError) as err:
        parse_options({name: value})
    assert f"option {name}: {value!r}" in str(err.value) and "allowed:" in str(err.value)


def test_options_are_no_editor_setting_and_come_apart_from_the_settings():
    values = {"maxNewTokens": 5, "kvReuse": False, "remote.readTimeoutMs": 400, "debounceMs": 7}
    section, options = split_options(values)
    assert section == {"maxNewTokens": 5, "remote.readTimeoutMs": 400}
    assert options == {"kvReuse": False, "debounceMs": 7}
    s = settings_from(values)
    assert (s.maxNewTokens, s.remote.readTimeoutMs) == (5, 400)
    assert s.options == Options(kvReuse=False, debounceMs=7)
    # an editor's section cannot set one: it keeps the options it had
    assert parse_settings(values, s).options == s.options
    assert parse_settings({"kvReuse": True}, s).options.kvReuse is False
    # the settings the server shows are an editor's; the options apart
    assert set(s.to_dict()) == {*FIELDS, "remote"} and s.options.to_dict()["debounceMs"] == 7
    with pytest.raises(SettingsError, match="did you mean kvReuse"):
        settings_from({"kvReuse": False, "kvReus": True})
    with pytest.raises(SettingsError, match="maxNewTokens is a setting, not a server option"):
        parse_options({"maxNewTokens": 3})
    with pytest.raises(SettingsError, match=r"unknown option 'debounce' \(did you mean debounceMs\?\)"):
        parse_assignment("debounce=3", options_only=True)


def test_section_must_be_an_object():
    with pytest.raises(SettingsError, match="object"):
        parse_settings(["draftLength", 4], Settings())


def test_fim_choices_match_the_completion_templates():
    from completion.templates import FAMILIES, LAYOUTS

    assert set(FIM_TEMPLATES) == set(FAMILIES)
    assert set(OPTION_FIELDS["fimLayout"].metadata["choices"]) == {"auto", *LAYOUTS}


def test_schema_cli_lists_every_setting_with_default_and_description():
    out = subprocess.run([sys.executable, "-m", "lsp.settings", "--schema"], check=True,
                         capture_output=True, text=True).stdout
    entries = {e["name"]: e for e in json.loads(out)}
    assert list(entries) == [*FIELDS, *(f"remote.{k}" for k in REMOTE_FIELDS)]
    for name, f in [*FIELDS.items(), *((f"remote.{k}", f) for k, f in REMOTE_FIELDS.items())]:
        assert entries[name]["default"] == f.default and entries[name]["description"]
    assert entries["multiline"]["enum"] == ["auto", "always", "never"]
    assert entries["draftLength"]["min"] == 1 and entries["draftLength"]["max"] == MAX_DRAFT_LENGTH
    assert entries["remote.apiKey"]["secret"] is True
    assert len(markdown_table().splitlines()) == len(entries) + 2
    assert [e["name"] for e in schema()] == list(entries)
    assert len(entries) <= 30 and not set(entries) & set(OPTION_FIELDS)
    assert [e["name"] for e in options_schema()] == list(OPTION_FIELDS)
    assert len(options_markdown_table().splitlines()) == len(OPTION_FIELDS) + 2


def test_an_integer_range_is_one_pattern_for_python_and_javascript():
    import re

    for lo, hi in [(0, 0), (1, 16), (16, 32768), (0, 5000), (9, 10), (100, 600000), (123, 4567)]:
        pattern = re.compile(f"^({integer_pattern(lo, hi)})$")
        assert [n for n in range(0, 2 * hi + 20) if pattern.match(str(n))] == list(range(lo, hi + 1))
        assert not pattern.match(f"0{lo}") and not pattern.match(f"-{lo}") and not pattern.match(f"{lo}.0")
    assert integer_pattern(1, 16) == "[1-9]|1[0-6]"


def test_limits_and_lists_are_the_lower_layers_own():
    """The server keeps no document the pipeline would refuse, and offers exactly the devices,
    dtypes and draft lengths the engine takes."""
    entries = {e["name"]: e for e in schema()}
    assert {e["name"]: e for e in options_schema()}["maxDocumentChars"]["max"] == MAX_DOCUMENT_CHARS
    assert entries["dtype"]["enum"] == list(DTYPES)
    for device in DEVICES:
        assert parse_settings({"device": device}, Settings()).device == device
    parse_settings({"draftLength": MAX_DRAFT_LENGTH}, Settings())
    with pytest.raises(SettingsError):
        parse_settings({"draftLength": MAX_DRAFT_LENGTH + 1}, Settings())
    with pytest.raises(SettingsError):
        parse_options({"maxDocumentChars": MAX_DOCUMENT_CHARS + 1})


def test_the_engine_takes_every_device_the_settings_accept():
    import torch

    from engine.load.models import ModelLoadError, pick_device

    assert pick_device(parse_settings({"device": "cpu"}, Settings()).device) == torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count:
        assert pick_device("cuda:0") == torch.device("cuda", 0)
    if count < 8:   # no such GPU here: one clear line, not a torch error at the first forward
        with pytest.raises(ModelLoadError, match="cuda:7"):
            pick_device(parse_settings({"device": "cuda:7"}, Settings()).device)
    with pytest.raises(ModelLoadError, match="tpu"):
        pick_device("tpu")


def test_cuda_graphs_is_an_off_by_default_option_of_the_loaded_models():
    assert Options().cudaGraphs is False
    on = settings_from({"cudaGraphs": True})
    assert on.options.cudaGraphs is True
    assert settings_from({"cudaGraphs": "FALSE"}, on).options.cudaGraphs is False
    assert settings_from({"cudaGraphs": None}, on).options.cudaGraphs is False   # null: the default
    assert parse_assignment("cudaGraphs=true") == ("cudaGraphs", True)
    assert parse_assignment("cudaGraphs=true", options_only=True) == ("cudaGraphs", True)
    # Graphs are captured per loaded model: models with and without them are not the same load.
    assert on.model_key() != Settings().model_key()
    assert on.replace(options=Options()).model_key() == Settings().model_key()


def test_the_readme_settings_table_is_the_generated_one():
    """README.md holds `python -m lsp.settings --markdown` verbatim (regenerate it from there)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text().split("\n")
    start = readme.index("| Setting | Default | Allowed | Description |")
    end = start
    while end < len(readme) and readme[end].startswith("|"):
        end += 1
    assert "\n".join(readme[start:end]) == markdown_table()


def test_command_line_assignments_are_validated_like_editor_settings():
    assert parse_assignment("maxNewTokens=32") == ("maxNewTokens", 32)
    assert parse_assignment("kvReuse=false") == ("kvReuse", False)
    assert parse_assignment("fimLayout=PSM") == ("fimLayout", "psm")
    assert parse_assignment("device=cuda:1") == ("device", "cuda:1")
    assert parse_assignment("targetModel=/models/a=b") == ("targetModel", "/models/a=b")
    assert parse_assignment("remote.readTimeoutMs=500") == ("remote.readTimeoutMs", 500)
    for bad in ("maxNewTokens", "draftLenght=3", "draftLength=99", "=3", "remote.timeout=3",
                "remote.readTimeoutMs=5"):
        with pytest.raises(SettingsError):
            parse_assignment(bad)
    with pytest.raises(SettingsError, match="it is specfill.remote.apiKeyEnv"):
        parse_assignment("apiKeyEnv=KEY")


def test_tcp_binds_loopback_unless_a_host_is_given():
    assert parse_tcp("9000") == ("127.0.0.1", 9000)
    assert parse_tcp(":9000") == ("127.0.0.1", 9000)
    assert parse_tcp("0.0.0.0:9000") == ("0.0.0.0", 9000)
    for bad in ("x:y", "host:0", "host:70000"):
        with pytest.raises(Exception):
            parse_tcp(bad)


def test_complete_location_is_one_based():
    assert parse_location("a/b.py:3:7") == ("a/b.py", 3, 7)
    assert parse_location("C:/x.py:1:1") == ("C:/x.py", 1, 1)
    for bad in ("b.py:3", "b.py:0:1", "b.py:x:1"):
        with pytest.raises(Exception):
            parse_location(bad)


LINE = 'x = "😋" + é  # ok'


@pytest.mark.parametrize("encoding, units_after_emoji", [("utf-16", 5 + 2), ("utf-8", 5 + 4)])
def test_positions_round_trip_through_non_ascii(encoding, units_after_emoji):
    codec = PositionCodec(types.PositionEncodingKind(encoding))
    lines = split_lines(LINE + "\nnext\n")
    after_emoji = LINE.index("😋") + 1          # codepoint column 6
    client = to_client(lines, codec, 0, after_emoji)
    assert client.character == units_after_emoji
    assert to_codepoints(lines, codec, client) == (0, after_emoji)
    end = to_client(lines, codec, 0, len(LINE))
    assert to_codepoints(lines, codec, end) == (0, len(LINE))
    # Past the end of the line clamps to its end; a missing line is None.
    assert to_codepoints(lines, codec, types.Position(0, 999)) == (0, len(LINE))
    assert to_codepoints(lines, codec, types.Position(2, 0)) == (2, 0)   # after final newline
    assert to_codepoints(lines, codec, types.Position(3, 0)) is None


def test_lines_split_only_at_lsp_line_breaks():
    assert split_lines("a\x0cb\r\nc\rd\u2028e\n") == ("a\x0cb\r\n", "c\r", "d\u2028e\n")
    assert split_lines("") == () and split_lines("x") == ("x",)
    codec = PositionCodec()
    assert to_codepoints(split_lines(""), codec, types.Position(0, 4)) == (0, 0)


def test_every_value_the_vscode_settings_ui_can_send_is_accepted():
    manifest = Path(__file__).resolve().parents[2] / "editors" / "vscode" / "package.json"
    if not manifest.exists():
        pytest.skip("no VS Code extension manifest in this checkout")
    config = json.loads(manifest.read_text())["contributes"]["configuration"]
    sections = config if isinstance(config, list) else [config]
    props = {k: v for section in sections for k, v in section["properties"].items()}
    entries = {e["name"]: e for e in schema()}
    names = {k.split(".", 1)[1]: v for k, v in props.items() if k.split(".", 1)[1] in entries}
    assert set(names) == set(entries)
    assert not any(f"specfill.{name}" in props for name in OPTION_FIELDS)   # options are no editor setting
    for name, prop in names.items():
        assert parse_settings({name: prop["default"]}, Settings()) == Settings(), name
        assert len(prop.get("enum", [])) <= 20, name   # choices, never a list of every number
        for value in prop.get("enum", []):
            parse_settings({name: value}, Settings())
        for bound in ("minimum", "maximum"):
            if bound in prop:
                parse_settings({name: prop[bound]}, Settings())
        if "pattern" in prop:   # the settings UI checks typed text against it, as JavaScript would
            assert prop["pattern"] == entries[name]["pattern"]
    # `auto` or an integer: text the pattern takes is exactly what the server takes
    import re

    draft_length = re.compile(names["draftLength"]["pattern"])
    assert names["draftLength"]["type"] == "string"
    for typed in ["auto", *map(str, range(-2, MAX_DRAFT_LENGTH + 5)), "04", "4.0", "fast", ""]:
        try:
            parse_settings({"draftLength": typed}, Settings())
            takes = typed == typed.strip() and not typed.startswith("0")
        except SettingsError:
            takes = False
        assert bool(draft_length.match(typed)) == takes, typed
    assert manifest.stat().st_size < 100_000
