"""The Engine: target + drafter + their KV pools, kept alive across requests."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

from . import datastore
from .drafters import ModelDrafter, TextDrafter
from .lookup import BlockIndex, LookupText, NgramDrafter
from .generate import DraftMemory, DraftPrompt, Drafters, speculative_generate
from .kv import KVPool
from .models import LoadedModel, ModelLoadError, load_model, pick_device, resolve_name, return_free_memory
from .quantize import QuantizeError, check_quantize
from .settings import EngineConfig, GenerationResult, GenerationSettings, StopCheck
from .threads import set_threads


def same_vocabulary(a, b) -> bool:
    return a.get_vocab() == b.get_vocab()


def load_datastore(config: EngineConfig, target: LoadedModel) -> datastore.Datastore | None:
    """The datastore the config names for this target (None: none); ModelLoadError if the one
    named cannot serve it."""
    try:
        path = datastore.resolve(config.datastore, resolve_name(config.target, "target"))
        return datastore.Datastore.load(path, target.tokenizer.get_vocab()) if path else None
    except datastore.DatastoreError as exc:
        if config.datastore == "auto":    # a stale file beside a model: serve without it
            return None
        raise ModelLoadError(str(exc)) from None


class Engine:
    """Target + drafter + their KV pools, kept alive across requests."""

    def __init__(self, config: EngineConfig | None = None):
        self.config = config = config or EngineConfig()
        set_threads(config.threads, config.device)
        try:    # before any weights load: a quantization that cannot run here is one line at once
            check_quantize(config.quantize, pick_device(config.device))
            if config.quantize != "none" and not config.lean:
                raise QuantizeError(f"quantize {config.quantize!r}: needs the lean forward (lean: true)")
        except QuantizeError as exc:
            raise ModelLoadError(str(exc)) from None
        kw = dict(device=config.device, dtype=config.dtype, trust_remote_code=config.trust_remote_code,
                  lean_only=config.lean)
        self.target = load_model(config.target, "target", device_map=config.device_map, **kw)
        self.pool = self._pool(self.target)
        self.draft: LoadedModel | None = None
        self.draft_pool: KVPool | None = None
        self.memory = DraftMemory()
        vocab = self.target.vocab
        # only where prompt lookup runs: a store nobody asks costs its load for nothing
        uses_lookup = config.draft == "ngram" or (config.draft != "none" and config.lookup)
        self.datastore = load_datastore(config, self.target) if uses_lookup else None
        lookup = NgramDrafter(special_ids=vocab.special_ids,
                              index=BlockIndex(vocab.encode_text, dummy_prefix=vocab.dummy_prefix,
                                               encode_many=vocab.encode_texts),
                              datastore=self.datastore)
        if config.draft == "none":
            self.drafters = Drafters()
        elif config.draft == "ngram":
            self.drafters = Drafters(lookup=lookup)
        else:
            self.draft = load_model(config.draft, "draft", **kw)
            if self.draft.device != self.target.device and config.device_map is None:
                raise ModelLoadError(f"draft model {config.draft!r}: on {self.draft.device}, target on {self.target.device}")
            draft_pool = self.draft_pool = self._pool(self.draft)
            if same_vocabulary(self.target.tokenizer, self.draft.tokenizer):
                model = ModelDrafter(draft_pool, vocab=self.draft.vocab)
            else:
                model = TextDrafter(draft_pool, self.draft.vocab, self.target.vocab, heal=config.heal)
            self.drafters = Drafters(lookup=lookup if config.lookup else None, model=model)
        return_free_memory()

    def _pool(self, loaded: LoadedModel) -> KVPool:
        config = self.config
        try:
            return KVPool(loaded.model, config.max_sessions, config.max_cache_tokens, config.lean,
                          cuda_graphs=config.cuda_graphs, quantize=config.quantize)
        except QuantizeError as exc:   # e.g. a model without a lean forward
            raise ModelLoadError(f"{loaded.name}: {exc}") from None

    def matmul_kernels(self) -> dict:
        """Each model's matmul kernels and what their measurement timed (engine/matmul.py); None
        for a model without packed lean weights (the transformers forward, or a large model)."""
        def kernels(pool: KVPool | None):
            lean = pool.lean_model if pool is not None else None
            if lean is None or not lean.packed:
                return None
            return dataclasses.asdict(lean.kernels)
        return {"target": kernels(self.pool), "draft": kernels(self.draft_pool)}

    def lookup_stats(self) -> dict | None:
        """The latest generate's prompt lookup (NgramDrafter.summary); None without lookup."""
        return self.drafters.lookup.summary() if self.drafters.lookup is not None else None

    def warm_lookup(self, texts: Sequence[LookupText], settings: GenerationSettings | None = None,
                    stop: Callable[[], bool] = lambda: False) -> int:
        """Tokenize the blocks prompt lookup will read in `texts` ahead of the requests that read
        them (BlockIndex.warm, until `stop()`); the tokens tokenized, 0 without lookup, where
        requests with `settings` would not use it, or where they skip the documents for now
        (reading them has not paid: DocumentsWorth)."""
        lookup, settings = self.drafters.lookup, settings or GenerationSettings()
        if lookup is None or lookup.index is None or not self.drafters.lookup_drafts(settings) \
                or (settings.cost_aware and not lookup.documents_worth.wanted()):
            return 0
        return lookup.index.warm(texts, stop=stop)

    def clear_caches(self) -> None:
        self.pool.clear()
        for drafter in (self.drafters.lookup, self.drafters.model):
            if drafter is not None:
                drafter.clear()

    def generate(self, target_ids: list[int], draft_ids: DraftPrompt = None,
                 settings: GenerationSettings | None = None, stop_ids=(),
                 cancel: threading.Event | None = None, stop_check: StopCheck | None = None,
                 lookup_texts: Sequence[LookupText] = ()) -> GenerationResult:
        """`lookup_texts`: text prompt lookup reads besides the prompt and recent completions
        (the document being completed, with its cursor, then other open documents)."""
        settings = settings or GenerationSettings()
        if not self.config.kv_reuse:
            self.clear_caches()
        if self.drafters.lookup is not None:
            # only the cost-aware controller measures the target step that judges the documents
            self.drafters.lookup.read(lookup_texts if self.drafters.lookup_drafts(settings) else (),
                                      judged=settings.cost_aware)
        return speculative_generate(self.target, self.pool, self.drafters, list(target_ids),
                                    settings, self.memory, stop_ids=stop_ids,
                                    draft_prompt=list(draft_ids) if isinstance(draft_ids, (list, tuple)) else draft_ids,
                                    cancel=cancel, stop_check=stop_check)
