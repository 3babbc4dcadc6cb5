"""The files datagen writes for a text-to-text problem, and the checks that trust them.

`generate` trains the vocabulary and writes the TFRecord shards of every split under
temporary names, renaming each when complete; `damaged` tells whether the files still
match the metadata that describes them. `TranslateProblem` decides when to call them.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import struct
from collections import Counter

import tensorflow as tf

from t2t_lite.ids import EOS_ID
from t2t_lite.problems.corpus import DataError, file_digest
from t2t_lite.problems.problem import TRAIN
from t2t_lite.problems.vocab import SentencePieceEncoder, reservoir_sample, train_sentencepiece

METADATA_FILE = "metadata.json"
VOCAB_FILE = "vocab.model"
TEMP_MARK = ".tmp-"
_CHUNK = 4096  # pairs encoded per SentencePiece call
_SEED = 1234  # datagen shuffling and vocabulary sample


def generate(folder: str, corpus, settings: dict) -> dict:
    """Vocabulary and shards of every split; returns the metadata (fingerprint excluded)."""
    metadata_path = os.path.join(folder, METADATA_FILE)
    if os.path.exists(metadata_path):
        os.remove(metadata_path)  # From here on, readers and reruns trust nothing.
    for name in os.listdir(folder):
        if name.endswith(".tfrecord") or TEMP_MARK in name:
            os.remove(os.path.join(folder, name))
    vocab_path = os.path.join(folder, VOCAB_FILE)
    sentences = (text for _, _, *texts in corpus.pairs(TRAIN) for text in texts if text.strip())
    sample = reservoir_sample(sentences, settings["vocab_sample_size"], seed=_SEED)
    if not sample:
        raise DataError(f"{corpus.describe(TRAIN)}: no text (empty corpus)")
    train_sentencepiece(
        sample,
        vocab_path,
        settings["vocab_size"],
        model_type=settings["model_type"],
        user_symbols=settings.get("user_symbols", ()),
    )
    encoder = SentencePieceEncoder(vocab_path)
    splits = {
        split: _write_split(encoder, corpus, folder, split, settings["num_shards"][split])
        for split in corpus.splits
    }
    return {
        "problem": os.path.basename(folder),
        "settings": settings,
        "vocab": {"file": VOCAB_FILE, "sha256": file_digest(vocab_path)[1]},
        "splits": splits,
    }


def _write_split(encoder, corpus, folder: str, split: str, num_shards: int) -> dict:
    """Encodes the pairs of `split` into `num_shards` TFRecord files; returns its metadata.

    Example i goes to shard i mod `num_shards`. Files are written under temporary names
    and renamed only once all of them are complete.
    """
    names = [f"{split}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    temporary = [os.path.join(folder, f"{name}{TEMP_MARK}{os.getpid()}") for name in names]
    stats = {"examples": 0, "skipped_empty": 0, "skipped_first": []}
    counts, tokens, lengths = [0] * num_shards, Counter(), Counter()
    try:
        with contextlib.ExitStack() as stack:
            writers = [stack.enter_context(tf.io.TFRecordWriter(path)) for path in temporary]
            for source, target in _encode(encoder, _skip_empty(corpus.pairs(split), stats)):
                shard = stats["examples"] % num_shards
                writers[shard].write(_serialize(source, target))
                counts[shard] += 1
                stats["examples"] += 1
                tokens["source_tokens"] += len(source)
                tokens["target_tokens"] += len(target)
                lengths[max(len(source), len(target))] += 1
        if stats["examples"] == 0:
            raise DataError(f"{corpus.describe(split)}: no non-empty sentence pairs (empty corpus)")
        if split == TRAIN:
            rng = random.Random(_SEED)
            for path in temporary:
                _shuffle_records(path, rng)
        for path, name in zip(temporary, names):
            os.replace(path, os.path.join(folder, name))
    finally:
        for path in temporary:
            if os.path.exists(path):
                os.remove(path)
    if stats["skipped_empty"]:
        logging.warning(
            "split %s: skipped %d pairs with an empty side, first at %s",
            split,
            stats["skipped_empty"],
            "; ".join(stats["skipped_first"]),
        )
    shards = [
        {"file": name, "examples": count, "bytes": os.path.getsize(os.path.join(folder, name))}
        for name, count in zip(names, counts)
    ]
    return {**stats, **tokens, "shards": shards, "length_counts": dict(sorted(lengths.items()))}


def _encode(encoder, pairs):
    """Yields (source ids, target ids) of `pairs`, each ending in EOS."""
    for chunk in _chunks(pairs, _CHUNK):
        sources = encoder.encode_batch([pair[2] for pair in chunk])
        targets = encoder.encode_batch([pair[3] for pair in chunk])
        for source, target in zip(sources, targets):
            yield source + [EOS_ID], target + [EOS_ID]


def _skip_empty(pairs, stats: dict):
    for pair in pairs:
        if pair[2].strip() and pair[3].strip():
            yield pair
        else:
            stats["skipped_empty"] += 1
            if len(stats["skipped_first"]) < 10:
                stats["skipped_first"].append(f"{pair[0]}:{pair[1]}")


def _chunks(items, size: int):
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _serialize(inputs: list, targets: list) -> bytes:
    feature = {
        "inputs": tf.train.Feature(int64_list=tf.train.Int64List(value=inputs)),
        "targets": tf.train.Feature(int64_list=tf.train.Int64List(value=targets)),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _shuffle_records(path: str, rng: random.Random) -> None:
    """Shuffles the records of a TFRecord file in place.

    A record is framed as uint64 length, uint32 CRC of the length, the bytes, uint32 CRC
    of the bytes; whole frames are moved, so their checksums stay valid.
    """
    with open(path, "rb") as f:
        data = f.read()
    frames, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        frames.append(data[offset : offset + 8 + 4 + length + 4])
        offset += 8 + 4 + length + 4
    rng.shuffle(frames)
    with open(path, "wb") as f:
        f.write(b"".join(frames))


def damaged(folder: str, metadata: dict) -> str:
    """What no longer matches `metadata` in `folder` ("" when all is intact)."""
    vocab_path = os.path.join(folder, metadata["vocab"]["file"])
    if not os.path.exists(vocab_path):
        return f"{vocab_path}: vocabulary not found"
    if file_digest(vocab_path)[1] != metadata["vocab"]["sha256"]:
        return (
            f"{vocab_path}: the vocabulary does not match the data: it is not the file "
            f"datagen encoded the shards with (sha256 {metadata['vocab']['sha256'][:12]}...)"
        )
    for split in metadata["splits"].values():
        for shard in split["shards"]:
            path = os.path.join(folder, shard["file"])
            if not os.path.exists(path) or os.path.getsize(path) != shard["bytes"]:
                return f"{path}: shard missing or changed since datagen"
    return ""


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
