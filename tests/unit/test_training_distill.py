"""The editor positions distillation trains and is evaluated on (training/editor_positions.py),
the held-out split, and the draft's examples (training/distill_data.py) on the tiny pair's
tokenizers: the prompt is the draft template's own, the answer is the target's text."""
from __future__ import annotations

import random

from training.editor_positions import (SourceText, code_lines, position_at, random_positions,
                                       read_sources, split_files, spread_positions)

CODE = '''import os


def walk(root):
    """Files under root."""
    # comment line
    for dirpath, _, names in os.walk(root):
        for name in names:
            yield os.path.join(dirpath, name)


def count(root):
    return sum(1 for _ in walk(root))
'''


def test_code_lines_skip_blank_comment_and_docstring_lines():
    lines = [CODE[s:e] for s, e in code_lines(CODE)]
    assert lines[0] == "def walk(root):" and "    # comment line" not in lines
    assert '    """Files under root."""' not in lines and "" not in lines
    assert "import os" not in lines      # line 0 has no context before it


def test_each_kind_puts_the_cursor_where_an_editor_would():
    f = SourceText("walk.py", CODE)
    line = next((s, e) for s, e in code_lines(CODE) if CODE[s:e] == "        for name in names:")
    s, e = line
    rng = random.Random(0)
    eol = position_at(f, "eol", line, rng)
    assert eol.prefix.endswith("        for name in names:") and eol.suffix.startswith("\n            yield")
    fresh = position_at(f, "fresh", line, rng)
    assert fresh.prefix.endswith("os.walk(root):\n        ")       # the line removed, its indent kept
    assert fresh.suffix.startswith("\n            yield") and "for name in names" not in fresh.prefix + fresh.suffix
    l2r = position_at(f, "l2r", line, rng)
    assert l2r.suffix == "" and l2r.prefix == fresh.prefix
    mid = position_at(f, "mid", line, rng)
    assert mid.prefix + mid.suffix == CODE and s + 8 < len(mid.prefix) < e
    assert CODE[len(mid.prefix) - 1].isalnum()                       # right after a word


def test_split_is_seeded_and_holds_out_at_least_one_file():
    files = [SourceText(f"m{i}.py", CODE + f"\nX = {i}\n") for i in range(10)]
    train, held = split_files(files, 0.2, seed=0)
    assert len(held) == 2 and len(train) == 8 and not {f.path for f in train} & {f.path for f in held}
    assert split_files(list(reversed(files)), 0.2, seed=0) == (train, held)
    assert split_files(files, 0.2, seed=1) != (train, held)
    assert len(split_files(files[:2], 0.01, seed=0)[1]) == 1


def test_positions_are_deterministic_and_spread(tmp_path):
    (tmp_path / "walk.py").write_text(CODE * 2)                # over the 300-byte floor
    (tmp_path / "tiny.py").write_text("x = 1\n")          # under the size floor: skipped
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "dep.py").write_text(CODE)
    files = read_sources([str(tmp_path)])
    assert [f.path for f in files] == ["walk.py"]
    a = spread_positions(files[0], "eol", 3)
    assert a == spread_positions(files[0], "eol", 3) and len(a) == 3 and len({p.prefix for p in a}) == 3
    stream = random_positions(files, {"eol": 1, "fresh": 1}, seed=5)
    first = [next(stream) for _ in range(20)]
    again = random_positions(files, {"eol": 1, "fresh": 1}, seed=5)
    assert first == [next(again) for _ in range(20)] and {p.kind for p in first} == {"eol", "fresh"}


def test_draft_example_is_the_draft_prompt_then_the_target_text():
    from completion.templates import load_template
    from tests.tiny_models import tiny_tokenizers
    from training.distill_data import Sample, draft_example, prompt_ids

    _, draft_tok = tiny_tokenizers()
    t = load_template(draft_tok)
    s = Sample("eol", "spm", "def f(x):\n    ", "\n\nprint(f(2))\n", "return x + 1", ended=True)
    ids, is_answer = draft_example(t, s)
    prompt = t.build(s.prefix, s.suffix, "spm")
    assert ids[:len(prompt)] == prompt and not any(is_answer[:len(prompt)])
    answer = ids[len(prompt):]
    assert all(is_answer[len(prompt):]) and answer[-1] == t.stop_ids[0]
    assert draft_tok.decode(answer[:-1]) == "return x + 1"
    l2r = Sample("l2r", "prefix", "def f(x):\n    ", "", "return x", ended=False)
    ids, is_answer = draft_example(t, l2r)
    assert ids[:len(prompt_ids(t, l2r.prefix, "", "prefix"))] == t.encode(l2r.prefix)
    assert draft_tok.decode([i for i, a in zip(ids, is_answer) if a]) == "return x"



