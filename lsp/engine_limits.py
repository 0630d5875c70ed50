"""The engine's own lists and limits that settings are checked against (device names, dtypes,
the longest draft, the quantizations, the remote protocols), read as literals from
engine/settings.py and engine/remote.py without importing the engine.

Importing any engine module runs engine/__init__.py, which imports torch and transformers
(seconds). Settings are checked before anything loads (`specfill complete --set x=y` refuses a
bad value at once, the server answers a bad setting before a model is in memory), so they read
the engine's source instead: each name below must stay a plain literal assignment there.
tests/unit/test_lsp_settings.py checks that these equal what the engine itself imports.
"""
from __future__ import annotations

import ast
from importlib.util import find_spec
from pathlib import Path
from typing import Any


def engine_literals(module_file: str, names: tuple[str, ...]) -> dict[str, Any]:
    """`names` as assigned at the top level of the engine package's `module_file`."""
    spec = find_spec("engine")   # locates the package; does not run its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the specfill engine package is not importable")
    path = Path(list(spec.submodule_search_locations)[0]) / module_file
    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names):
            found[node.targets[0].id] = ast.literal_eval(node.value)
    missing = [n for n in names if n not in found]
    if missing:
        raise ImportError(f"engine/{module_file} no longer assigns {', '.join(missing)} as a literal")
    return found


_settings = engine_literals("settings.py", ("MAX_DRAFT_LENGTH", "DEVICES", "DEVICE_PATTERN", "DTYPES",
                                            "QUANTIZE"))
MAX_DRAFT_LENGTH: int = _settings["MAX_DRAFT_LENGTH"]
DEVICES: tuple[str, ...] = _settings["DEVICES"]
DEVICE_PATTERN: str = _settings["DEVICE_PATTERN"]
DTYPES: tuple[str, ...] = _settings["DTYPES"]
QUANTIZE: tuple[str, ...] = _settings["QUANTIZE"]
BACKENDS: tuple[str, ...] = engine_literals("remote.py", ("BACKENDS",))["BACKENDS"]
