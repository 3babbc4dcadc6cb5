"""`python -m t2t_lite.datagen` end to end on the real Multi30k files."""

import json
import os
import subprocess
import sys

import pytest

from t2t_lite import problems
from t2t_lite.problems.problem import Problem


def run_datagen(*flags) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run(
        [sys.executable, "-m", "t2t_lite.datagen", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_datagen_builds_then_reruns_as_a_no_op(tmp_path, shared_data):
    flags = [
        "--problem=multi30k_ende",
        f"--data_dir={tmp_path}",
        f"--raw_dir={shared_data / 'multi30k'}",
        "--vocab_size=1000",
    ]
    first = run_datagen(*flags)
    assert first.returncode == 0, first.stderr
    assert "multi30k_ende: generated" in first.stdout
    assert "train: 29,000 examples in 8 shards, 0 empty pairs skipped" in first.stdout
    assert "dev: 1,014 examples in 1 shards" in first.stdout
    assert "test: 1,000 examples in 1 shards" in first.stdout
    folder = tmp_path / "multi30k_ende"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["settings"]["vocab_size"] == 1000
    assert f"fingerprint {metadata['fingerprint']}" in first.stdout
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    second = run_datagen(*flags)
    assert second.returncode == 0, second.stderr
    assert "multi30k_ende: up to date" in second.stdout
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps

    problem = problems.get("multi30k_ende")
    assert problem.fingerprint(str(tmp_path)) == metadata["fingerprint"]
    assert problem.encoders(str(tmp_path))["inputs"].vocab_size == 1000


def test_datagen_names_the_bad_file_and_line(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        (raw / f"{split}.en").write_text("A dog runs.\nTwo cats sleep.\nA bird sings.\n")
        (raw / f"{split}.de").write_text("Ein Hund rennt.\nZwei Katzen schlafen.\n")
    result = run_datagen("--problem=multi30k_ende", f"--data_dir={tmp_path}", f"--raw_dir={raw}")
    assert result.returncode == 1
    assert (
        f"t2t_lite.datagen: {raw}/train.en:3: line has no partner: {raw}/train.de ends after 2 lines"
        in result.stderr
    )
    assert not (tmp_path / "multi30k_ende" / "metadata.json").exists()


def test_problems_generated_in_code_refuse_datagen_options(tmp_path):
    problem = problems.get("algorithmic_copy")
    assert problem.generate_data(str(tmp_path)) == {}
    with pytest.raises(
        ValueError, match=r"algorithmic_copy takes no datagen options; got \['vocab_size'\]"
    ):
        Problem.generate_data(problem, str(tmp_path), vocab_size=100)
