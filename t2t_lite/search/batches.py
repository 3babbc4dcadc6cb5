"""Sentences as search batches and back: sorting by length, padding, cutting at EOS."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from t2t_lite.ids import EOS_ID


def length_batches(lengths: Sequence[int], batch_size: int) -> list:
    """Indices of `lengths` sorted longest first, cut into batches of `batch_size`.

    Sorting keeps padding small (tensor2tensor decoded this way too); ties keep input
    order, so the batches are deterministic.
    """
    order = sorted(range(len(lengths)), key=lambda index: (-lengths[index], index))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


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
