"""specfill engine: lossless speculative decoding with KV sessions that live across requests.

The names below load on first use (PEP 562), so that a torch-free module of the package
(engine/cpu.py, read by `specfill --version`) can be imported without torch.
"""
import importlib

_EXPORTS = {
    "Engine": ".engine", "DraftLength": ".generate", "DraftMemory": ".generate", "Drafters": ".generate",
    "speculative_generate": ".generate", "ContextTooLong": ".kv", "KVPool": ".kv", "KVSession": ".kv",
    "LoadedModel": ".models", "ModelLoadError": ".models", "load_model": ".models",
    "EngineConfig": ".settings", "GenerationResult": ".settings", "GenerationSettings": ".settings",
    "GenerationStats": ".settings",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value
