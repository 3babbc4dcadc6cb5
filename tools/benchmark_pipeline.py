"""Padding efficiency and throughput of the length-bucketed tf.data pipeline on real text.

    python tools/benchmark_pipeline.py [--shared_data=../shared/data] [--data_dir=/tmp/...]

Prepares (once; reruns reuse it) Multi30k En-De with its own 8,000-token vocabulary and
WMT14 En-De from the WMT news files (news-test2008, newssyscomb2009, newstest2009-2011
as training text, newstest2013 as dev, newstest2012 standing in for newstest2014) with
the paper's 37,000-token vocabulary, then prints, for one training epoch of each:

* padding efficiency = non-pad tokens / all token slots of the batches (inputs and
  targets together) of
  - the bucketed pipeline, each feature padded to its own bucket boundary (the default);
  - the bucketed pipeline with `pad_to_bucket` (inputs and targets padded alike to the
    bucket boundary: one shape per bucket, what XLA and GPUs/TPUs are given);
  - naive batches of a fixed number of sentences, padded to the batch's longest;
  - naive batches padded to max_length, as fixed shapes without buckets need.
  The naive baselines are sized to be fair: each holds, on average over the epoch, as
  many padded token slots per batch as the default bucketed batches (the same memory
  and compute per step). Padded to the longest, the sentence count is the one whose
  mean slots per batch come nearest (found by bisection over the same shuffled order);
  padded to max_length, it is the bucketed mean divided by 2 x max_length. Both read
  the length-filtered training examples in one fixed random order (numpy, seed 1);
* throughput of the training pipeline with TensorFlow limited to `--threads` threads,
  next to the rate at which training consumes target tokens (`--train_tokens_per_s`,
  by default transformer_base's float32 step on a 2-core CPU). The ratio uses non-pad
  target tokens, which understates it: a training step pays for padded slots as well.

`--max_lines` (each raw file cut to its first lines), `--vocab_size` and `--seconds`
make a quick run.
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

from t2t_lite import hparams, problems

_NEWS_TRAIN = ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010", "newstest2011")
_MULTI30K_STEMS = ("train", "val", "test_2016_flickr")
# transformer_base training, float32, no XLA, on this project's 2-core CPU (README, training
# step speed: 4.16 s per step of 4,096 target tokens); mixed_bfloat16 reaches 1,652.
TRAIN_TOKENS_PER_S = 986.0


def raw_folder(links: dict, folder: Path, max_lines: int | None) -> Path:
    """`folder` holding {name: source file}: symbolic links, or copies of the first lines."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in links.items():
        path = folder / name
        if max_lines is None:
            if not path.exists():
                os.symlink(source, path)
            continue
        opener = gzip.open if source.suffix == ".gz" else open
        with opener(source, "rt", encoding="utf-8") as f:
            lines = [line for _, line in zip(range(max_lines), f)]
        path.write_text("".join(lines), encoding="utf-8")
    return folder


def corpora(shared: Path, data_dir: Path, max_lines: int | None) -> list:
    """[(label, problem, raw folder)] of the two corpora."""
    cut = "all" if max_lines is None else f"first{max_lines}"
    multi30k = {
        f"{stem}.{lang}{'.gz' if max_lines is None else ''}": shared
        / "multi30k"
        / f"{stem}.{lang}.gz"
        for stem in _MULTI30K_STEMS
        for lang in ("en", "de")
    }
    news = shared / "wmt_news_2008_2012"
    wmt = {
        f"{s}.en-de.{lang}": news / f"{s}.en-de.{lang}"
        for s in _NEWS_TRAIN
        for lang in ("en", "de")
    }
    for lang in ("en", "de"):
        wmt[f"newstest2013.{lang}"] = shared / "wmt13_newstest2013" / f"newstest2013.{lang}"
        wmt[f"newstest2014.{lang}"] = news / f"newstest2012.en-de.{lang}"
    return [
        (
            "Multi30k En-De",
            problems.get("multi30k_ende"),
            raw_folder(multi30k, data_dir / "raw" / f"multi30k_{cut}", max_lines),
        ),
        (
            "WMT news En-De",
            problems.get("wmt14_ende"),
            raw_folder(wmt, data_dir / "raw" / f"wmt_{cut}", max_lines),
        ),
    ]


def bucketed_row(problem, data_dir: str, hp, pad_to_bucket: bool) -> tuple:
    """(non-pad / all slots, batches, slots per batch, sentences per batch) of one epoch."""
    dataset = problem.dataset(
        "train", data_dir, hp, num_epochs=1, seed=1, pad_to_bucket=pad_to_bucket
    )
    real = slots = sentences = count = 0
    for batch in dataset.as_numpy_iterator():
        for key in ("inputs", "targets"):
            real += np.count_nonzero(batch[key])
            slots += batch[key].size
        sentences += len(batch["inputs"])
        count += 1
    return real / slots, count, slots / count, sentences / count


def shuffled_lengths(problem, data_dir: str, hp) -> np.ndarray:
    """[N, 2] (source, target) lengths of the filtered training examples in naive order."""
    dataset = problem.examples("train", data_dir).filter(
        lambda e: tf.maximum(tf.size(e["inputs"]), tf.size(e["targets"])) <= hp.max_length
    )
    dataset = dataset.map(lambda e: tf.stack([tf.size(e["inputs"]), tf.size(e["targets"])]))
    lengths = np.concatenate(list(dataset.batch(8192).as_numpy_iterator()))
    # One fixed order, whatever TensorFlow's random state: numpy's generator, seed 1.
    return lengths[np.random.default_rng(1).permutation(len(lengths))]


