"""tools/benchmark_peer_train.py: its own measurement process and its errors.

The peer's process needs TF Model Garden, which t2t_lite's environment does not hold;
these tests run t2t_lite's side for real and check that a Python without Model Garden
is refused in one line that says how to install it.
"""

import json
import sys
from pathlib import Path

import pytest
import warm_python

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_peer_train.py"
TINY = [
    "--peak_repeats=1",
    "--small",
    "--sentences=4",
    "--source_length=8",
    "--target_length=8",
    "--vocab_size=50",
]


def _run(*args):
    return warm_python.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_t2t_lite_process_reports_the_paper_formula_and_its_own_timing():
    result = _run("--child=t2t_lite", "--steps=1", "--warmup=0", *TINY)
    assert result.returncode == 0, result.stderr[-3000:]
    line = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")][-1]
    report = json.loads(line[len("RESULT ") :])
    # The small set: 2+2 layers, D 256; 4 sentences of 8 + 8 tokens. With equal source and
    # target lengths every parameter meets 32 tokens: 6 x P x 32, plus 3 x 4 x B x D per
    # query-key pair of the 2 encoder self-, 2 decoder self- and 2 cross-attention blocks.
    # Parameters by hand (post-norm, tied 50 x 256 embedding, no final layer norm): an
    # attention block 4 x (256 x 256 + 256), the FFN 256 x 1024 + 1024 + 1024 x 256 + 256,
    # a layer norm 2 x 256; encoder layers 1 attention + FFN + 2 norms, decoder layers
    # 2 attentions + FFN + 3 norms.
    attention, ffn, norm = 4 * (256 * 256 + 256), 2 * 256 * 1024 + 1024 + 256, 2 * 256
    parameters = 50 * 256 + 2 * (attention + ffn + 2 * norm) + 2 * (2 * attention + ffn + 3 * norm)
    assert report["parameters"] == parameters == 3_699_200
    pairs = 2 * 8 * 8 + 2 * (8 * 8 + 8 * 8)
    assert report["model_flops"] == pytest.approx(6 * parameters * 32 + 12 * 4 * 256 * pairs)
    assert report["implementation"].startswith("t2t_lite ")
    assert report["step_s"] > 0 and report["cpu_step_s"] > 0 and report["first_call_s"] > 0
    assert report["peak"] > 1e9  # FLOP/s of a 4096^3 float32 product: any CPU does 1 GFLOP/s


@pytest.mark.slow
def test_a_python_without_model_garden_is_one_line_saying_how_to_install_it():
    result = _run(f"--peer_python={sys.executable}", "--rounds=1", "--steps=1", *TINY)
    assert result.returncode != 0
    assert "round 1/1: t2t_lite" in result.stdout  # t2t_lite's process ran first
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(f"model_garden run with {sys.executable} failed: ")
    assert "no TF Model Garden here" in message and "tf-models-official" in message
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--peer_python=/nonexistent/python"], "--peer_python=/nonexistent/python: not an"),
        ([], "--peer_python: required"),
        (["--peer_python=x", "--rounds=0"], "--rounds=0: expected a positive number"),
    ],
)
def test_bad_arguments_are_one_clear_line(args, expected):
    result = _run(*args)
    assert result.returncode != 0
    assert expected in result.stderr and "Traceback" not in result.stderr
