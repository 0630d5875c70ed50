"""Prompt lookup over the whole document and the other open documents (engine/drafters/lookup.py, documents.py): block
texts tokenized by a real tokenizer and cached by their text, the longest match wins, and
proposals from far outside the prompt's window are drafted and verified by the shipped target."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bench.end_of_line import end_of_line_cursors
from completion.pipeline import CompletionOptions, CompletionPipeline, CompletionRequest
from engine import LocalEngine, EngineConfig
from engine.drafters import documents as lk
from engine.drafters import Sampling
from engine.drafters import LookupDrafter
from engine.drafters.documents import BlockIndex, LookupText, line_blocks
from engine.kv import common_prefix_len
from engine.load.vocab_tables import build_vocab
from tests.completion_fixtures import llama_style_tokenizer

TARGET = Path(__file__).resolve().parents[2] / "engine" / "default_pair" / "target"
URI = "file:///work/demo/shapes.py"
GREEDY = Sampling()


@pytest.fixture(scope="module")
def vocab():
    return build_vocab(AutoTokenizer.from_pretrained(TARGET))


class CountingEncoder:
    """The real tokenizer, counting what it is asked to encode."""

    def __init__(self, vocab):
        self.vocab, self.texts = vocab, []

    def __call__(self, text: str) -> list[int]:
        self.texts.append(text)
        return self.vocab.encode_text(text)


def code_lines(n: int, name: str = "helper") -> list[str]:
    """n distinct lines of code in small functions separated by blank lines."""
    out = []
    for i in range(n // 4 + 1):
        out += [f"def {name}_{i}(value, scale={i}):", f"    total = value * scale + {i * 7}",
                f"    return total - {i * 3}", ""]
    return out[:n]


# ------------------------------------------------------------------------------ blocks

def test_blocks_end_at_blank_lines_and_keep_the_text():
    lines = code_lines(100)
    blocks = line_blocks(lines)
    assert "".join(blocks) == "\n".join(lines)
    for b in blocks[:-1]:
        body = b.split("\n")[:-1]
        assert lk.BLOCK_MIN_LINES <= len(body) <= lk.BLOCK_MAX_LINES
        assert body[-1].strip() == ""          # cut after a blank line
    no_blank = [f"x_{i} = {i}" for i in range(130)]
    assert [len(b.split("\n")) - 1 for b in line_blocks(no_blank)[:2]] == [lk.BLOCK_MAX_LINES] * 2


def test_over_long_lines_are_left_out():
    lines = ["a = 1", "data = '" + "z" * (lk.MAX_LINE_CHARS + 10) + "'", "b = 2"]
    assert line_blocks(lines) == ["a = 1\n", "b = 2"]


def test_a_block_is_encoded_as_it_reads_mid_text_even_with_a_dummy_prefix():
    tok = llama_style_tokenizer("codellama")
    v = build_vocab(tok)
    assert v.dummy_prefix                      # encoding "x" alone gives "▁x"
    index = BlockIndex(v.encode_text, dummy_prefix=True)
    before, block = "import os\n", "def load(path):\n    return path\n"
    whole = v.encode_text(before + block)
    assert index.encode_block(block) == whole[len(v.encode_text(before)):]
    assert index.encode_block(block) != v.encode_text(block)    # the naive way adds a space


# ------------------------------------------------------------------------------ the cache

def test_a_keystroke_retokenizes_only_the_block_it_touched(vocab):
    enc = CountingEncoder(vocab)
    index = BlockIndex(enc)
    lines = code_lines(400)
    cursor = (300, len(lines[300]))
    first = index.corpus([LookupText(lines, cursor)])
    assert len(first.blocks) > 10 and len(enc.texts) == len(first.blocks)
    enc.texts.clear()
    again = index.corpus([LookupText(lines, cursor)])
    assert enc.texts == [] and again.tokens == first.tokens

    typed = list(lines)
    typed[300] += "  # edited"                 # a keystroke at the cursor
    index.corpus([LookupText(typed, (300, len(typed[300])))])
    assert len(enc.texts) == 1 and enc.texts[0].endswith("# edited")

    enc.texts.clear()
    far = list(lines)
    far[41] = far[41].replace("scale", "factor")   # an edit far from the cursor
    index.corpus([LookupText(far, cursor)])
    assert len(enc.texts) == 1 and "factor" in enc.texts[0]


def blocks_of(corpus) -> list[list[int]]:
    return [list(b.ids) for b in corpus.blocks]


def one_by_one(monkeypatch):
    """Block by block reading, without batches: one block a tokenizer call."""
    monkeypatch.setattr(lk, "TOKENIZE_BATCH", 1)


@pytest.mark.parametrize("dummy_prefix", [False, True])
@pytest.mark.parametrize("budget", ["ample", "new tokens", "request tokens", "cache"])
def test_blocks_tokenized_together_are_the_blocks_read_one_by_one(vocab, dummy_prefix, budget, monkeypatch):
    """Blocks a request misses go to the tokenizer several at a time (TOKENIZE_BATCH): the
    request reads the blocks, sources and ids that one call per block reads, and indexes as many
    tokens, also where a budget binds (tokens tokenized a request, tokens read, the cache's size)
    and where text takes more tokens than the batch guesses (CJK, emoji, digits)."""
    v = build_vocab(llama_style_tokenizer("codellama")) if dummy_prefix else vocab
    lines = [*code_lines(300), *(f"s_{i} = '数据 ✅ 注释 😀 {i * 7919}'" for i in range(60)), "",
             *code_lines(300, "tail")]
    cursor = (320, 3)
    kwargs = {"ample": {}, "new tokens": {"max_new_tokens": 2500}, "request tokens": {"max_tokens": 3000},
              "cache": {}}[budget]
    size = {"max_cached_tokens": 3000} if budget == "cache" else {}
    calls = []

    def read(index: BlockIndex):
        first = index.corpus([LookupText(lines, cursor)], **kwargs)
        edited = list(lines)
        edited[100] += "  # edited"        # a second request: cached blocks around one new one
        return first, index.corpus([LookupText(edited, cursor)], **kwargs)

    batched = BlockIndex(v.encode_text, dummy_prefix=dummy_prefix, encode_many=lambda t: calls.append(len(t))
                         or v.encode_texts(t), **size)
    got = read(batched)
    with monkeypatch.context() as m:
        one_by_one(m)
        single = BlockIndex(v.encode_text, dummy_prefix=dummy_prefix, **size)
        want = read(single)
    for g, w in zip(got, want):
        assert blocks_of(g) == blocks_of(w) and g.sources == w.sources and g.complete == w.complete
    assert batched.stats.tokens_tokenized == single.stats.tokens_tokenized
    assert len(want[0].blocks) >= 5 and max(calls) > 1 and len(calls) < len(want[0].blocks)


def test_a_request_reports_what_its_read_tokenized(vocab):
    """`last_tokenized`: what the request's read tokenized; 0 where the last corpus is reused."""
    index = BlockIndex(vocab.encode_text)
    lines, window = code_lines(400), (260, 330)
    index.corpus([LookupText(lines, (300, 0), window)])
    assert index.stats.last_tokenized == index.stats.tokens_tokenized > 1000
    typed = list(lines)
    typed[300] += "x"                          # inside the prompt's lines: the same corpus
    index.corpus([LookupText(typed, (300, 1), window)])
    assert index.stats.last_tokenized == 0


def test_warming_a_document_leaves_its_first_request_little_to_tokenize(vocab):
    """A document indexed ahead of requests (BlockIndex.warm: a document just opened) gives its
    first request the corpus a cold index would read, tokenizing a few blocks at the cursor
    instead of the whole document; warming stops when asked to, between tokenizer calls."""
    # functions of uneven length, as in real code: the text after the cursor is cut into blocks
    # from the cursor on, and those fall back into step with the whole document's blocks
    lines = [ln for i in range(300) for ln in code_lines(4 + i % 5, f"f{i}")[:2 + i % 5] + [""]]
    cursor = (700, len(lines[700]))
    cold = BlockIndex(vocab.encode_text)
    want = cold.corpus([LookupText(lines, cursor)], max_new_tokens=1 << 30)   # all of it, at once
    warm = BlockIndex(vocab.encode_text)
    assert warm.warm([LookupText(lines)]) == warm.stats.tokens_warmed > 0.9 * want.tokens
    before = warm.stats.tokens_tokenized
    got = warm.corpus([LookupText(lines, cursor)])
    assert blocks_of(got) == blocks_of(want)
    assert warm.stats.tokens_tokenized - before < 0.05 * cold.stats.tokens_tokenized
    assert warm.warm([LookupText(lines)]) == 0          # nothing left to do

    asked = []
    stopped = BlockIndex(vocab.encode_text)
    assert stopped.warm([LookupText(lines)], stop=lambda: asked.append(1) or len(asked) > 3) > 0
    assert len(asked) == 4 and stopped.stats.blocks_tokenized == 2 * lk.WARM_BATCH   # asked per document too
    assert stopped.warm([LookupText(lines), LookupText(code_lines(50, "other"))], stop=lambda: True) == 0
    capped = BlockIndex(vocab.encode_text)
    assert 500 <= capped.warm([LookupText(lines)], max_tokens=500) < 500 + 200 * lk.WARM_BATCH


def test_the_lines_the_prompt_holds_are_not_read_again(vocab):
    """Given the prompt's lines, lookup reads only the document around them: a keystroke inside
    the prompt's window tokenizes nothing for lookup, and code above the window is still found."""
    enc = CountingEncoder(vocab)
    index = BlockIndex(enc)
    lines = code_lines(400)
    cursor, window = (300, len(lines[300])), (260, 330)
    first = index.corpus([LookupText(lines, cursor, window)])
    read = set("".join(vocab.bytes_of(list(b.ids)).decode() for b in first.blocks).split("\n"))
    assert lines[101] in read and lines[350] in read
    assert not read & {lines[i] for i in range(260, 330) if lines[i]}    # (code lines are distinct)
    enc.texts.clear()
    typed = list(lines)
    typed[300] += "  # edited"                 # a keystroke at the cursor, inside the window
    again = index.corpus([LookupText(typed, (300, len(typed[300])), window)])
    assert enc.texts == [] and again.tokens == first.tokens


def test_a_keystroke_in_the_window_reuses_the_corpus_and_an_edit_outside_it_does_not(vocab):
    """The documents beyond the prompt are cut and gathered once: the next keystroke inside the
    window gets the same corpus back; an edit above the window (another copy of the document's
    lines) is read, and the text it replaced is no longer proposed."""
    index = BlockIndex(vocab.encode_text)
    lines, window = code_lines(400), (260, 330)
    first = index.corpus([LookupText(lines, (300, 0), window)])
    typed = list(lines)
    typed[300] += "  # edited"
    assert index.corpus([LookupText(typed, (300, 0), window)]) is first
    edited = list(typed)
    edited[101] = edited[101].replace("total = value * scale", "total = value // scale")
    d = LookupDrafter(special_ids=vocab.special_ids, index=index)
    d.read([LookupText(edited, (300, 0), window)])
    seq = vocab.encode_text("# elsewhere\n" + edited[100] + "\n    total = value")
    draft = d.propose(seq, b"", 6, GREEDY)
    assert d.corpus is not first and vocab.bytes_of(draft.tokens).decode().startswith(" // scale")
    # the other open documents, given as the same lines again, are not cut again either
    other = code_lines(80, "other")
    with_other = index.corpus([LookupText(edited, (300, 0), window), LookupText(list(other))])
    assert index.corpus([LookupText(edited, (300, 0), window), LookupText(list(other))]) is with_other


def test_a_request_reads_and_tokenizes_a_bounded_number_of_tokens(vocab):
    enc = CountingEncoder(vocab)
    index = BlockIndex(enc, max_cached_tokens=20_000)
    lines = code_lines(60_000)                 # ~600k tokens: far over every bound
    corpus = index.corpus([LookupText(lines, (30_000, 0))], max_tokens=6000, max_new_tokens=3000)
    tokens_encoded = sum(len(vocab.encode_text(t)) for t in enc.texts)
    assert tokens_encoded < 3000 + 200 and corpus.tokens == tokens_encoded    # one block over at most
    corpus = index.corpus([LookupText(lines, (30_000, 0))], max_tokens=6000, max_new_tokens=3000)
    assert 6000 <= corpus.tokens < 6000 + 200  # the next request reads on, nearest blocks first
    for _ in range(10):
        index.corpus([LookupText(lines, (30_000 + 4000 * _, 0))], max_tokens=6000, max_new_tokens=3000)
    assert index.cached_tokens <= 20_000


def test_binary_and_data_text_is_skipped_without_error(vocab):
    index = BlockIndex(vocab.encode_text)
    binary = ["\x00\x01\x02ELF" * 50, "\x00" * 100, "x = 1"] * 20
    data = ["[" + "1, " * 2000 + "]"] * 50
    corpus = index.corpus([LookupText(binary, (0, 0)), LookupText(data)])
    assert all("\x00" not in vocab.bytes_of(b.ids).decode("utf-8", "replace") for b in corpus.blocks)
    assert corpus.tokens == sum(len(b.ids) for b in corpus.blocks) and corpus.tokens < 2000


# ------------------------------------------------------------------------------ proposing

def drafter_on(vocab, lines, cursor, others=()):
    d = LookupDrafter(special_ids=vocab.special_ids, index=BlockIndex(vocab.encode_text))
    d.read([LookupText(lines, cursor), *(LookupText(o) for o in others)])
    return d


def test_the_longest_match_outside_the_prompt_is_proposed(vocab):
    lines = code_lines(200)
    seen = lines[100:103]                     # "def helper_25(...):", "    total = ...", "    return ..."
    d = drafter_on(vocab, lines, (199, 0))
    seq = vocab.encode_text("# elsewhere\n" + "\n".join(seen[:2]) + "\n")
    draft = d.propose(seq, b"", 12, GREEDY)
    assert vocab.bytes_of(draft.tokens).decode().startswith(seen[2][:10])
    assert draft.match >= lk.KEY_NGRAM and draft.source == "document"


def test_the_documents_are_read_at_the_first_search_not_before(vocab):
    """A request whose answer ends before any round (the prefill's token decides it) never cuts
    or tokenizes the documents; the next request's first search reads them."""
    enc = CountingEncoder(vocab)
    lines = code_lines(200)
    d = LookupDrafter(special_ids=vocab.special_ids, index=BlockIndex(enc))
    d.read([LookupText(lines, (199, 0))])
    assert enc.texts == [] and d.summary()["blocks"] == 0 and d.summary()["read_ms"] == 0.0
    d.read([LookupText(lines, (199, 0))])         # the next request: it drafts
    seq = vocab.encode_text("# elsewhere\n" + "\n".join(lines[100:102]) + "\n")
    assert enc.texts == []
    draft = d.propose(seq, b"", 12, GREEDY)
    assert enc.texts and d.summary()["blocks"] > 10
    assert vocab.bytes_of(draft.tokens).decode().startswith(lines[102][:10])
    read = len(enc.texts)
    d.propose(seq + draft.tokens[:2], b"", 12, GREEDY)   # its later rounds read nothing again
    assert len(enc.texts) == read


def test_documents_that_save_less_than_reading_them_are_skipped_and_probed_again(vocab):
    """Requests whose document proposals the target never writes: once one has read them, the
    next ones skip them (nothing cut or tokenized) until every DOCUMENTS_PROBE-th reads them
    again; a request whose copy from them is written pays for the read, and they are read again."""
    enc = CountingEncoder(vocab)
    lines = code_lines(200)
    d = LookupDrafter(special_ids=vocab.special_ids, index=BlockIndex(enc))
    seq = vocab.encode_text("# elsewhere\n" + "\n".join(lines[100:102]) + "\n")

    def request(written: list[int], step_ms: float = 1.0) -> dict:
        d.read([LookupText(lines, (199, 0))])
        draft = d.propose(seq, b"", 12, GREEDY)
        agreed = common_prefix_len(draft.tokens, written) if draft.source == "document" else 0
        d.judge(agreed, step_ms)
        d.end(written)
        return {**d.summary(), "agreed": agreed}

    first = request([], step_ms=0.0)            # read, and nothing of it written
    assert first["blocks"] > 10 and not first["documents_skipped"] and first["documents_gain_ms"] < 0
    copy = d.corpus.find(seq, 12, 0, vocab.special_ids).tokens     # what the document says comes next
    assert len(copy) >= 4
    read = len(enc.texts)
    skipped = [request([], step_ms=0.0) for _ in range(lk.DOCUMENTS_PROBE - 1)]
    assert all(s["documents_skipped"] and s["blocks"] == 0 for s in skipped) and len(enc.texts) == read
    probe = request([], step_ms=0.0)
    assert not probe["documents_skipped"] and probe["blocks"] > 10
    for _ in range(lk.DOCUMENTS_PROBE - 1):
        assert request([], step_ms=0.0)["documents_skipped"]
    paid = request(copy, step_ms=100.0)         # the probe, and the target writes the copy
    assert not paid["documents_skipped"] and paid["agreed"] == len(copy)
    assert paid["documents_gain_ms"] > 0
    assert not request([], step_ms=0.0)["documents_skipped"]        # read again: on average it paid


def test_the_text_after_the_cursor_is_not_proposed_after_the_text_before_it(vocab):
    lines = ["def unique_name_here(alpha, beta):", "    return alpha ** beta + 12345", ""]
    d = drafter_on(vocab, lines, (1, len("    return alpha")))
    seq = vocab.encode_text("def unique_name_here(alpha, beta):\n    return alpha")
    assert d.propose(seq, b"", 8, GREEDY).tokens == []


def test_other_open_documents_are_read_too(vocab):
    other = ["class Registry:", "    def register_handler(self, name, handler):",
             "        self._handlers[name] = handler", "        return handler", ""]
    d = drafter_on(vocab, ["x = 1", ""], (1, 0), others=[other])
    seq = vocab.encode_text("    def register_handler(self, name, handler):\n")
    draft = d.propose(seq, b"", 10, GREEDY)
    assert vocab.bytes_of(draft.tokens).decode().startswith("        self._handlers[name]")
    assert draft.source == "open documents"


def test_a_longer_match_in_the_document_beats_a_short_one_in_the_prompt(vocab):
    lines = code_lines(40)
    d = drafter_on(vocab, lines, (39, 0))
    seq = vocab.encode_text("\n".join(lines[4:6]) + "\n")
    near = LookupDrafter(special_ids=vocab.special_ids).propose(seq, b"", 6, GREEDY)
    far = d.propose(seq, b"", 6, GREEDY)
    assert far.match > near.match and far.source == "document"


def test_copies_from_the_documents_say_so(vocab):
    """The policy judges copies from the documents apart (engine/policy.py, `key`): each proposal
    says where it was found."""
    lines = code_lines(200)
    d = drafter_on(vocab, lines, (199, 0))
    v = vocab
    seq = v.encode_text("# elsewhere\n" + "\n".join(lines[100:102]) + "\n")
    draft = d.propose(seq, b"", 12, GREEDY)
    assert len(draft.tokens) == 12 and draft.source == "document"
    near = LookupDrafter(special_ids=v.special_ids).propose(v.encode_text("a = 1\nb = 2\na = 1\n"), b"", 4, GREEDY)
    assert near.tokens and near.source == "prompt"


# ------------------------------------------------------------------------------ the shipped pair

@pytest.fixture(scope="module")
def engines():
    return {name: LocalEngine(EngineConfig(target="default", draft=name, device="cpu"))
            for name in ("none", "ngram", "default")}


def complete(engine, text, line, col, **options):
    pipe = CompletionPipeline(engine)
    opts = CompletionOptions(max_new_tokens=48, multiline="always", **options)
    c = pipe.complete(CompletionRequest(URI, text, line, col), opts)
    return (c.text if c else ""), pipe.last_stats


def far_copy_case(engines):
    """A place in a long file, the target's own answer there, and the place with that answer."""
    filler = code_lines(600)                  # thousands of tokens: far more than the window
    place = ["def area_of_shape(shape, unit='cm'):", "    if shape.kind == 'circle':",
             "        radius = shape.size / 2"]
    doc = "\n".join([*filler, *place])
    lines = doc.split("\n")
    answer, stats = complete(engines["none"], doc, len(lines) - 1, len(place[-1]))
    assert len(stats["raw_text"]) > 10 and stats["window_lines"][0] > 0
    return doc, "\n".join(place) + stats["raw_text"], answer, stats


def fresh_lookup() -> LocalEngine:
    """An engine whose policy has not yet learned how far copies from the documents agree."""
    return LocalEngine(EngineConfig(target="default", draft="ngram", device="cpu"))


def test_code_far_above_the_window_is_drafted_and_verified(engines):
    """The target's own answer at a place also written far above, outside the prompt's window:
    lookup reads it in the document, drafts it, and the target accepts it."""
    engines = {**engines, "ngram": fresh_lookup()}
    doc, copy, answer, plain = far_copy_case(engines)
    copy_lines = copy.split("\n")
    # Lines added above in whole steps of the prompt window's start: the prompt stays the same.
    pad = -(len(copy_lines) + 1) % CompletionOptions().window_step_lines
    text = "\n".join([*copy_lines, "", *[""] * pad]) + "\n" + doc
    line, col = len(text.split("\n")) - 1, len(doc.split("\n")[-1])

    alone, stats = complete(engines["none"], text, line, col)
    near, near_stats = complete(engines["ngram"], text, line, col, lookup_documents=False)
    far, far_stats = complete(engines["ngram"], text, line, col)
    assert alone == near == far == answer and stats["raw_text"] == plain["raw_text"]
    assert stats["window_lines"][0] > len(copy_lines)       # the copy is not in the prompt
    assert near_stats["lookup"]["proposed"].get("document", 0) == 0
    found = far_stats["lookup"]
    assert found["proposed"]["document"] >= 1 and found["blocks"] > 10
    assert found["agreed"]["document"] >= 0.8 * far_stats["new_tokens"]
    assert far_stats["accepted"] > near_stats["accepted"] and far_stats["rounds"] < near_stats["rounds"]
    assert found["documents_gain_ms"] > 0       # the copy saved more than reading the documents took


def test_code_in_another_open_document_is_drafted_and_verified(engines):
    engines = {**engines, "ngram": fresh_lookup()}
    doc, copy, answer, plain = far_copy_case(engines)
    lines = doc.split("\n")
    runs = {}
    for name, docs in (("none", True), ("ngram", False), ("ngram", True)):
        pipe = CompletionPipeline(engines[name])
        pipe.note_document("file:///work/demo/other.py", "import math\n\n" + copy + "\n")
        opts = CompletionOptions(max_new_tokens=48, multiline="always", extra_tokens=0, lookup_documents=docs)
        c = pipe.complete(CompletionRequest(URI, doc, len(lines) - 1, len(lines[-1])), opts)
        runs[name, docs] = (c.text if c else "", pipe.last_stats)
    assert {text for text, _ in runs.values()} == {answer}
    near, far = runs["ngram", False][1], runs["ngram", True][1]
    assert far["lookup"]["agreed"]["open documents"] >= 0.8 * far["new_tokens"]
    assert "open documents" not in near["lookup"]["proposed"]
    assert far["rounds"] < near["rounds"]


def real_files():
    pygls = Path(importlib.import_module("pygls").__file__).parent
    files = sorted(p for p in pygls.rglob("*.py") if 8000 <= p.stat().st_size <= 40000)
    return files[:2]


@pytest.mark.parametrize("draft", ["ngram", "default"])
def test_document_lookup_keeps_greedy_output_on_real_files(engines, draft):
    files = real_files()
    assert files, "pygls (a server dependency) has no source files of 8-40 KB"
    read = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        for line, col in end_of_line_cursors(text, 3):
            alone, _ = complete(engines["none"], text, line, col)
            spec, stats = complete(engines[draft], text, line, col)
            assert spec == alone, (path.name, line)
            read += stats["lookup"]["blocks"]
    assert read > 0


def test_lookup_texts_do_nothing_without_lookup(engines):
    lines = code_lines(50)
    text, stats = complete(engines["none"], "\n".join(lines), 49, 0)
    assert "lookup" not in stats


def test_documents_are_not_warmed_for_requests_that_do_not_read_them(engines):
    """Without prompt lookup nothing is tokenized; the cost-aware default reads the documents,
    unless its requests skip them for now (reading them has not paid)."""
    text = [LookupText(code_lines(200, "warmed"))]
    assert engines["none"].warm_lookup(text) == 0        # no lookup at all
    fresh = fresh_lookup()
    assert fresh.warm_lookup(text) > 1000
    fresh.drafters.lookup.worth.record(read_ms=5.0, tokens=0, step_ms=1.0)
    assert fresh.warm_lookup([LookupText(code_lines(200, "other"))]) == 0
