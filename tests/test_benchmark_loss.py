"""tools/benchmark_loss.py: a row per vocabulary size and batch, both ways timed."""

import re
import sys
from pathlib import Path

import warm_python

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_loss.py"


def test_prints_a_row_per_vocabulary_and_batch():
    command = [
        sys.executable, str(SCRIPT), "--vocab_sizes=13,50", "--tokens=64,100",
        "--target_length=8", "--calls=2", "--rounds=1",
    ]  # fmt: skip
    result = warm_python.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = re.findall(r"^\| ([\d,]+) \| ([\d,]+) \|(.*)\|$", result.stdout, re.M)
    # --tokens=100 with sentences of 8 tokens is 12 sentences: 96 target tokens.
    assert [(v, t) for v, t, _ in rows] == [("13", "64"), ("13", "96"), ("50", "64"), ("50", "96")]
    for _, _, rest in rows:
        cells = [cell.strip() for cell in rest.split("|")]
        first_compiled, first_plain, compiled, plain = map(float, cells[:4])
        assert min(first_compiled, first_plain, compiled, plain) > 0
        # The ratio is of the unrounded times; the printed ones are off by <= 0.005 ms.
        ratio = plain / compiled
        bound = ratio * (0.005 / plain + 0.005 / compiled) + 0.005
        assert cells[4].endswith("x") and abs(float(cells[4][:-1]) - ratio) <= bound


def test_bad_arguments_are_one_clear_line():
    result = warm_python.run(
        [sys.executable, str(SCRIPT), "--vocab_sizes=1"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "--vocab_sizes need >= 2" in result.stderr
    assert "Traceback" not in result.stderr
