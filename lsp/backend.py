"""Settings -> loaded models and completion options: the part shared by `serve` and `complete`.

Models load when `load_backend` is called. The engine and pipeline modules are imported there
too (the types below are for readers and checkers): the server imports this module only after
`specfill serve` has pointed stdout at stderr.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.remote import is_remote
from lsp.settings import Settings

if TYPE_CHECKING:   # imported for real inside the functions that load them
    from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest
    from engine.protocol import Engine
    from engine.remote import RemoteEngine

log = logging.getLogger("specfill.backend")


@dataclass
class Backend:
    """A loaded engine and the completion pipeline on top of it; used from one thread only."""

    engine: Engine      # a LocalEngine, or a RemoteEngine for a targetModel that is a URL
    pipeline: CompletionPipeline
    settings: Settings   # the settings it was loaded with
    load_ms: float = 0.0


def load_backend(settings: Settings) -> Backend:
    """Load target and draft as `settings` say. Raises engine.ModelLoadError for bad models."""
    import time

    from completion.pipeline import CompletionPipeline
    from engine import EngineConfig, LocalEngine

    t0 = time.perf_counter()
    options = settings.options
    if is_remote(settings.targetModel):
        engine = remote_engine(settings)
        pipeline = CompletionPipeline(engine)
        load_ms = (time.perf_counter() - t0) * 1000
        log.info("remote target %s (backend %s)", engine.settings.base_url, settings.remote.backend)
        return Backend(engine=engine, pipeline=pipeline, settings=settings, load_ms=load_ms)
    config = EngineConfig(target=settings.targetModel, draft=settings.draftModel,
                          device=settings.device, dtype=settings.dtype, quantize=settings.quantize,
                          trust_remote_code=settings.trustRemoteCode,
                          max_cache_tokens=settings.maxCacheTokens,
                          kv_reuse=options.kvReuse, lookup=options.promptLookup,
                          datastore=options.datastore, cuda_graphs=options.cudaGraphs)
    engine = LocalEngine(config)
    pipeline = CompletionPipeline(engine)
    load_ms = (time.perf_counter() - t0) * 1000
    log.info("loaded target=%s draft=%s in %.0f ms", settings.targetModel, settings.draftModel, load_ms)
    return Backend(engine=engine, pipeline=pipeline, settings=settings, load_ms=load_ms)


def cuda_graphs_note(loaded: Backend) -> str | None:
    """One line for the user when the `cudaGraphs` option is on but a model runs without CUDA
    graphs (the engine then runs its usual forward and only logs why); None when nothing needs
    saying."""
    settings = loaded.settings
    if not settings.options.cudaGraphs:
        return None
    if is_remote(settings.targetModel):
        return "cudaGraphs is for local models: a remote target runs its own forward passes"
    engine = loaded.engine
    pools = {"target": engine.pool}
    model_drafter = engine.drafters.model
    if model_drafter is not None:
        pools["draft"] = model_drafter.pool
    if not engine.pool.cuda_graphs:   # KVPool turned them off: the model is not on CUDA
        return (f"cudaGraphs needs a CUDA device: the models run on {engine.target.device.type}, "
                "with plain forward passes")
    eager = [role for role, pool in pools.items() if not pool.static]   # no lean forward to replay
    if eager:
        many = len(eager) > 1
        return (f"cudaGraphs: the {' and '.join(eager)} model{'s have' if many else ' has'} no lean "
                f"forward to capture; {'they run' if many else 'it runs'} the transformers forward")
    return None


def remote_engine(settings: Settings) -> RemoteEngine:
    """The remote target the settings name; no connection yet (the first request probes it, so a
    server that is down at start-up is picked up when it comes back). Raises ModelLoadError for
    settings that cannot work (a bad URL, a missing CA bundle)."""
    from engine.load.models import ModelLoadError
    from engine.remote import RemoteEngine, RemoteError, RemoteSettings

    r = settings.remote
    try:
        remote = RemoteSettings(url=settings.targetModel, backend=r.backend, api_key=r.apiKey,
                                api_key_env=r.apiKeyEnv, verify_tls=r.verifyTls, ca_bundle=r.caBundle,
                                connect_timeout_s=r.connectTimeoutMs / 1000,
                                read_timeout_s=r.readTimeoutMs / 1000)
    except RemoteError as exc:
        raise ModelLoadError(str(exc)) from None
    return RemoteEngine(remote, max_cache_tokens=settings.maxCacheTokens)


def completion_options(settings: Settings) -> CompletionOptions:
    from completion.pipeline import CompletionOptions

    options = settings.options
    return CompletionOptions(
        fim_template=settings.fimTemplate, draft_fim_template=options.draftFimTemplate,
        fim_layout=options.fimLayout, prefix_tokens=settings.prefixTokens,
        suffix_tokens=settings.suffixTokens, extra_tokens=settings.extraTokens,
        multiline=settings.multiline, max_lines=settings.maxLines,
        max_new_tokens=settings.maxNewTokens, temperature=settings.temperature,
        draft_length=settings.draftLength, draft_prompt_tokens=options.draftPromptTokens,
        time_budget_ms=settings.timeBudgetMs or None,
        stop_while_decoding=options.stopWhileDecoding,
        lookup_documents=options.lookupDocuments)


def completion_request(uri: str, text: str, line: int, character: int) -> CompletionRequest:
    """The pipeline's request. Text that is not valid UTF-8 (lone surrogates) goes as it is: the
    pipeline refuses it (completion/context.py), for the server and `specfill complete` alike."""
    from completion.pipeline import CompletionRequest

    return CompletionRequest(uri=uri, text=text, line=line, character=character)


def encodable(text: str) -> str:
    """`text` with lone surrogates (bytes that are not UTF-8, binary junk sent as JSON) replaced
    one-for-one by '?', so tokenizers can encode it (as extra context) and codepoint columns
    stay the same."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def is_model_load_error(exc: BaseException) -> bool:
    try:
        from engine import ModelLoadError
    except Exception:  # engine itself failed to import: report that as the load error
        return True
    return isinstance(exc, ModelLoadError)
