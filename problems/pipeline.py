"""Length-bucketed token batching, tensor2tensor's scheme, as `dataset.apply` transformations.

Sequences are grouped by length into buckets whose upper boundaries start at
`min_length` and grow by a factor `step` (at least +1) up to `max_length`:
8, 9, ..., 20, 22, 24, 26, 28, 30, 33, 36, 39, 42, 46, ... Every batch holds sequences of one
bucket only, and holds `batch_size // boundary` of them, so that "longest sequence
times sequences in the batch" never exceeds `batch_size` tokens. Each feature is
padded up to a bucket boundary, not just to the batch's longest sequence, so the
set of batch shapes is finite and a compiled step (XLA) traces each shape once.
"""

from __future__ import annotations

import bisect

import tensorflow as tf

from t2t_lite.problems.corpus import DataError


def bucket_boundaries(min_length: int = 8, max_length: int = 256, step: float = 1.1) -> list:
    """Returns the increasing bucket upper boundaries, the last one equal to `max_length`."""
    if min_length < 1 or max_length < min_length or step <= 1.0:
        raise ValueError(
            f"bucket boundaries need 1 <= min_length <= max_length and step > 1; got "
            f"min_length={min_length}, max_length={max_length}, step={step}"
        )
    boundaries = []
    length = min_length
    while length < max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * step))
    boundaries.append(max_length)
    return boundaries


def bucket_batch_sizes(boundaries: list, batch_size: int) -> list:
    """Sequences per batch in each bucket: `batch_size // boundary`, at least 1."""
    return [max(1, batch_size // boundary) for boundary in boundaries]


def example_length(example: dict) -> tf.Tensor:
    """The bucketing length of an example: the longer of its features."""
    lengths = [tf.shape(value)[0] for value in example.values()]
    return tf.reduce_max(tf.stack(lengths))


def round_up_to_boundary(length: tf.Tensor, boundaries: list) -> tf.Tensor:
    """The smallest boundary >= `length` (or `length` itself beyond the last one)."""
    table = tf.constant(boundaries, tf.int32)
    index = tf.searchsorted(table, tf.reshape(tf.cast(length, tf.int32), [1]), side="left")[0]
    inside = tf.gather(table, tf.minimum(index, len(boundaries) - 1))
    return tf.where(index < len(boundaries), inside, tf.cast(length, tf.int32))


def batch_by_length(
    boundaries: list, batch_size: int, drop_remainder: bool = False, pad_to_bucket: bool = False
):
    """Returns a `dataset.apply` transformation that batches examples by length bucket.

    Args:
        boundaries: increasing bucket upper boundaries (see `bucket_boundaries`); every
            example must be at most `boundaries[-1]` long (filter first).
        batch_size: the token budget of one batch, counted as longest sequence x sequences.
        drop_remainder: drop each bucket's last, partial batch.
        pad_to_bucket: pad every feature to the batch's bucket boundary, so that a bucket
            has one [B, L] shape for all features (what XLA compiles once per shape);
            by default each feature is padded to its own smallest boundary, which wastes
            less when inputs and targets differ in length.

    Returns:
        A function `Dataset -> Dataset` producing dicts of int64 [B, L] batches whose
        every feature is padded with 0 to a bucket boundary.
    """
    sizes = bucket_batch_sizes(boundaries, batch_size)
    boundary_table = tf.constant(boundaries, tf.int64)
    size_table = tf.constant(sizes, tf.int64)

    def key_fn(example):
        length = tf.cast(example_length(example), tf.int64)
        index = tf.searchsorted(boundary_table, tf.reshape(length, [1]), side="left")[0]
        return tf.cast(index, tf.int64)

    def reduce_fn(unused_key, window):
        return window.padded_batch(
            tf.gather(size_table, unused_key), padded_shapes=None, drop_remainder=drop_remainder
        )

    def window_size_fn(key):
        return tf.gather(size_table, key)

    def pad_features(batch):
        if pad_to_bucket:
            longest = tf.reduce_max(tf.stack([tf.shape(value)[1] for value in batch.values()]))
            bucket = round_up_to_boundary(longest, boundaries)
            return {name: _pad_time(value, bucket) for name, value in batch.items()}
        return {
            name: _pad_time(value, round_up_to_boundary(tf.shape(value)[1], boundaries))
            for name, value in batch.items()
        }

    def transform(dataset: tf.data.Dataset) -> tf.data.Dataset:
        dataset = dataset.group_by_window(
            key_func=key_fn, reduce_func=reduce_fn, window_size_func=window_size_fn
        )
        return dataset.map(pad_features, num_parallel_calls=tf.data.AUTOTUNE)

    return transform


def _pad_time(value: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
    """Pads [B, L] `value` with zeros on the right to [B, length]."""
    padding = length - tf.shape(value)[1]
    return tf.pad(value, [[0, 0], [0, padding]])


def boundary_of(length: int, boundaries: list) -> int:
    """Python twin of `round_up_to_boundary`, for tools and tests."""
    index = bisect.bisect_left(boundaries, length)
    return boundaries[index] if index < len(boundaries) else length


def unreadable_shard(files: list) -> tuple | None:
    """(path, reason) of the first TFRecord file of `files` that cannot be read to its end.

    Every record's checksums are verified on the way, so a shard damaged in place (same
    size, other bytes) is found; None when all of them read.
    """
    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
        except (tf.errors.DataLossError, tf.errors.NotFoundError) as error:
            return path, str(error).strip().splitlines()[0][:200]
    return None


def read_error(problem, split: str, data_dir: str, error: Exception) -> Exception:
    """The problem's DataError for `error`, raised while reading `split`: names the shard.

    The error TensorFlow raises (e.g. "corrupted record at 29904") names no file, so the
    split's shards are read one by one to find the damaged one.
    """
    datagen = f"rerun `python -m t2t_lite.datagen --problem={problem.name} --data_dir={data_dir}`"
    reason = str(error).strip().splitlines()[0][:200]
    shard_files = getattr(problem, "shard_files", None)
    found = unreadable_shard(shard_files(split, data_dir)) if shard_files else None
    if found:
        return DataError(
            f"{found[0]}: cannot be read ({found[1]}); the shard is damaged: {datagen}"
        )
    return DataError(
        f"problem {problem.name}, split {split}: its data cannot be read ({reason}); {datagen}"
    )


def count_longer(problem, split: str, data_dir: str, max_length: int) -> tuple:
    """(examples of `split` longer than `max_length`, all examples) of `problem`.

    From the lengths datagen recorded when there are some, else by reading the split once
    (evaluation splits are small).
    """
    counts = problem.length_counts(split, data_dir)
    if counts is not None:
        longer = sum(count for length, count in counts.items() if length > max_length)
        return longer, sum(counts.values())
    totals = problem.examples(split, data_dir).reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda n, example: (
            n[0] + tf.cast(example_length(example) > max_length, tf.int64),
            n[1] + 1,
        ),
    )
    return int(totals[0]), int(totals[1])
