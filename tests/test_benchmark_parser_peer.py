"""tools/benchmark_parser_peer.py: SuPar's trees, its errors, and EVALB as ours is scored.

SuPar needs PyTorch, which t2t_lite's environment does not hold. The tree files, the
argument checks and the refusal of a Python without SuPar run everywhere; the end-to-end
run (one epoch on the WSJ sample) runs when SUPAR_PYTHON names a Python with SuPar
(`python3 -m venv ~/venvs/supar && ~/venvs/supar/bin/pip install supar`).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import warm_python
from conftest import load_tool

from t2t_lite import problems

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_parser_peer.py"


def _run(*args, timeout=600):
    return warm_python.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


def test_tree_files_hold_the_samples_preprocessed_trees_under_top(shared_data, tmp_path):
    tool = load_tool("benchmark_parser_peer")
    args = tool.parse_args([f"--shared_data={shared_data}", "--peer_python=x", "--epochs=1"])
    gold = tool.prepare(args, tmp_path)
    corpus = problems.get("wsj_parsing").corpus("", str(shared_data / "wsj_sample"), "raw")
    for split in ("train", "dev", "test"):
        lines = (tmp_path / f"{split}.pid").read_text(encoding="utf-8").splitlines()
        # The trees parse_wsj_sample.py scores against, one per line, each inside (TOP ...).
        assert gold[split] == corpus.gold_trees(split)
        assert lines == [f"(TOP {tree})" for tree in gold[split]]
        assert tool.read_trees(tmp_path / f"{split}.pid") == gold[split]
    assert [len(gold[s]) for s in ("train", "dev", "test")] == [3396, 105, 168]
    (tmp_path / "bad.pid").write_text("(TOP (S (NN a)))\n(S (NN b))\n")
    with pytest.raises(ValueError, match=r"bad.pid line 2: not a \(TOP \.\.\.\) tree"):
        tool.read_trees(tmp_path / "bad.pid")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--peer_python=/nonexistent/python", "--epochs=1"], "not an executable file; python3"),
        (["--peer_python=x", "--minutes=0"], "--minutes=0.0: expected a positive number"),
        (["--peer_python=x", "--epochs=1", "--splits=train"], "--splits=train: expected dev"),
        (["--epochs=1"], "--peer_python"),
    ],
)
def test_bad_arguments_are_one_clear_line(args, message):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert message in result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr


def test_a_python_without_supar_is_one_line_saying_how_to_install_it(tmp_path):
    result = _run(f"--peer_python={sys.executable}", "--epochs=1", f"--work_dir={tmp_path}")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"supar is not importable with {sys.executable}; install it: "
        "python3 -m venv ~/venvs/supar && ~/venvs/supar/bin/pip install supar"
    )
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


@pytest.mark.skipif(
    not os.environ.get("SUPAR_PYTHON"), reason="SUPAR_PYTHON names no Python with SuPar"
)
def test_one_epoch_is_scored_as_the_evalb_command_scores_the_written_files(shared_data, tmp_path):
    result = _run(
        f"--peer_python={os.environ['SUPAR_PYTHON']}", "--epochs=1", "--splits=dev",
        f"--shared_data={shared_data}", f"--work_dir={tmp_path}", timeout=1800,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 epochs finished, model of epoch 1 kept" in result.stdout
    row = re.search(r"^\| SuPar CRF \(MBR, 1 epochs\) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|",
                    result.stdout, re.M)  # fmt: skip
    assert row, result.stdout
    evalb = subprocess.run(
        [sys.executable, "-m", "t2t_lite.evalb", "-p", str(shared_data / "evalb" / "COLLINS.prm"),
         str(tmp_path / "dev.gold"), str(tmp_path / "dev.supar")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert evalb.returncode == 0, evalb.stderr
    summary = evalb.stdout.split("-- All --")[1]
    for label, value in zip(("Bracketing FMeasure", "Bracketing Precision", "Bracketing Recall"),
                            row.groups()):  # fmt: skip
        assert re.search(rf"^{label}\s*=\s*{re.escape(value)}\s*$", summary, re.M), (label, summary)