def naive_row(lengths: np.ndarray, size: int, pad_to: int | None) -> tuple:
    """The `bucketed_row` figures of batches of `size` consecutive examples of `lengths`.

    Each feature is padded to the batch's longest, or to `pad_to` when given.
    """
    count = -(-len(lengths) // size)
    padded = np.zeros((count * size, 2), np.int64)
    padded[: len(lengths)] = lengths
    longest = padded.reshape(count, size, 2).max(axis=1)  # [batches, 2]
    if pad_to is not None:
        longest[:] = pad_to
    sentences = np.full(count, size)
    sentences[-1] = len(lengths) - size * (count - 1)
    slots = int((sentences * longest.sum(axis=1)).sum())
    return int(lengths.sum()) / slots, count, slots / count, len(lengths) / count


def fair_size(lengths: np.ndarray, slots_per_batch: float) -> int:
    """Sentences per naive batch (padded to its longest) whose mean slots per batch come
    nearest to `slots_per_batch`."""
    low, high = 1, len(lengths)
    while low < high:  # The first size reaching the target (mean slots grow with size).
        middle = (low + high) // 2
        if naive_row(lengths, middle, None)[2] < slots_per_batch:
            low = middle + 1
        else:
            high = middle
    candidates = [size for size in (low - 1, low) if size >= 1]
    return min(candidates, key=lambda s: abs(naive_row(lengths, s, None)[2] - slots_per_batch))


def throughput(problem, data_dir: str, hp, seconds: float, threads: int) -> tuple:
    """(batches/s, all slots/s, non-pad tokens/s, non-pad target tokens/s) while training."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    dataset = problem.dataset("train", data_dir, hp, seed=1).with_options(options)
    iterator = iter(dataset)
    for _ in range(50):  # Warm-up: fill the shuffle buffer and the prefetch queue.
        next(iterator)
    real = target = slots = count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = next(iterator)
        for key in ("inputs", "targets"):
            nonzero = int(tf.math.count_nonzero(batch[key]))
            real += nonzero
            target += nonzero if key == "targets" else 0
            slots += int(tf.size(batch[key]))
        count += 1
    elapsed = time.perf_counter() - start
    return count / elapsed, slots / elapsed, real / elapsed, target / elapsed


def parse_args():
    repo = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared_data", default=str(repo.parent / "shared" / "data"))
    parser.add_argument(
        "--data_dir", default=os.path.join(tempfile.gettempdir(), "t2t_lite_benchmark")
    )
    parser.add_argument("--hparams_set", default="transformer_base")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput timing each")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--max_lines", type=int, default=None, help="read only the first lines of each raw file"
    )
    parser.add_argument(
        "--vocab_size", type=int, default=None, help="default: each problem's own (8k, 37k)"
    )
    parser.add_argument(
        "--train_tokens_per_s",
        type=float,
        default=TRAIN_TOKENS_PER_S,
        help="target tokens/s that training consumes; default: transformer_base, float32, "
        "2-core CPU (986; mixed_bfloat16: 1,652)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    hp = hparams.get(args.hparams_set)
    data_dir = Path(args.data_dir)
    options = {} if args.vocab_size is None else {"vocab_size": args.vocab_size}
    print(
        f"hparams {args.hparams_set}: batch_size={hp.batch_size} tokens, max_length={hp.max_length}"
    )
    header = ("corpus", "vocab", "batching", "efficiency", "batches", "slots/batch", "sents/batch")
    row = "{:16} {:>6} {:40} {:>10} {:>8} {:>11} {:>11}"
    print(row.format(*header))
    speeds = []
    for label, problem, raw in corpora(Path(args.shared_data).resolve(), data_dir, args.max_lines):
        metadata = problem.generate_data(str(data_dir), str(raw), **options)
        vocab = metadata["settings"]["vocab_size"]
        bucketed = bucketed_row(problem, str(data_dir), hp, pad_to_bucket=False)
        lengths = shuffled_lengths(problem, str(data_dir), hp)
        longest = fair_size(lengths, bucketed[2])
        fixed = max(1, round(bucketed[2] / (2 * hp.max_length)))
        rows = [
            ("length buckets", bucketed),
            ("length buckets, pad_to_bucket", bucketed_row(problem, str(data_dir), hp, True)),
            (f"naive {longest} sentences, pad to longest", naive_row(lengths, longest, None)),
            (
                f"naive {fixed} sentences, pad to {hp.max_length}",
                naive_row(lengths, fixed, hp.max_length),
            ),
        ]
        for name, (ratio, count, slots, sentences) in rows:
            print(
                row.format(
                    label, vocab, name, f"{ratio:.3f}", count, f"{slots:.0f}", f"{sentences:.1f}"
                )
            )
        speeds.append((label, *throughput(problem, str(data_dir), hp, args.seconds, args.threads)))
    print(
        f"\nthroughput of the training pipeline, {args.threads} threads, {args.seconds:g} s each; "
        f"training consumes {args.train_tokens_per_s:,.0f} target tokens/s"
    )
    row = "{:16} {:>9} {:>13} {:>15} {:>16} {:>11}"
    print(
        row.format(
            "corpus", "batches/s", "all slots/s", "non-pad tok/s", "target tokens/s", "x training"
        )
    )
    for label, batches, slots, real, target in speeds:
        ratio = target / args.train_tokens_per_s
        print(
            row.format(
                label,
                f"{batches:.1f}",
                f"{slots:,.0f}",
                f"{real:,.0f}",
                f"{target:,.0f}",
                f"{ratio:.1f}",
            )
        )


if __name__ == "__main__":
    main()
