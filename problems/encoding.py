"""Encoding sentence pairs into TFRecord records on every CPU; shuffling and hashing shards.

Datagen's main process reads the corpus and writes the shards; worker processes turn
chunks of text pairs into serialized `tf.train.Example` bytes (SentencePiece ids, EOS
appended) and, once a split is written, shuffle and hash its shards. The workers are
forked once the vocabulary is loaded, so they start with it and import nothing anew.
They never run TensorFlow ops (protocol buffers only), and they freeze the objects they
inherit from the garbage collector at once: TensorFlow objects the parent left for
collection would otherwise be finalised in the fork, where TensorFlow's runtime is not
usable (a segmentation fault). A worker that dies (killed, out of memory) stops datagen
with an error that says so, rather than leaving it waiting for its result; a main
process that dies (kill -9 included) takes its workers with it.

Results come back in submission order and only a few chunks are in flight at once, so
the output does not depend on the number of workers and memory does not grow with
the corpus. `workers=1` does the same work in the calling process: the reference the
parallel path is tested against.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import gc
import hashlib
import math
import multiprocessing
import os
import random
import signal
import struct
from collections import deque

from tensorflow.core.example import example_pb2

from t2t_lite.ids import EOS_ID
from t2t_lite.problems.corpus import file_digest
from t2t_lite.problems.vocab import SPACE_MARK, SentencePieceEncoder

CHUNK = 2048  # pairs per task: large enough to amortise the hand-over, small enough to stream
SHUFFLE_BUDGET = 256 << 20  # bytes of one shard shuffled in memory; larger ones go via buckets
_FRAME = 8 + 4 + 4  # a TFRecord frame: length, its CRC, the data, the data's CRC

_encoder = None  # the worker's SentencePieceEncoder


def default_workers() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # Not on Linux.
        return os.cpu_count() or 1


def _load(model_path: str) -> None:
    global _encoder
    _encoder = WordCachedEncoder(SentencePieceEncoder(model_path))


class WordCachedEncoder:
    """`SentencePieceEncoder.encode_batch` with the ids of each word remembered.

    SentencePiece's BPE never merges pieces across a space (no piece of the model holds
    `▁` but at its start), so a sentence's ids are its words' ids one after another
    (`encode_words`). Most words of a corpus recur, and a dictionary look-up costs far
    less than encoding: datagen's encoding takes about a sixth of the time. Sentences
    with U+2581, and models with user symbols (which may span words), go the plain way.
    At most `max_words` words are kept, so memory stays bounded.
    """

    def __init__(self, encoder: SentencePieceEncoder, max_words: int = 500_000):
        self.encoder = encoder
        self.max_words = max_words
        self._words = {}
        self._plain = bool(encoder.user_symbols)

    def encode_batch(self, texts: list) -> list:
        if self._plain:
            return self.encoder.encode_batch(texts, num_threads=1)
        words = self._words
        split, new = [], set()
        for text in texts:
            parts = None if (not text or SPACE_MARK in text) else text.split(" ")
            split.append(parts)
            if parts:
                new.update(set(parts).difference(words))
        if new:
            new = sorted(new)  # A set's order varies from run to run; keep the cache's fixed.
            found = dict(zip(new, self.encoder.encode_words(new)))
            if self.max_words - len(words) >= len(found):
                words.update(found)
            else:  # Full: this batch's new words are used, not kept.
                words = {**words, **found}
        ids = []
        for text, parts in zip(texts, split):
            if parts is None:
                ids.append(self.encoder.encode_batch([text], num_threads=1)[0])
                continue
            row = []
            for word in parts:
                row += words[word]
            ids.append(row)
        return ids


def encode_chunk(chunk: tuple) -> tuple:
    """(records, lengths) of a chunk (source texts, target texts).

    records are serialized examples {"inputs", "targets"}, each ending in EOS; lengths
    are the (source, target) lengths, EOS included.
    """
    sources, targets = chunk
    return _records(_encoder.encode_batch(sources), _encoder.encode_batch(targets))


def sample_chunk(task: tuple) -> tuple:
    """`encode_chunk` by BPE-dropout: `task` is (chunk, dropout, seed).

    Both sides are sampled, each from its own seed derived from `seed`, so a chunk's
    records depend on the chunk and `seed` only, whichever worker encodes it.
    """
    (sources, targets), dropout, seed = task
    encoder = _encoder.encoder
    source_ids = encoder.sample_batch(sources, dropout, seed)
    target_ids = encoder.sample_batch(targets, dropout, seed ^ 0x5A5A5A5A)
    return _records(source_ids, target_ids)


def _records(source_ids: list, target_ids: list) -> tuple:
    records, lengths = [], []
    for source, target in zip(source_ids, target_ids):
        source.append(EOS_ID)
        target.append(EOS_ID)
        records.append(serialize(source, target))
        lengths.append((len(source), len(target)))
    return records, lengths


def serialize(inputs: list, targets: list) -> bytes:
    """A `tf.train.Example` {"inputs", "targets": int64 lists}, serialized."""
    # Filled in place rather than built from tf.train.Feature objects: half the time.
    example = example_pb2.Example()
    feature = example.features.feature
    feature["inputs"].int64_list.value.extend(inputs)
    feature["targets"].int64_list.value.extend(targets)
    # Map entries in key order; otherwise their order varies from process to process.
    return example.SerializeToString(deterministic=True)


def _start_worker(parent: int) -> None:
    # Objects inherited from the parent are never collected here (see the module's doc).
    gc.freeze()
    # Ctrl-C reaches the whole process group: the main process stops the pool, and the
    # workers print no tracebacks of their own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with(parent)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with(parent: int) -> None:
    """Has the kernel kill this worker when `parent` ends, however it ends (kill -9 too).

    A worker waits for tasks on a pipe that its dead parent no longer writes to but that
    its sibling workers keep open, so without this it would sleep for ever, holding the
    vocabulary and its word cache. Linux only (prctl); elsewhere nothing is done.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the line above took effect
        os._exit(1)


