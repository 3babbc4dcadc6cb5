"""`python -m t2t_lite.datagen` end to end on real Multi30k files; problems by name or module."""

import gzip
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from t2t_lite import problems
from t2t_lite.problems.problem import Problem
from t2t_lite.problems.translate import TranslateProblem


def run_datagen(*flags, env=None) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "TF_CPP_MIN_LOG_LEVEL": "2"}
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


USER_MODULE = """
from t2t_lite.problems.translate import TranslateProblem


class Captions(TranslateProblem):
    name = "captions_ende"
    vocab_size = 400
    num_shards = {"train": 2}


NOT_A_PROBLEM = 3
"""


def write_module(folder, name: str) -> None:
    """Writes `name.py` (a TranslateProblem subclass `Captions`) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(USER_MODULE)


def write_captions(raw, shared_data) -> dict:
    """Real Multi30k captions as train/dev/test.{en,de}: {split: pairs}."""
    raw.mkdir(parents=True)
    sizes = {"train": 300, "dev": 40, "test": 30}
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{language}.gz", "rt") as f:
            lines = f.read().split("\n")
        start = 0
        for split, size in sizes.items():
            part = lines[start : start + size]
            (raw / f"{split}.{language}").write_text("\n".join(part) + "\n", encoding="utf-8")
            start += size
    return sizes


def test_datagen_runs_a_problem_given_as_module_and_class(tmp_path, shared_data):
    write_module(tmp_path / "code", "my_captions")
    data_dir = tmp_path / "data"
    # The default raw folder, DATA_DIR/<name>/raw.
    sizes = write_captions(data_dir / "captions_ende" / "raw", shared_data)
    path = [str(tmp_path / "code"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    result = run_datagen("--problem=my_captions:Captions", f"--data_dir={data_dir}", env=env)
    assert result.returncode == 0, result.stderr
    assert "captions_ende: generated" in result.stdout
    assert "train: 300 examples in 2 shards" in result.stdout
    folder = data_dir / "captions_ende"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["settings"]["vocab_size"] == 400
    for split, size in sizes.items():
        shards = metadata["splits"][split]["shards"]
        records = [
            sum(1 for _ in tf.data.TFRecordDataset(str(folder / shard["file"]))) for shard in shards
        ]
        # Example i goes to shard i mod (number of shards).
        expected = [size // 2, size // 2] if split == "train" else [size]
        assert records == [shard["examples"] for shard in shards] == expected


def test_get_imports_module_and_class(tmp_path, monkeypatch):
    write_module(tmp_path, "captions_a")
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = problems.get("captions_a:Captions")
    assert isinstance(problem, TranslateProblem) and problem.name == "captions_ende"
    assert problems.get("t2t_lite.problems.wmt:Wmt14EnDe").vocab_size == 37_000
    # An instance is returned as it is.
    monkeypatch.setattr(sys.modules["captions_a"], "INSTANCE", problem, raising=False)
    assert problems.get("captions_a:INSTANCE") is problem


def test_get_names_what_is_wrong_with_module_and_class(tmp_path, monkeypatch):
    write_module(tmp_path, "captions_b")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"problem 'no_such_module:X': cannot import module 'no_such_module' "
        r"\(No module named 'no_such_module'\); put the folder that holds it on PYTHONPATH",
    ):
        problems.get("no_such_module:X")
    with pytest.raises(
        ValueError,
        match=r"module 'captions_b' \(.*captions_b.py\) has no attribute 'Missing'; "
        r"it defines captions_b:Captions$",
    ):
        problems.get("captions_b:Missing")
    with pytest.raises(
        ValueError, match=r"captions_b.NOT_A_PROBLEM is int 3, not a subclass or instance"
    ):
        problems.get("captions_b:NOT_A_PROBLEM")
    with pytest.raises(
        ValueError, match=r"captions_b.TranslateProblem has no name; set the class attribute"
    ):
        problems.get("captions_b:TranslateProblem")
    with pytest.raises(ValueError, match=r"problem 'captions_b:': expected module:ClassName"):
        problems.get("captions_b:")
    with pytest.raises(ValueError, match=r"unknown problem 'captions'; known problems: .*"):
        problems.get("captions")


def test_register_adds_a_problem_and_refuses_duplicates(monkeypatch):
    monkeypatch.setattr(problems, "_REGISTRY", dict(problems._REGISTRY))

    @problems.register
    class Captions(TranslateProblem):
        name = "captions_registered"

    assert "captions_registered" in problems.names()
    assert type(problems.get("captions_registered")) is Captions

    class Other(TranslateProblem):
        name = "captions_registered"

    with pytest.raises(
        ValueError,
        match=r"problem name 'captions_registered' is registered already \(by class "
        r".*Captions\); give class .*Other another name",
    ):
        problems.register(Other)
    with pytest.raises(ValueError, match=r"problem name 'wmt14_ende' is registered already"):
        problems.register(problems.get("wmt14_ende"))
    with pytest.raises(ValueError, match=r"register takes a Problem subclass or instance"):
        problems.register(dict)
    instance = Other()
    instance.name = "captions_instance"
    problems.register(instance)
    assert problems.get("captions_instance") is instance
