"""The files datagen writes for a text-to-text problem, and the checks that trust them.

`generate` trains the vocabulary and writes the TFRecord shards of every split under
temporary names, renaming each when complete, and records the sha256 of each file;
`damaged` tells whether the files still match the metadata that describes them (by
size, or with `content` by hash). `TranslateProblem` decides when to call them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections import Counter

import tensorflow as tf

from t2t_lite.problems.corpus import DataError, file_digest
from t2t_lite.problems.encoding import (
    Workers,
    chunks,
    default_workers,
    encode_chunk,
    hash_file,
    sample_chunk,
    shuffle_and_hash,
    shuffle_states,
)
from t2t_lite.problems.problem import TRAIN
from t2t_lite.problems.progress import Progress
from t2t_lite.problems.sampling import SEED as _SEED
from t2t_lite.problems.sampling import is_blank, read_sample, vocab_sample
from t2t_lite.problems.vocab import train_sentencepiece

METADATA_FILE = "metadata.json"
VOCAB_FILE = "vocab.model"
TEMP_MARK = ".tmp-"


def generate(
    folder: str,
    corpus,
    settings: dict,
    progress: Progress | None = None,
    workers: int | None = None,
) -> dict:
    """Vocabulary and shards of every split; returns the metadata (fingerprint excluded).

    Args:
        folder: where the vocabulary and shards go.
        corpus: the text pairs (see `corpus`).
        settings: the problem's datagen settings (what the fingerprint covers).
        progress: where the stages are reported; default: every 5 s.
        workers: processes that encode and shuffle; default: one per CPU.
    """
    progress = progress or Progress()
    metadata_path = os.path.join(folder, METADATA_FILE)
    if os.path.exists(metadata_path):
        os.remove(metadata_path)  # From here on, readers and reruns trust nothing.
    for name in os.listdir(folder):
        if name.endswith(".tfrecord") or TEMP_MARK in name:
            os.remove(os.path.join(folder, name))
    totals = _count(corpus, progress)
    vocab_path = os.path.join(folder, VOCAB_FILE)
    sample_path = os.path.join(folder, f"vocab-sample{TEMP_MARK}{os.getpid()}")
    try:
        sampled = vocab_sample(corpus, settings["vocab_sample_size"], sample_path, totals, progress)
        if not sampled:
            raise DataError(f"{corpus.describe(TRAIN)}: no text (empty corpus)")
        note = f"{sampled:,} sentences, vocab_size {settings['vocab_size']:,}"
        with progress.stage("SentencePiece training", note=note):
            train_sentencepiece(
                read_sample(sample_path),
                vocab_path,
                settings["vocab_size"],
                model_type=settings["model_type"],
                user_symbols=settings.get("user_symbols", ()),
            )
    finally:
        if os.path.exists(sample_path):
            os.remove(sample_path)
    sampling = (settings.get("bpe_dropout", 0.0), settings.get("train_copies", 1))
    with Workers(vocab_path, workers or default_workers()) as pool:
        splits = {
            split: _write_split(
                pool,
                corpus,
                folder,
                split,
                settings["num_shards"][split],
                totals,
                progress,
                sampling if split == TRAIN else (0.0, 1),
            )
            for split in corpus.splits
        }
    return {
        "problem": os.path.basename(folder),
        "settings": settings,
        "vocab": {"file": VOCAB_FILE, "sha256": file_digest(vocab_path)[1]},
        "splits": splits,
    }


def _count(corpus, progress: Progress) -> dict:
    """{split: pairs} from a quick pass over the corpus (None where it cannot count)."""
    count = getattr(corpus, "count", None)
    with progress.stage("reading", note="counting lines") as stage:
        totals = {split: count(split) if count else None for split in corpus.splits}
        stage.summary = ", ".join(
            f"{split} {'?' if n is None else f'{n:,}'} pairs" for split, n in totals.items()
        )
    return totals


def _write_split(
    pool: Workers,
    corpus,
    folder: str,
    split: str,
    num_shards: int,
    totals: dict,
    progress,
    sampling: tuple = (0.0, 1),
) -> dict:
    """Encodes the pairs of `split` into `num_shards` TFRecord files; returns its metadata.

    Example i goes to shard i mod `num_shards`. Files are written under temporary names
    and renamed only once all of them are complete (and, for train, shuffled).

    `sampling` is (BPE-dropout, copies): the pairs are written `copies` times, each time
    segmented anew with that dropout (0: the one deterministic segmentation).
    """
    dropout, copies = sampling
    names = [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    temporary = [os.path.join(folder, f"{name}{TEMP_MARK}{os.getpid()}") for name in names]
    stats = {"examples": 0, "skipped_empty": 0, "skipped_first": [], "read": 0}
    counts, tokens, lengths = [0] * num_shards, Counter(), Counter()
    try:
        total = totals.get(split)
        note = f"{copies} copies, BPE-dropout {dropout}" if dropout or copies > 1 else None
        with progress.stage(
            f"encoding {split}", total=total and total * copies, note=note
        ) as stage:
            writing = 0.0
            with contextlib.ExitStack() as stack:
                writers = [stack.enter_context(tf.io.TFRecordWriter(path)) for path in temporary]
                for chunk_records, chunk_lengths in _encoded(pool, corpus, split, stats, sampling):
                    start = time.perf_counter()
                    for record, (source, target) in zip(chunk_records, chunk_lengths):
                        shard = stats["examples"] % num_shards
                        writers[shard].write(record)
                        counts[shard] += 1
                        stats["examples"] += 1
                        tokens["source_tokens"] += source
                        tokens["target_tokens"] += target
                        lengths[max(source, target)] += 1
                    writing += time.perf_counter() - start
                    stage.update(stats["read"], f"{stats['examples']:,} encoded and written")
            stage.summary = (
                f"{stats['read']:,} pairs read, {stats['examples']:,} encoded and written to "
                f"{'' if copies == 1 else f'{copies} copies in '}"
                f"{num_shards} shards, {stats['skipped_empty']:,} skipped (empty side); "
                f"{writing:.1f} s writing"
            )
        if stats["examples"] == 0:
            raise DataError(f"{corpus.describe(split)}: no non-empty sentence pairs (empty corpus)")
        digests = _finish_shards(pool, split, temporary, counts, progress)
        for path, name in zip(temporary, names):
            os.replace(path, os.path.join(folder, name))
    finally:
        for path in temporary:
            if os.path.exists(path):
                os.remove(path)
    del stats["read"]
    if dropout or copies > 1:
        stats.update(copies=copies, bpe_dropout=dropout)
    if stats["skipped_empty"]:
        logging.warning(
            "split %s: skipped %d pairs with an empty side, first at %s",
            split,
            stats["skipped_empty"],
            "; ".join(stats["skipped_first"]),
        )
    shards = [
        {
            "file": name,
            "examples": count,
            "bytes": os.path.getsize(os.path.join(folder, name)),
            "sha256": sha,
        }
        for name, count, sha in zip(names, counts, digests)
    ]
    return {**stats, **tokens, "shards": shards, "length_counts": dict(sorted(lengths.items()))}


def _finish_shards(pool: Workers, split: str, paths: list, counts: list, progress) -> list:
    """Shuffles the train shards inside (dev and test keep the corpus order); their sha256."""
    if split != TRAIN:
        return list(pool.map(hash_file, paths))
    digests = []
    with progress.stage(f"shuffling {split}", unit="shards", total=len(paths)) as stage:
        states = shuffle_states(_SEED, counts)
        for digest in pool.map(shuffle_and_hash, zip(paths, states)):
            digests.append(digest)
            stage.update(len(digests))
        stage.summary = f"{len(paths)} shards, {sum(counts):,} examples"
    return digests


def _encoded(pool: Workers, corpus, split: str, stats: dict, sampling: tuple):
    """(records, lengths) of each chunk of the split's pairs, every copy in turn.

    Pairs with an empty side are counted (and named) in the first copy only.
    """
    dropout, copies = sampling
    for copy in range(copies):
        pairs = chunks(_skip_empty(corpus.pairs(split), stats, count=copy == 0))
        if dropout:
            tasks = ((chunk, dropout, _chunk_seed(copy, i)) for i, chunk in enumerate(pairs))
            yield from pool.map(sample_chunk, tasks)
        else:
            yield from pool.map(encode_chunk, pairs)


def _chunk_seed(copy: int, index: int) -> int:
    """The seed of the draws for chunk `index` of copy `copy`."""
    return int(digest(f"{_SEED}:{copy}:{index}".encode())[:8], 16)


def _skip_empty(pairs, stats: dict, count: bool = True):
    for pair in pairs:
        stats["read"] += 1
        if not (is_blank(pair[2]) or is_blank(pair[3])):
            yield pair
        elif count:
            stats["skipped_empty"] += 1
            if len(stats["skipped_first"]) < 10:
                stats["skipped_first"].append(f"{pair[0]}:{pair[1]}")


def damaged(
    folder: str, metadata: dict, content: bool = False, progress: Progress | None = None
) -> str:
    """What no longer matches `metadata` in `folder` ("" when all is intact).

    Sizes are always checked (cheap: what readers do); with `content`, every shard's
    sha256 too (a full read, in a "verifying" stage: what a datagen rerun does, so that
    bytes changed in place are found). Shards of metadata written before shards had
    hashes are checked by size only.
    """
    vocab_path = os.path.join(folder, metadata["vocab"]["file"])
    if not os.path.exists(vocab_path):
        return f"{vocab_path}: vocabulary not found"
    if file_digest(vocab_path)[1] != metadata["vocab"]["sha256"]:
        return (
            f"{vocab_path}: the vocabulary does not match the data: it is not the file "
            f"datagen encoded the shards with (sha256 {metadata['vocab']['sha256'][:12]}...)"
        )
    shards = [shard for split in metadata["splits"].values() for shard in split["shards"]]
    found = []
    for shard in shards:
        path = os.path.join(folder, shard["file"])
        if not os.path.exists(path) or os.path.getsize(path) != shard["bytes"]:
            found.append(f"{path}: shard missing or changed since datagen")
    if content and not found:
        with (progress or Progress()).stage("verifying", unit="shards", total=len(shards)) as stage:
            for done, shard in enumerate(shards, 1):
                path = os.path.join(folder, shard["file"])
                if "sha256" in shard and hash_file(path) != shard["sha256"]:
                    found.append(
                        f"{path}: shard damaged: same size but not the bytes datagen wrote "
                        f"(sha256 differs from {shard['sha256'][:12]}... in metadata.json)"
                    )
                stage.update(done)
            stage.summary = f"{len(shards)} shards, {len(found)} damaged"
    if len(found) > 3:
        found = found[:3] + [f"and {len(found) - 3} more shards"]
    return "; ".join(found)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_json(path: str):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str, value: dict) -> None:
    temporary = f"{path}{TEMP_MARK}{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, sort_keys=True)
    os.replace(temporary, path)
