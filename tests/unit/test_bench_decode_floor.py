"""bench/decode_floor.py: the maps a decode step reads, and the command on a scaled-down shape."""
from __future__ import annotations

import pytest

from bench import decode_floor
from bench.real_shapes import SHAPES


def test_the_maps_of_the_0_5b_shape_are_its_parameters_but_the_norms_and_biases():
    # Qwen2.5-Coder-0.5B has 494,032,768 parameters: the embedding (which the tied output head
    # reads again), 24 layers' maps, 49 RMS norms of 896 and 24 query/key/value biases of 1,152
    maps = decode_floor.linear_maps(SHAPES["qwen2.5-coder-0.5b"])
    assert len(maps) == 24 * 4 + 1
    assert sum(out * width for out, width in maps) == 494_032_768 - 49 * 896 - 24 * 1152
    assert maps[-1] == (151936, 896)


def test_the_starcoder_shape_reads_its_multi_query_maps():
    maps = decode_floor.linear_maps(SHAPES["tiny-starcoder"])
    assert maps[0] == (768 + 2 * 64, 768) and maps[2] == (3072, 768) and len(maps) == 20 * 4 + 1


def test_the_command_prints_a_row_per_kernel(capsys):
    assert decode_floor.main(["--small", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "machine read rate" in out and "| bf16 gemv |" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "kernel" not in line]
    assert all(float(line.split("|")[3]) > 0 for line in rows)


def test_an_unknown_shape_is_one_line(capsys):
    with pytest.raises(SystemExit):
        decode_floor.main(["--shape", "qwen9"])
    assert "not one of" in capsys.readouterr().err
