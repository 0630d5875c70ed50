"""Stops, budgets, cancellation, what the engine keeps between requests and the token <-> bytes layer."""
import random
import threading

import pytest

from engine import LocalEngine, EngineConfig, GenerationSettings
from engine.load.vocab_tables import build_vocab
from tests.tiny_models import code_corpus, tiny_pair_dirs, tiny_tokenizers


@pytest.fixture(scope="module")
def pair():
    target_dir, draft_dir = tiny_pair_dirs()
    return LocalEngine(EngineConfig(target=target_dir, draft=draft_dir))


def _prompts(engine, text):
    t = engine.target
    return [t.tokenizer.bos_token_id] + t.vocab.encode_text(text), engine.draft.vocab.encode_text(text)


def test_stop_ids_end_the_completion_before_the_stop_token(pair):
    t_ids, d_ids = _prompts(pair, "class A:\n    def f(self):\n        ")
    full = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=30))
    stop_tok = full.token_ids[7]
    got = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=30), stop_ids=[stop_tok])
    first = full.token_ids.index(stop_tok)
    assert got.token_ids == full.token_ids[:first]
    assert got.stop_reason == "eos"


def test_max_new_tokens_and_time_budget(pair):
    t_ids, d_ids = _prompts(pair, "import os\n")
    got = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=5))
    assert len(got.token_ids) == 5 and got.stop_reason == "max_tokens"
    got = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=500, time_budget_ms=1e-6))
    assert got.stop_reason == "time_budget" and len(got.token_ids) < 500


def test_the_prefill_gives_the_first_token_so_an_answer_over_at_once_costs_one_pass(pair):
    t_ids, d_ids = _prompts(pair, "while True:\n    ")
    pair.pool.clear()
    full = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=12))
    pair.pool.clear()
    # An end token first: the prefill's pass decides it, no draft is verified.
    over = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=12), stop_ids=[full.token_ids[0]])
    assert over.token_ids == [] and over.stop_reason == "eos"
    assert over.stats.target_calls == 1 and over.stats.rounds == 0
    pair.pool.clear()
    one = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=1))
    assert one.token_ids == full.token_ids[:1] and one.stats.rounds == 0 and one.stats.first_from_prefill == 1
    assert pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=0)).token_ids == []
    # A prompt already cached but for its last token has no pass to share: round one scores it.
    pair.pool.clear()
    pair.generate(t_ids[:-1], None, GenerationSettings(max_new_tokens=1))
    again = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=12))
    assert again.stats.first_from_prefill == 0 and again.stats.prefill_tokens == 1
    assert again.token_ids == full.token_ids


def test_a_prompt_one_past_the_cache_budget_ends_context_full_and_the_engine_goes_on():
    target_dir, draft_dir = tiny_pair_dirs()
    small = LocalEngine(EngineConfig(target=target_dir, draft="ngram", max_cache_tokens=24))
    ids = [small.target.tokenizer.bos_token_id] + small.target.vocab.encode_text("def f(x):\n    return x\n" * 4)
    got = small.generate(ids[:25], None, GenerationSettings(max_new_tokens=8))
    assert got.stop_reason == "context_full" and got.token_ids == []
    small.pool.clear()
    again = small.generate(ids[:12], None, GenerationSettings(max_new_tokens=8))
    assert again.stop_reason in ("max_tokens", "eos")
    assert again.stats.first_from_prefill == (1 if again.token_ids else 0)


