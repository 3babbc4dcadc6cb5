"""The bounded sample of training sentences that the vocabulary is trained on.

`vocab_sample` picks exactly the sentences `vocab.reservoir_sample` would pick from
the non-empty training sentences (source and target of each pair, in corpus order,
seed 1234), so the vocabulary is the same as when the sample was held in memory; but it
keeps only their positions (at most `size` integers) while it reads, then reads the
corpus a second time to write the chosen text to a file. Memory stays bounded by the
sample size, whatever the corpus size, and the text lives in SentencePiece alone while
it trains.

The file holds each sentence as UTF-8 after a 4-byte little-endian length, so that any
text (a TFDS sentence may hold a newline) comes back exactly.
"""

from __future__ import annotations

import random
import struct

from t2t_lite.problems.problem import TRAIN

SEED = 1234  # the vocabulary sample (and datagen's shuffling)
_REPORT_EVERY = 8192  # sentences between two looks at the clock


def is_blank(text: str) -> bool:
    """True for a sentence with nothing to translate: empty, whitespace or NUL characters."""
    return not text.replace("\x00", "").strip()


def vocab_sample(corpus, size: int, path: str, totals: dict, progress) -> int:
    """Writes the sample of the training sentences to `path`; returns how many it holds."""
    pairs = totals.get(TRAIN)
    total = 4 * pairs if pairs is not None else None  # two sides, two passes
    with progress.stage("vocabulary sample", unit="sentences read", total=total) as stage:
        rng = random.Random(SEED)
        chosen = []
        seen = 0  # non-empty sentences
        for read, text in enumerate(_sentences(corpus), 1):
            if not is_blank(text):
                if seen < size:
                    chosen.append(seen)
                else:
                    slot = rng.randrange(seen + 1)
                    if slot < size:
                        chosen[slot] = seen
                seen += 1
            if not read % _REPORT_EVERY:
                stage.update(read)
        chosen.sort()
        written = 0
        with open(path, "wb") as f:
            position = 0
            for again, text in enumerate(_sentences(corpus), read + 1):
                if written < len(chosen) and not is_blank(text):
                    if position == chosen[written]:
                        data = text.encode("utf-8")
                        f.write(struct.pack("<I", len(data)))
                        f.write(data)
                        written += 1
                    position += 1
                if not again % _REPORT_EVERY:
                    stage.update(again)
        stage.summary = f"{written:,} of {seen:,} non-empty sentences sampled"
    return written


def _sentences(corpus):
    for _, _, source, target in corpus.pairs(TRAIN):
        yield source
        yield target


def read_sample(path: str):
    """Yields the sentences of a sample file."""
    with open(path, "rb") as f:
        while header := f.read(4):
            (length,) = struct.unpack("<I", header)
            yield f.read(length).decode("utf-8")
