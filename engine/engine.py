"""The local engine: the target, its drafters and their KV pools in this process, kept alive
across requests (the completion layer's `Engine`, engine/protocol.py)."""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence

from .load.checkpoint import return_free_memory
from .drafters import CopyDrafter, DatastoreDrafter, LookupDrafter, ModelDrafter, TextDrafter, datastore
from .drafters.documents import DOCUMENT, OPEN_DOCUMENTS, BlockIndex, LookupText
from .kv import KVPool
from .loop import DraftPrompt, Drafters, speculative_generate
from .load.models import LoadedModel, ModelLoadError, load_model, pick_device, resolve_name
from .policy import Policy
from .forward.precision import real_sized
from .protocol import Health, Prompt
from .forward.quantize import QuantizeError, check_quantize
from .settings import EngineConfig, GenerationResult, GenerationSettings, StopCheck
from .forward.threads import set_threads


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


class LocalEngine:
    """Target + drafters + their KV pools, kept alive across requests."""
    exact_samples = warms_up = True

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
                  lean_only=config.lean, quantize=config.quantize)
        self.target = load_model(config.target, "target", device_map=config.device_map, **kw)
        if real_sized(self.target.parameters):    # before its forward measures kernels at a thread count
            set_threads(config.threads, config.device, real_sized=True)
        self.pool = self._pool(self.target)
        self.draft: LoadedModel | None = None
        self.draft_pool: KVPool | None = None
        self.policy = Policy()
        self.health = Health()
        vocab = self.target.vocab
        # the drafters without a model, where prompt lookup runs
        free = {}
        if config.draft == "ngram" or (config.draft != "none" and config.lookup):
            store = load_datastore(config, self.target)
            free = dict(lookup=LookupDrafter(special_ids=vocab.special_ids,
                                             index=BlockIndex(vocab.encode_text, dummy_prefix=vocab.dummy_prefix,
                                                              encode_many=vocab.encode_texts)),
                        datastore=DatastoreDrafter(store, vocab.special_ids) if store is not None else None)
        if config.draft in ("none", "ngram"):
            self.drafters = Drafters(**free)
        else:
            self.draft = load_model(config.draft, "draft", **kw)
            if self.draft.device != self.target.device and config.device_map is None:
                raise ModelLoadError(f"draft model {config.draft!r}: on {self.draft.device}, target on {self.target.device}")
            draft_pool = self.draft_pool = self._pool(self.draft)
            if same_vocabulary(self.target.tokenizer, self.draft.tokenizer):
                model = ModelDrafter(draft_pool, vocab=self.draft.vocab)
            else:
                model = TextDrafter(draft_pool, self.draft.vocab, self.target.vocab, heal=config.heal)
            self.drafters = Drafters(**free, model=model)
        return_free_memory()

    def _pool(self, loaded: LoadedModel) -> KVPool:
        config = self.config
        try:
            return KVPool(loaded.model, config.max_sessions, config.max_cache_tokens, config.lean,
                          cuda_graphs=config.cuda_graphs, quantize=config.quantize)
        except QuantizeError as exc:   # e.g. a model without a lean forward
            raise ModelLoadError(f"{loaded.name}: {exc}") from None

    def matmul_kernels(self) -> dict:
        """Each model's matmul kernels and what their measurement timed (engine/forward/matmul.py); None
        for a model without a lean forward or with quantized weights (one kernel each)."""
        def kernels(pool: KVPool | None):
            lean = pool.lean_model if pool is not None else None
            if lean is None or getattr(lean.model, "specfill_quantized", "none") != "none":
                return None
            return dataclasses.asdict(lean.kernels)
        return {"target": kernels(self.pool), "draft": kernels(self.draft_pool)}

    def warm_lookup(self, texts: Iterable[LookupText], stop: Callable[[], bool] = lambda: False) -> int:
        """Tokenize the blocks prompt lookup will read in `texts` ahead of the requests that read
        them (BlockIndex.warm, until `stop()`); the tokens tokenized, 0 without lookup or where
        requests skip the documents for now (reading them has not paid: DocumentsWorth)."""
        lookup = self.drafters.lookup
        if lookup is None or lookup.index is None or not lookup.worth.wanted():
            return 0
        return lookup.index.warm(texts, stop=stop)

    def clear_caches(self) -> None:
        self.pool.clear()
        for drafter in self.drafters.all():
            drafter.clear()

    def check(self, tell=None) -> None:
        pass

    def close(self) -> None:
        pass

    def summary(self) -> dict:
        return {"policy": self.policy.summary()}

    def tokens_covering(self, result: GenerationResult, chars: int) -> int:
        return self.target.vocab.tokens_covering(result.token_ids, len(result.text[:chars].encode("utf-8")))

    def decode(self, prompt: Prompt, settings: GenerationSettings, cancel: threading.Event | None = None,
               stop_check: StopCheck | None = None) -> GenerationResult:
        p = prompt.tokens()
        return self.generate(p.target_ids, p.draft_ids, settings, p.stop_ids, cancel, stop_check, p.lookup_texts,
                             p.copy_source)

    def generate(self, target_ids: list[int], draft_ids: DraftPrompt = None,
                 settings: GenerationSettings | None = None, stop_ids=(),
                 cancel: threading.Event | None = None, stop_check: StopCheck | None = None,
                 lookup_texts: Sequence[LookupText] = (), copy_source: Sequence[int] = ()) -> GenerationResult:
        """`lookup_texts`: text prompt lookup reads besides the prompt and recent answers (the
        document being completed, with its cursor, then other open documents). `copy_source`:
        the region the answer rewrites, which the copy drafter proposes (unless the target
        decodes alone, draft "none"). The result's figures hold the free proposals (prompt
        lookup's, the datastore's, the copy's) by where they were found: proposals, tokens
        proposed and tokens the target wrote too; and prompt lookup's reading of the documents
        (LookupDrafter.summary)."""
        settings = settings or GenerationSettings()
        if not self.config.kv_reuse:
            self.clear_caches()
        lookup = self.drafters.lookup
        if lookup is not None:
            lookup.read(lookup_texts)
        drafters = self.drafters
        if copy_source and self.config.draft != "none":
            drafters = dataclasses.replace(drafters, copy=CopyDrafter(copy_source))
        result = speculative_generate(self.target, self.pool, drafters, list(target_ids), settings,
                                      self.policy, stop_ids=stop_ids, cancel=cancel, stop_check=stop_check,
                                      draft_prompt=list(draft_ids) if isinstance(draft_ids, (list, tuple)) else draft_ids)
        if lookup is not None:
            sources = result.stats.sources
            # what reading the documents gained, at a target step's cost (a cancelled request
            # paid the read for part of an answer: not judged)
            if result.stop_reason != "cancelled" and self.policy.verify.seen:
                lookup.judge(sum(sources[s].agreed for s in (DOCUMENT, OPEN_DOCUMENTS) if s in sources),
                             self.policy.verify(1))
            result.figures["lookup"] = {"proposed": {s: c.proposals for s, c in sources.items()},
                                        "tokens": {s: c.proposed for s, c in sources.items()},
                                        "agreed": {s: c.agreed for s, c in sources.items()}, **lookup.summary()}
        return result
