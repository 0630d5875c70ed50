"""specfill engine: lossless speculative decoding with KV sessions that live across requests.

Names are imported lazily so that `specfill serve` can set up its stdio streams before
torch is loaded.
"""
import importlib

_EXPORTS = {
    "Engine": "engine", "DraftLength": "generate", "speculative_generate": "generate",
    "ContextTooLong": "kv", "KVPool": "kv", "KVSession": "kv",
    "LoadedModel": "models", "ModelLoadError": "models", "load_model": "models",
    "EngineConfig": "settings", "GenerationResult": "settings", "GenerationSettings": "settings",
    "GenerationStats": "settings",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