class WorkerDied(RuntimeError):
    """A worker process ended without returning its result."""


class Workers:
    """A pool of `count` forked processes with the vocabulary loaded (or none, for 1).

    Use as a context manager; `map` runs a function over items in order.
    """

    def __init__(self, model_path: str, count: int):
        self.count = count
        self._model_path = model_path
        self._pool = None

    def __enter__(self) -> Workers:
        _load(self._model_path)  # for the calling process (workers=1) and for the forks
        if self.count > 1:
            gc.collect()  # The parent's own garbage goes here, where TensorFlow still works.
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.count,
                multiprocessing.get_context("fork"),
                initializer=_start_worker,
                initargs=(os.getpid(),),
            )
        return self

    def __exit__(self, *exc) -> None:
        global _encoder
        _encoder = None
        if self._pool is None:
            return
        if exc[0] is not None:  # Interrupted or failed: running tasks are not waited for.
            for process in list(self._pool._processes.values()):
                process.terminate()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def map(self, function, items):
        """Yields `function(item)` for each of `items`, in order, a few items ahead."""
        if self._pool is None:
            yield from map(function, items)
            return
        pending = deque()
        try:
            for item in items:
                pending.append(self._pool.submit(function, item))
                if len(pending) >= 2 * self.count + 2:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except concurrent.futures.process.BrokenProcessPool:
            raise WorkerDied(
                f"a datagen worker process ended abruptly while running {function.__name__} "
                "(killed, out of memory, or crashed); nothing was published. Rerun datagen; "
                "if it recurs, pass --workers=1 to work in one process and see the failure."
            ) from None


def chunks(pairs, size: int = CHUNK):
    """(source texts, target texts) of up to `size` pairs (origin, number, source, target)."""
    sources, targets = [], []
    for pair in pairs:
        sources.append(pair[2])
        targets.append(pair[3])
        if len(sources) == size:
            yield sources, targets
            sources, targets = [], []
    if sources:
        yield sources, targets


def shuffle_states(seed: int, counts: list) -> list:
    """The random state each shard's shuffle starts from.

    One generator seeded with `seed` shuffles the shards one after another, as a single
    process would; the states are found by running it over placeholder lists of the
    shards' sizes, so the shards can then be shuffled in any order, in parallel.
    """
    rng = random.Random(seed)
    states = []
    for count in counts:
        states.append(rng.getstate())
        rng.shuffle([None] * count)
    return states


def shuffle_and_hash(task: tuple) -> str:
    """Shuffles the records of TFRecord file `path` from random `state`; returns its sha256.

    `task` is (path, state). Whole frames move, so their CRCs stay valid. A file larger
    than `SHUFFLE_BUDGET` is first dealt at random into buckets of about that size,
    which are then shuffled one at a time: memory stays bounded whatever the shard size.
    """
    path, state = task
    rng = random.Random()
    rng.setstate(state)
    output = f"{path}.shuffled"
    sha = hashlib.sha256()
    with open(output, "wb") as out:
        buckets = math.ceil(os.path.getsize(path) / SHUFFLE_BUDGET)
        if buckets <= 1:
            _shuffle_file(path, rng, out, sha)
        else:
            names = [f"{path}.bucket{b}" for b in range(buckets)]
            try:
                with contextlib.ExitStack() as stack:
                    files = [stack.enter_context(open(name, "wb")) for name in names]
                    for frame in _read_frames(path):
                        files[rng.randrange(buckets)].write(frame)
                for name in names:
                    _shuffle_file(name, rng, out, sha)
            finally:
                for name in names:
                    if os.path.exists(name):
                        os.remove(name)
    os.replace(output, path)
    return sha.hexdigest()


def _shuffle_file(path: str, rng: random.Random, out, sha) -> None:
    with open(path, "rb") as f:
        data = memoryview(f.read())
    spans, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack_from("<Q", data, offset)
        spans.append((offset, offset + _FRAME + length))
        offset += _FRAME + length
    rng.shuffle(spans)
    for start, end in spans:
        out.write(data[start:end])
        sha.update(data[start:end])


def _read_frames(path: str):
    with open(path, "rb") as f:
        while header := f.read(8):
            (length,) = struct.unpack("<Q", header)
            yield header + f.read(4 + length + 4)


def hash_file(path: str) -> str:
    """sha256 of a file, read in blocks."""
    return file_digest(path)[1]
