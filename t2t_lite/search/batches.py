"""Sentences as search batches and back: sorting by length, padding, cutting at EOS."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from t2t_lite.ids import EOS_ID


def length_batches(
    lengths: Sequence[int], batch_size: int, extra_length: int | None = None
) -> list:
    """Indices of `lengths` sorted longest first, cut into batches of `batch_size`.

    Sorting keeps padding small (tensor2tensor decoded this way too); ties keep input
    order, so the batches are deterministic.

    With `extra_length` (the search's maximum output length = input + extra_length), a
    batch also ends before a sentence whose maximum output length is under half that of
    the batch's first: every row of a batch computes until its longest is done, at the
    longest's width, so one very long sentence would otherwise make its whole batch cost
    as much as it (a dev set's outlier made an untrained model's BLEU decoding 30 times
    slower). Alone, it costs only its own length.
    """
    order = sorted(range(len(lengths)), key=lambda index: (-lengths[index], index))
    batches = []
    for index in order:
        batch = batches[-1] if batches else None
        if (
            batch is None
            or len(batch) == batch_size
            or (extra_length is not None
                and 2 * (lengths[index] + extra_length) < lengths[batch[0]] + extra_length)
        ):  # fmt: skip
            batches.append([index])
        else:
            batch.append(index)
    return batches


def pad_batch(sequences: Sequence[Sequence[int]]) -> np.ndarray:
    """EOS-terminated, 0-padded int32 [B, S] ids of token lists (EOS not included in them)."""
    width = max(len(ids) for ids in sequences) + 1
    batch = np.zeros([len(sequences), width], np.int32)  # [B, S]
    for row, ids in enumerate(sequences):
        batch[row, : len(ids)] = ids
        batch[row, len(ids)] = EOS_ID
    return batch


def strip_ids(row) -> list:
    """Generated ids of one hypothesis: column 0 dropped, cut before the first EOS or pad."""
    out = []
    for token in np.asarray(row)[1:]:
        if token <= EOS_ID:
            break
        out.append(int(token))
    return out


def without_eos(ids) -> list:
    """Token ids of an EOS-terminated example, EOS removed."""
    ids = [int(token) for token in np.asarray(ids)]
    return ids[:-1] if ids and ids[-1] == EOS_ID else ids


def guidance_batch(phrases: Sequence, prefixes: Sequence) -> tuple:
    """Required phrases and prefixes of a batch's rows as 0-padded int32 arrays.

    Args:
        phrases: per row, a list of phrases, each a list of target ids (maybe empty).
        prefixes: per row, the target ids its output must start with (maybe empty).

    Returns:
        (phrases [B, P, W], phrase_lengths [B, P], prefix [B, T], prefix_lengths [B]),
        the arguments of `lexically_constrained_beam_search`.
    """
    num = max([len(row) for row in phrases] + [0])
    width = max([len(phrase) for row in phrases for phrase in row] + [0])
    phrase_ids = np.zeros([len(phrases), num, width], np.int32)
    phrase_lengths = np.zeros([len(phrases), num], np.int32)
    for b, row in enumerate(phrases):
        for p, phrase in enumerate(row):
            phrase_ids[b, p, : len(phrase)] = phrase
            phrase_lengths[b, p] = len(phrase)
    prefix = np.zeros([len(prefixes), max([len(row) for row in prefixes] + [0])], np.int32)
    for b, row in enumerate(prefixes):
        prefix[b, : len(row)] = row
    prefix_lengths = np.array([len(row) for row in prefixes], np.int32)
    return phrase_ids, phrase_lengths, prefix, prefix_lengths
