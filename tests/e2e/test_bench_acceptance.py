"""bench.acceptance on the tiny pair: a row per drafter (the draft model by kind of position,
prompt lookup without and with a datastore) with figures in range, written to --out too; and a
folder with no code is one line and exit status 2."""
from __future__ import annotations

import re

from bench import acceptance
from engine.drafters.datastore import save
from tests.e2e.lsp_helpers import tiny_pair
from tests.e2e.test_bench import small_files


def test_a_row_per_drafter(tmp_path, capsys):
    target, draft = tiny_pair()
    from transformers import AutoTokenizer

    vocab = AutoTokenizer.from_pretrained(target).get_vocab()
    save(tmp_path / "store.npz", [([1, 2, 3], [4, 5, 6, 7])], vocab)
    out = tmp_path / "acceptance.md"
    rc = acceptance.main(["--files", str(small_files(tmp_path)), "--target", target, "--draft", draft,
                          "--datastore", str(tmp_path / "store.npz"), "--positions", "2", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert out.read_text().strip() in printed
    rows = {cells[0]: cells[1:] for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in printed.splitlines()
        if line.startswith("| ") and not line.startswith("| drafter"))}
    assert set(rows) == {"draft model alone, k=4, 32 tokens, eol", "draft model alone, k=4, 32 tokens, fresh",
                         "draft model alone, k=4, 32 tokens, all", "prompt lookup without the datastore, 48 tokens",
                         "prompt lookup with the datastore, 48 tokens"}
    for label, (positions, rate, per_call) in rows.items():
        assert int(positions) >= 1 and 0 <= float(rate) <= 1 and float(per_call) >= 1, label
    assert int(rows["draft model alone, k=4, 32 tokens, all"][0]) == 4
    assert re.search(r"^4 positions \(eol, fresh\) in 1 files of ", printed, re.M)


def test_a_folder_without_code_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert acceptance.main(["--files", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m bench.acceptance: no usable .py files in") and "\n" not in err
