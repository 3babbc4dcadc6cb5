"""Padding efficiency and throughput of the length-bucketed tf.data pipeline on real text.

    python tools/benchmark_pipeline.py [--shared_data=../shared/data] [--data_dir=/tmp/...]

Prepares (once; reruns reuse it) Multi30k En-De with its own 8,000-token vocabulary and
WMT14 En-De from the WMT news files (news-test2008, newssyscomb2009, newstest2009-2011
as training text, newstest2013 as dev, newstest2012 standing in for newstest2014) with
the paper's 37,000-token vocabulary, then prints, for one training epoch:

* padding efficiency = non-pad tokens / all tokens of the batches (inputs and targets),
  for the bucketed pipeline and for naive batching of a fixed number of sentences
  (padded to the batch's longest, and padded to max_length as static shapes need);
* throughput of the training pipeline in tokens per second with TensorFlow limited to
  two threads (`--threads`).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from t2t_lite import hparams, problems

_NEWS_TRAIN = ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010", "newstest2011")


def wmt_raw_dir(shared: Path, folder: Path) -> Path:
    """The WMT14 raw layout as symbolic links to the shared news files."""
    folder.mkdir(parents=True, exist_ok=True)
    news = shared / "wmt_news_2008_2012"
    links = {
        f"{s}.en-de.{lang}": news / f"{s}.en-de.{lang}"
        for s in _NEWS_TRAIN
        for lang in ("en", "de")
    }
    for lang in ("en", "de"):
        links[f"newstest2013.{lang}"] = shared / "wmt13_newstest2013" / f"newstest2013.{lang}"
        links[f"newstest2014.{lang}"] = news / f"newstest2012.en-de.{lang}"
    for name, target in links.items():
        if not (folder / name).exists():
            os.symlink(target, folder / name)
    return folder


def efficiency(batches) -> tuple:
    """(non-pad / all tokens, batches, mean padded tokens per batch) of numpy batches."""
    real = total = count = 0
    for batch in batches:
        for key in ("inputs", "targets"):
            real += np.count_nonzero(batch[key])
            total += batch[key].size
        count += 1
    return real / total, count, total / count


def naive(problem, data_dir: str, hp, pad_to: int | None):
    """Fixed-size batches of shuffled, length-filtered examples."""
    lengths = problem.length_counts("train", data_dir)
    mean = sum(n * c for n, c in lengths.items()) / sum(lengths.values())
    size = max(1, round(hp.batch_size / mean))  # sentences per batch: the same mean budget
    dataset = problem.examples("train", data_dir).filter(
        lambda e: tf.maximum(tf.size(e["inputs"]), tf.size(e["targets"])) <= hp.max_length
    )
    dataset = dataset.shuffle(10_000, seed=1)
    shapes = {"inputs": [pad_to], "targets": [pad_to]}
    return dataset.padded_batch(size, padded_shapes=shapes).as_numpy_iterator(), size


def throughput(problem, data_dir: str, hp, seconds: float, threads: int) -> tuple:
    """(non-pad tokens/s, padded tokens/s, batches/s) of the training pipeline."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = problem.dataset("train", data_dir, hp, seed=1).with_options(options)
    iterator = iter(dataset)
    for _ in range(50):  # Warm-up: fill the shuffle buffer and the prefetch queue.
        next(iterator)
    real = total = count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = next(iterator)
        for key in ("inputs", "targets"):
            real += int(tf.math.count_nonzero(batch[key]))
            total += int(tf.size(batch[key]))
        count += 1
    elapsed = time.perf_counter() - start
    return real / elapsed, total / elapsed, count / elapsed


def main() -> None:
    repo = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared_data", default=str(repo.parent / "shared" / "data"))
    parser.add_argument(
        "--data_dir", default=os.path.join(tempfile.gettempdir(), "t2t_lite_benchmark")
    )
    parser.add_argument("--hparams_set", default="transformer_base")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    hp = hparams.get(args.hparams_set)
    shared = Path(args.shared_data)
    corpora = [
        ("Multi30k En-De", problems.get("multi30k_ende"), str(shared / "multi30k")),
        (
            "WMT news En-De",
            problems.get("wmt14_ende"),
            str(wmt_raw_dir(shared, Path(args.data_dir) / "wmt_raw")),
        ),
    ]
    print(
        f"hparams {args.hparams_set}: batch_size={hp.batch_size} tokens, max_length={hp.max_length}"
    )
    print(
        f"{'corpus':16} {'vocab':>6} {'batching':36} {'efficiency':>10} {'batches':>8} {'src+tgt/batch':>13}"
    )
    speeds = []
    for label, problem, raw in corpora:
        metadata = problem.generate_data(args.data_dir, raw)
        vocab = metadata["settings"]["vocab_size"]
        bucketed = problem.dataset("train", args.data_dir, hp, num_epochs=1, seed=1)
        rows = [("length buckets (t2t boundaries)", bucketed.as_numpy_iterator())]
        batches, size = naive(problem, args.data_dir, hp, None)
        rows.append((f"naive {size} sentences, pad to longest", batches))
        batches, size = naive(problem, args.data_dir, hp, hp.max_length)
        rows.append((f"naive {size} sentences, pad to {hp.max_length}", batches))
        for name, batches in rows:
            ratio, count, mean = efficiency(batches)
            print(f"{label:16} {vocab:>6} {name:36} {ratio:>10.3f} {count:>8} {mean:>13.0f}")
        speeds.append((label, *throughput(problem, args.data_dir, hp, args.seconds, args.threads)))
    print(
        f"\nthroughput of the training pipeline, {args.threads} threads, {args.seconds:.0f} s each"
    )
    print(f"{'corpus':16} {'non-pad tokens/s':>17} {'padded tokens/s':>16} {'batches/s':>10}")
    for label, real, total, rate in speeds:
        print(f"{label:16} {real:>17,.0f} {total:>16,.0f} {rate:>10.1f}")


if __name__ == "__main__":
    main()
