"""specfill engine: lossless speculative decoding with KV sessions that live across requests."""
from .generate import DraftLength, Engine, speculative_generate
from .kv import ContextTooLong, KVPool, KVSession
from .models import LoadedModel, ModelLoadError, load_model
from .settings import EngineConfig, GenerationResult, GenerationSettings, GenerationStats

__all__ = ["Engine", "EngineConfig", "GenerationSettings", "GenerationResult", "GenerationStats",
           "ModelLoadError", "ContextTooLong", "LoadedModel", "load_model", "KVPool", "KVSession",
           "DraftLength", "speculative_generate"]
