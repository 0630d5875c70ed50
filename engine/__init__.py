"""specfill engine: lossless speculative decoding with KV sessions that live across requests.

The names below load on first use, so that what needs no model (engine.settings, engine.remote,
engine.protocol, engine.forward.cpu) is imported without torch."""
from importlib import import_module

_WHERE = {"LocalEngine": "engine", "Drafters": "loop", "speculative_generate": "loop", "ContextTooLong": "kv",
          "KVPool": "kv", "KVSession": "kv", "LoadedModel": "load.models", "ModelLoadError": "load.models",
          "load_model": "load.models", "Policy": "policy", "Engine": "protocol", "EngineConfig": "settings",
          "GenerationResult": "settings", "GenerationSettings": "settings", "GenerationStats": "settings"}
__all__ = list(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(import_module(f".{_WHERE[name]}", __name__), name)
    globals()[name] = value
    return value
