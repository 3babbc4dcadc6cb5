"""tools/benchmark_serving.py end to end: two real servers, real clients, a sane table.

The model is an untrained tiny Transformer of algorithmic_reverse exported as is (speed,
not quality, is measured), and the request counts are small, so the run takes seconds.
"""

import json
import os
import re
import sys

import keras
import pytest
import warm_python

from t2t_lite import hparams, problems
from t2t_lite.export import export_model
from t2t_lite.models import build_transformer
from t2t_lite.runs import TrainedModel
from t2t_lite.search import SearchConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "hidden_size=32,filter_size=64,num_heads=2,num_encoder_layers=1,num_decoder_layers=1"
ROW = re.compile(
    r"^\| (?P<label>on \(max 4, wait 5 ms, 1 thread\(s\)\)|off) \| (?P<clients>\d+) \| "
    r"(?P<rate>[0-9.]+) \| (?P<p50>[0-9.]+) \| (?P<p95>[0-9.]+) \|$"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    keras.utils.set_random_seed(1)
    problem = problems.get("algorithmic_reverse")
    hp = hparams.override(hparams.get("transformer_tiny"), TINY)
    model = build_transformer(hp, *problem.vocab_sizes(""))
    trained = TrainedModel(model, hp, problem, "(untrained)")
    export_dir = tmp_path_factory.mktemp("export")
    search = SearchConfig.for_problem(problem, hp, beam_size=2, extra_length=4)
    export_model(trained, "", str(export_dir), "rev", search, ids_model_name="")
    return export_dir / "rev"


@pytest.mark.slow
def test_benchmark_prints_a_row_per_setting_and_concurrency(model_dir, tmp_path):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("3 1 4\n1 5 9 2\n6\n\n5 3 5 8 9\n")
    command = [
        sys.executable, os.path.join(REPO, "tools", "benchmark_serving.py"),
        f"--model_dir={model_dir}", f"--sentences_file={sentences}", "--requests=16",
        "--concurrency=1,4,16", "--max_batch_size=4", f"--output_json={tmp_path / 'rows.json'}",
    ]  # fmt: skip
    result = warm_python.run(
        command, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[:2] == [
        "| batching | clients | requests/s | p50 latency (ms) | p95 latency (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    rows = [ROW.match(line) for line in lines[2:]]
    assert all(rows), lines
    assert [(row["label"][:2], int(row["clients"])) for row in rows] == [
        ("on", 1), ("on", 4), ("on", 16), ("of", 1), ("of", 4), ("of", 16)
    ]  # fmt: skip
    recorded = json.loads((tmp_path / "rows.json").read_text())
    for row, numbers in zip(rows, recorded, strict=True):
        rate, p50, p95 = float(row["rate"]), float(row["p50"]), float(row["p95"])
        assert 0 < p50 <= p95 < 60_000 and rate > 0
        # One client sends one request at a time: half of its requests took p50 or more,
        # so the run took at least requests / 2 * p50.
        if numbers["clients"] == 1:
            assert rate <= 2000 / p50 * 1.1
        assert numbers["requests"] == 16
        assert f"{numbers['requests_per_sec']:.1f}" == row["rate"]
