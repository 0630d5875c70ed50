"""specfill engine: lossless speculative decoding with KV sessions that live across requests."""
from .engine import Engine
from .generate import DraftMemory, Drafters, speculative_generate
from .kv import ContextTooLong, KVPool, KVSession
from .models import LoadedModel, ModelLoadError, load_model
from .settings import EngineConfig, GenerationResult, GenerationSettings, GenerationStats

__all__ = [
    "Engine", "DraftMemory", "Drafters", "speculative_generate", "ContextTooLong", "KVPool", "KVSession",
    "LoadedModel", "ModelLoadError", "load_model",
    "EngineConfig", "GenerationResult", "GenerationSettings", "GenerationStats",
]