def test_a_capped_draft_prompt_is_the_text_nearest_the_cursor_as_the_editor_cuts_it():
    """Distillation trains, and its report measures, the draft on the prompts the editor gives it
    (completion.pipeline.draft_window): with a cap, the lines nearest the cursor within it."""
    from completion.context import parse_document
    from completion.pipeline import CompletionOptions, draft_window
    from completion.templates import load_template
    from tests.tiny_models import tiny_tokenizers
    from training.distill_data import Sample, draft_example, draft_prompt_ids, prompt_ids

    _, draft_tok = tiny_tokenizers()
    t = load_template(draft_tok)
    prefix = "".join(f"value_{i} = compute({i})\n" for i in range(200)) + "    "
    suffix = "\n" + "".join(f"other_{i} = {i}\n" for i in range(50))
    whole = prompt_ids(t, prefix, suffix, "spm")
    assert draft_prompt_ids(t, prefix, suffix, "spm", None) == whole
    capped = draft_prompt_ids(t, prefix, suffix, "spm", 128)
    assert len(capped) <= 128 + 8 < len(whole)
    text = draft_tok.decode(capped)
    assert "value_199 = compute(199)" in text and "value_0 = " not in text and "other_0 = 0" in text
    options = CompletionOptions()
    cur = parse_document(prefix + suffix, 200, 4)
    window, _ = draft_window(cur, lambda s: len(t.encode_infill(s)),
                             (options.prefix_tokens, options.suffix_tokens, 0), 128, options.window_step_lines)
    assert capped == t.build(window.prefix, window.suffix, "spm")
    s = Sample("eol", "spm", prefix, suffix, "return x", ended=False)
    ids, is_answer = draft_example(t, s, 128)
    assert ids[:len(capped)] == capped and draft_tok.decode([i for i, a in zip(ids, is_answer) if a]) == "return x"


# --- token-level KL (training/distill.py, when the draft shares the target's vocabulary) ---------

import functools  # noqa: E402


@functools.lru_cache(maxsize=None)
def same_vocabulary_data():
    """The tiny Llama target, its smaller same-tokenizer Llama draft (tests/tiny_models.py), the
    target's greedy answers at editor positions of training and held-out stdlib files, and those
    answers as draft examples (the draft's prompt, then the target's text)."""
    import calendar, fnmatch, glob, gzip, inspect, sched, shlex, string, tempfile  # noqa: E401

    from completion.templates import load_template
    from engine import load_model
    from tests.tiny_models import tiny_pair_dirs, tiny_same_tokenizer_draft_dir
    from training.distill_data import draft_example, generate_samples

    target_dir, _ = tiny_pair_dirs()
    draft_dir = tiny_same_tokenizer_draft_dir()
    target = load_model(target_dir, "target", device="cpu", dtype="float32")
    template = load_template(target.tokenizer)
    train = [SourceText(f"{m.__name__}.py", inspect.getsource(m)) for m in (calendar, fnmatch, glob, gzip, shlex)]
    held = [SourceText(f"{m.__name__}.py", inspect.getsource(m)) for m in (string, sched)]
    kinds = {"eol": 1, "fresh": 1, "mid": 1, "l2r": 1}
    work = tempfile.mkdtemp(prefix="specfill-kl-")
    examples = {}
    for name, files, seed in (("train", train, 0), ("held", held, 1)):
        samples = generate_samples(target, template, lambda s, files=files: random_positions(files, kinds, s),
                                   f"{work}/{name}.jsonl", minutes=60, max_new_tokens=24, batch=16, seed=seed,
                                   max_samples=64, log=lambda _: None)
        examples[name] = [draft_example(template, s) for s in samples]
    return target_dir, draft_dir, target, held, examples, work


def held_out_agreement(target_model, draft_model, examples) -> tuple[float, float]:
    """Mean KL(target || draft) and how often their argmax agree, over the target-written tokens
    of held-out examples (teacher-forced)."""
    import torch
    import torch.nn.functional as F

    from training.distill import make_batch, scored_logits

    x, _, w = make_batch(examples, list(range(len(examples))), 0, prompt_weight=0.0)
    keep = w > 0
    with torch.no_grad():
        t = F.log_softmax(scored_logits(target_model, x, keep).float(), -1)
        d = F.log_softmax(scored_logits(draft_model, x, keep).float(), -1)
    kl = (t.exp() * (t - d)).sum(-1).mean().item()
    return kl, (t.argmax(-1) == d.argmax(-1)).float().mean().item()


