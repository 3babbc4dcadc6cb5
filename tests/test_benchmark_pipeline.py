"""`tools/benchmark_pipeline.py` on a slice of the real corpora, its figures recounted here."""

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
import warm_python

from t2t_lite import hparams, problems

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_pipeline.py"

HP = hparams.get("transformer_base")
PROBLEMS = {"Multi30k En-De": "multi30k_ende", "WMT news En-De": "wmt14_ende"}
ROW = re.compile(
    r"^(Multi30k En-De|WMT news En-De) +(\d+) (.+?) +([\d.]+) +(\d+) +(\d+) +([\d.]+)$"
)
SPEED = re.compile(
    r"^(Multi30k En-De|WMT news En-De) +([\d.]+) +([\d,]+) +([\d,]+) +([\d,]+) +([\d.]+)$"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory, shared_data):
    """(stdout, data_dir) of a quick run: first 1,000 lines of each raw file."""
    data_dir = tmp_path_factory.mktemp("benchmark")
    result = warm_python.run(
        [
            sys.executable,
            str(SCRIPT),
            f"--shared_data={shared_data}",
            f"--data_dir={data_dir}",
            "--max_lines=1000",
            "--vocab_size=1000",
            "--seconds=0.5",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout, str(data_dir)


def table(stdout: str) -> dict:
    """{corpus: [(batching, efficiency, batches, slots per batch)]} of the printed table."""
    rows = {}
    for line in stdout.splitlines():
        if match := ROW.match(line):
            corpus, vocab, batching, efficiency, batches, slots, _ = match.groups()
            assert vocab == "1000"
            rows.setdefault(corpus, []).append(
                (batching, float(efficiency), int(batches), float(slots))
            )
    return rows


def recount(batches) -> tuple:
    """(non-pad / all slots, batches, slots per batch), counted over numpy batches."""
    real = slots = count = 0
    for batch in batches:
        real += sum(np.count_nonzero(batch[key]) for key in ("inputs", "targets"))
        slots += sum(batch[key].size for key in ("inputs", "targets"))
        count += 1
    return real / slots, count, slots / count


def naive_batches(problem, data_dir: str, size: int, pad_to):
    """Fixed-size batches as the tool's docstring defines them, padded here with numpy."""
    dataset = problem.examples("train", data_dir).filter(
        lambda e: tf.maximum(tf.size(e["inputs"]), tf.size(e["targets"])) <= HP.max_length
    )
    examples = list(dataset.as_numpy_iterator())
    order = np.random.default_rng(1).permutation(len(examples))
    for start in range(0, len(order), size):
        chosen = [examples[index] for index in order[start : start + size]]
        batch = {}
        for key in ("inputs", "targets"):
            width = pad_to or max(len(example[key]) for example in chosen)
            batch[key] = np.zeros([len(chosen), width], np.int64)
            for row, example in enumerate(chosen):
                batch[key][row, : len(example[key])] = example[key]
        yield batch


def test_efficiency_rows_match_a_recount_of_the_same_batches(run):
    stdout, data_dir = run
    rows = table(stdout)
    assert list(rows) == list(PROBLEMS)
    for corpus, name in PROBLEMS.items():
        problem = problems.get(name)
        labels = [label for label, *_ in rows[corpus]]
        assert labels[:2] == ["length buckets", "length buckets, pad_to_bucket"]
        longest = int(re.fullmatch(r"naive (\d+) sentences, pad to longest", labels[2])[1])
        fixed = int(re.fullmatch(rf"naive (\d+) sentences, pad to {HP.max_length}", labels[3])[1])
        batch_sets = [
            problem.dataset("train", data_dir, HP, num_epochs=1, seed=1).as_numpy_iterator(),
            problem.dataset(
                "train", data_dir, HP, num_epochs=1, seed=1, pad_to_bucket=True
            ).as_numpy_iterator(),
            naive_batches(problem, data_dir, longest, None),
            naive_batches(problem, data_dir, fixed, HP.max_length),
        ]
        for (label, efficiency, count, slots), batches in zip(rows[corpus], batch_sets):
            expected = recount(batches)
            assert efficiency == pytest.approx(expected[0], abs=5e-4), (corpus, label)
            assert count == expected[1], (corpus, label)
            assert slots == pytest.approx(expected[2], abs=0.5), (corpus, label)
        efficiencies = [efficiency for _, efficiency, _, _ in rows[corpus]]
        assert 1 >= efficiencies[0] >= efficiencies[1] > efficiencies[2] > efficiencies[3] > 0
        # A fair baseline: as many padded slots per batch as the bucketed batches.
        bucketed_slots = rows[corpus][0][3]
        assert rows[corpus][2][3] == pytest.approx(bucketed_slots, rel=0.1)
        assert rows[corpus][3][3] == pytest.approx(bucketed_slots, rel=0.1)


def test_throughput_is_set_against_training(run):
    stdout, _ = run
    assert "training consumes 986 target tokens/s" in stdout
    speeds = [SPEED.match(line) for line in stdout.splitlines()]
    speeds = [match.groups() for match in speeds if match]
    assert [corpus for corpus, *_ in speeds] == list(PROBLEMS)
    for _, batches, slots, real, target, ratio in speeds:
        slots, real, target = (int(value.replace(",", "")) for value in (slots, real, target))
        assert float(batches) > 0 and slots >= real > target > 0
        assert float(ratio) == pytest.approx(target / 986, abs=0.06)
