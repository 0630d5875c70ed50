"""specfill engine: lossless speculative decoding with KV sessions that live across requests."""
from .engine import Engine
from .kv import ContextTooLong, KVPool, KVSession
from .loop import Drafters, speculative_generate
from .models import LoadedModel, ModelLoadError, load_model
from .policy import Policy
from .settings import EngineConfig, GenerationResult, GenerationSettings, GenerationStats

__all__ = [
    "Engine", "Drafters", "speculative_generate", "ContextTooLong", "KVPool", "KVSession",
    "LoadedModel", "ModelLoadError", "load_model", "Policy",
    "EngineConfig", "GenerationResult", "GenerationSettings", "GenerationStats",
]