class CancelAfter(threading.Event):
    """A real Event that sets itself when checked for the n-th time (a deterministic
    stand-in for the user typing on mid-decode)."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def is_set(self):
        self.n -= 1
        if self.n <= 0:
            self.set()
        return super().is_set()


def test_cancellation_stops_within_one_step(pair):
    t_ids, d_ids = _prompts(pair, "def f(x):\n    ")
    got = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=200), cancel=CancelAfter(3))
    assert got.stop_reason == "cancelled"
    assert got.stats.rounds == 2  # checked before every round: two ran, the third never started
    # The engine stays usable and its caches serve the next request.
    again = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=8))
    assert again.stats.reused_tokens > 0 and again.stop_reason == "max_tokens"


def test_cancel_from_another_thread(pair):
    t_ids, d_ids = _prompts(pair, "for i in range(3):\n    ")
    cancel = threading.Event()
    timer = threading.Timer(0.05, cancel.set)
    timer.start()
    got = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=2000), cancel=cancel)
    timer.cancel()
    assert got.stop_reason in ("cancelled", "eos")


def test_engine_keeps_what_it_learned_between_requests(pair):
    t_ids, d_ids = _prompts(pair, "x = 1\n")
    first = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=20))
    second = pair.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=20))
    assert second.stats.policy["rounds"] == first.stats.policy["rounds"] + second.stats.rounds > 0


@pytest.mark.parametrize("which", [0, 1])
def test_continuation_encoding_round_trips_bytes(which):
    """Text split at any byte: the continuation ids carry exactly the remaining bytes,
    and special-token text stays text (no sentinel is inserted or lost)."""
    tok = tiny_tokenizers()[which]
    vocab = build_vocab(tok)
    text = ("def f(x):\n        return x  # 你好 😀\r\n\tpass <fim_prefix> <PRE> </s>\n"
            + code_corpus()[0][:400])
    data = text.encode("utf-8")
    rng = random.Random(0)
    cuts = [c for c in range(1, len(data) - 1) if not 0x80 <= data[c] < 0xC0]  # not inside a char
    for cut in sorted(rng.sample(cuts, 60)):
        context = vocab.encode_text(data[:cut].decode("utf-8", errors="ignore"))
        ids, leftover = vocab.encode_continuation(context, data[cut:])
        assert not set(ids) & vocab.special_ids
        assert ids and vocab.bytes_of(ids) + leftover == data[cut:]
    assert vocab.bytes_of(vocab.encode_text(text)) == text.encode("utf-8")


def test_draft_with_a_shorter_context_is_dropped_not_fatal(tmp_path):
    """A prompt longer than the draft's context: the request goes on without the draft."""
    from transformers import GPTBigCodeForCausalLM

    from tests.tiny_models import bigcode_config

    target_dir, _ = tiny_pair_dirs()
    _, draft_tok = tiny_tokenizers()
    GPTBigCodeForCausalLM(bigcode_config(len(draft_tok), n_positions=32)).save_pretrained(tmp_path)
    draft_tok.save_pretrained(tmp_path)
    eng = LocalEngine(EngineConfig(target=target_dir, draft=str(tmp_path)))
    base = LocalEngine(EngineConfig(target=target_dir, draft="none"))
    text = code_corpus()[1][:600]
    t_ids, d_ids = _prompts(eng, text)
    assert len(d_ids) > 32
    got = eng.generate(t_ids, d_ids, GenerationSettings(max_new_tokens=10))
    assert got.token_ids == base.generate(t_ids, settings=GenerationSettings(max_new_tokens=10)).token_ids
    assert got.stats.rounds_by_drafter["model"] == 0 and got.stats.draft_calls == 0   # lookup only


def test_a_draft_stops_before_the_token_that_decides_the_answer():
    """The token that decides the answer (a one-line answer's newline) is never verified as a
    draft token: when the draft is right up to it, the target's own next token is that token,
    and anything the round adds after it lies past the answer's end. A draft of nothing but
    that token is no draft."""
    from engine.loop import cut_before_stop
    from engine.load.models import load_model
    from engine.settings import TextStop
    vocab = load_model("default", "target", device="cpu").vocab
    line_end = lambda text: TextStop("line_end", text.index("\n") + 1) if "\n" in text else None  # noqa: E731
    cand = vocab.encode_text(" beta)\n        return total")
    deciding = next(i for i, t in enumerate(cand) if b"\n" in vocab.bytes_of([t]))
    assert deciding > 0
    assert cut_before_stop(cand, b"alpha,", vocab, line_end) == cand[:deciding]
    assert cut_before_stop(vocab.encode_text("\n    x"), b"y = 1", vocab, line_end) == []
    no_stop = vocab.encode_text(" beta, gamma")
    assert cut_before_stop(no_stop, b"alpha,", vocab, line_end) == no_stop


def test_lookup_drafts_cut_before_a_line_end_give_the_target_alone_answer():
    """Greedy output with the cut is the target's own, with prompt lookup proposing lines that
    run past the answer's end."""
    from engine.settings import TextStop
    line_end = lambda text: TextStop("line_end", text.index("\n") + 1) if "\n" in text else None  # noqa: E731
    alone, lookup = LocalEngine(EngineConfig(draft="none")), LocalEngine(EngineConfig(draft="ngram"))
    text = "".join(f"    total = combine(total, value_{i}, weight)\n" for i in range(6)) + "    total = combine(total, "
    for draft_length in ("auto", 8):
        ids = [alone.target.tokenizer.bos_token_id] + alone.target.vocab.encode_text(text)
        settings = GenerationSettings(max_new_tokens=24, draft_length=draft_length)
        want = alone.generate(ids, None, settings, stop_check=line_end)
        got = lookup.generate(ids, None, settings, stop_check=line_end)
        assert got.token_ids == want.token_ids and got.text == want.text
        assert got.stats.draft_trimmed >= 1