def test_same_vocabulary_kl_pulls_the_draft_towards_the_target_and_raises_acceptance():
    from engine import load_model
    from engine.engine import same_vocabulary
    from training.distill import DistillSettings, save_draft, train_draft
    from training.distill_eval import EvalSettings, measure

    target_dir, draft_dir, target, held, examples, work = same_vocabulary_data()
    assert same_vocabulary(target.tokenizer, load_model(draft_dir, "draft", device="cpu").tokenizer)
    trained = {}
    for label, teacher in (("kl", target.model), ("sequence only", None)):
        draft = load_model(draft_dir, "draft", device="cpu", dtype="float32")
        state = train_draft(draft, examples["train"], teacher, DistillSettings(lr=3e-3, batch_size=8, log_every=1000),
                            minutes=60, max_steps=30, seed=0, ckpt_path=f"{work}/{label}.pt", device=draft.device)
        assert state["step"] == 30
        trained[label] = draft
    before = held_out_agreement(target.model, load_model(draft_dir, "draft", device="cpu", dtype="float32").model,
                                examples["held"])
    with_kl = held_out_agreement(target.model, trained["kl"].model, examples["held"])
    without = held_out_agreement(target.model, trained["sequence only"].model, examples["held"])
    # Measured here (seeds 0-2 of the data and batches): KL 0.524 -> 0.46-0.48 with the KL term,
    # 0.92-0.95 without (the one-hot target text alone makes the draft overconfident); argmax
    # agreement 0.45 -> 0.73-0.76 either way.
    assert with_kl[0] < 0.95 * before[0], (before, with_kl)
    assert without[0] > 1.5 * with_kl[0], (with_kl, without)      # the KL term is what keeps it close
    assert with_kl[1] >= before[1] + 0.2, (before, with_kl)

    save_draft(trained["kl"], f"{work}/kl-draft", "float32", {})
    positions = [p for f in held for kind in ("eol", "fresh") for p in spread_positions(f, kind, 4)]
    result = measure(target_dir, {"before": draft_dir, "after": f"{work}/kl-draft"}, positions,
                     EvalSettings(draft_length=4, max_new_tokens=24, device="cpu", threads=1), log=lambda _: None)
    assert result.same_output
    b, a = result.by_kind["before"]["all"], result.by_kind["after"]["all"]
    assert b.positions == a.positions == 16
    # Measured here: acceptance 0.217 -> 0.32-0.38, tokens per target call 1.77 -> 2.1-2.4.
    assert a.acceptance >= b.acceptance + 0.1, (b.as_dict(), a.as_dict())
    assert a.tokens_per_call > b.tokens_per_call


def test_a_finished_training_given_more_budget_goes_on_where_it_stopped():
    from engine import load_model
    from training.distill import DistillSettings, train_draft

    _, draft_dir, target, _, examples, work = same_vocabulary_data()
    s = DistillSettings(batch_size=2, warmup_steps=2, log_every=1000)
    states = []
    for steps in (3, 3, 5):   # a fresh run, the same budget again (nothing to do), then more
        draft = load_model(draft_dir, "draft", device="cpu", dtype="float32")
        state = train_draft(draft, examples["train"], target.model, s, minutes=60, max_steps=steps, seed=0,
                            ckpt_path=f"{work}/resume.pt", device=draft.device)
        assert state["step"] == steps and state["done"]
        states.append(state)
    assert "segment_step" not in states[1] and states[2]["segment_step"] == 3


def test_data_workers_write_their_own_seeded_shards_and_one_worker_writes_what_generate_samples_does(tmp_path):
    """`--gen-workers 2`: this process is worker 0 (the command's seed, samples.jsonl), a spawned
    process with its own target is worker 1 (seed + 1, samples.1.jsonl); --max-samples is split
    between them. Worker 0's file is the one a single-process run writes, byte for byte."""
    import inspect
    import shlex as shlex_module
    import string as string_module

    from completion.templates import load_template
    from engine import load_model
    from tests.tiny_models import tiny_pair_dirs
    from training.distill_data import (DataJob, generate_in_workers, generate_samples, read_samples, shard_max,
                                       shard_path)
    from training.editor_positions import training_and_held_out

    code = tmp_path / "code"
    code.mkdir()
    for m in (shlex_module, string_module):
        (code / f"{m.__name__}.py").write_text(inspect.getsource(m), encoding="utf-8")
    target_dir, _ = tiny_pair_dirs()
    kinds = (("eol", 1.0), ("fresh", 1.0), ("mid", 1.0), ("l2r", 1.0))
    job = DataJob(target_dir, "cpu", 1, (str(code),), None, (".py",), 0.5, 0, kinds, 60.0, 8, 4)
    train_files, _ = training_and_held_out([str(code)], None, (".py",), 0.5, 0)
    target = load_model(target_dir, "target", device="cpu", dtype="float32")
    template = load_template(target.tokenizer)

    def positions(seed):
        return random_positions(train_files, dict(kinds), seed)

    assert [shard_max(33, 2, i) for i in (0, 1)] == [17, 16] and shard_max(0, 2, 1) == 0
    work = tmp_path / "two"
    work.mkdir()
    samples = generate_in_workers(job, 2, target, template, train_files, str(work), seed=5, max_samples=32,
                                  log=lambda _: None)
    first, second = read_samples(shard_path(str(work), 0)), read_samples(shard_path(str(work), 1))
    assert shard_path(str(work), 1).endswith("samples.1.jsonl")
    # whole groups of 4 batches of 4: each worker stops at its first group past 16 samples
    assert len(first) >= 16 and len(second) >= 16 and samples == first + second
    assert {(s.prefix, s.suffix) for s in first} != {(s.prefix, s.suffix) for s in second}   # own seeds

    alone = tmp_path / "one"
    alone.mkdir()
    generate_samples(target, template, positions, str(alone / "samples.jsonl"), 60.0, 8, 4, seed=5,
                     max_samples=16, log=lambda _: None)
    assert (alone / "samples.jsonl").read_bytes() == (work / "samples.jsonl").read_bytes()
