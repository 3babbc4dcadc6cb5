"""Algorithmic problems generated in code: no download, the same data on every machine.

As in tensor2tensor's algorithmic problems, inputs are random sequences over
`num_symbols` symbols written as space-separated integers ("3 1 4"), with symbol k
stored as id k + 2 (ids 0 and 1 are padding and EOS). Lengths are uniform in
[1, train_length]; the dev split is drawn from the same distribution with another
seed, so dev accuracy measures learning the rule, not memorising examples.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from t2t_lite.ids import EOS_ID
from t2t_lite.problems.problem import TRAIN, Problem, TextEncoder

_FIRST_SYMBOL_ID = 2
_SEEDS = {"train": 1, "dev": 2, "test": 3}


class SymbolEncoder(TextEncoder):
    """Space-separated integers 0..num_symbols-1 <-> ids 2..num_symbols+1."""

    def __init__(self, num_symbols: int):
        self.num_symbols = num_symbols

    @property
    def vocab_size(self) -> int:
        return self.num_symbols + _FIRST_SYMBOL_ID

    def encode(self, text: str) -> list:
        ids = []
        for position, token in enumerate(text.split()):
            if not token.isdigit() or int(token) >= self.num_symbols:
                raise ValueError(
                    f"token {position} {token!r} is not a symbol; expected integers "
                    f"0..{self.num_symbols - 1} separated by spaces"
                )
            ids.append(int(token) + _FIRST_SYMBOL_ID)
        return ids

    def decode(self, ids) -> str:
        symbols = []
        for token_id in ids:
            token_id = int(token_id)
            if token_id == EOS_ID:
                break
            if token_id >= _FIRST_SYMBOL_ID:
                symbols.append(str(token_id - _FIRST_SYMBOL_ID))
        return " ".join(symbols)


class AlgorithmicProblem(Problem):
    """A rule mapping a random symbol sequence to a target sequence."""

    num_symbols = 10
    train_length = 40
    num_examples = {"train": 100_000, "dev": 1_000, "test": 1_000}
    extra_decode_length = 10

    def target_order(self, lengths: np.ndarray) -> np.ndarray:
        """Where each target symbol comes from: indices into the rows' concatenated symbols.

        Args:
            lengths: int [N], the rows' lengths.

        Returns:
            int [sum(lengths)], row after row.
        """
        raise NotImplementedError

    def encoders(self, data_dir: str) -> dict:
        del data_dir
        encoder = SymbolEncoder(self.num_symbols)
        return {"inputs": encoder, "targets": encoder}

    def _rows(self, split: str) -> tuple:
        """(inputs, targets, row lengths with EOS): flat int64 ids of every row in order."""
        rng = np.random.default_rng(_SEEDS[split])
        lengths = rng.integers(1, self.train_length + 1, size=self.num_examples[split])
        symbols = rng.integers(0, self.num_symbols, size=int(lengths.sum()))
        # Row r's symbols move up by r in the flat output: one EOS follows each row.
        rows = np.repeat(np.arange(len(lengths)), lengths)
        slots = np.arange(len(symbols)) + rows
        eos = np.cumsum(lengths + 1) - 1
        flat = []
        for row_symbols in (symbols, symbols[self.target_order(lengths)]):
            ids = np.empty(len(symbols) + len(lengths), np.int64)
            ids[slots] = row_symbols + _FIRST_SYMBOL_ID
            ids[eos] = EOS_ID
            flat.append(ids)
        return flat[0], flat[1], lengths + 1

    def generate(self, split: str):
        """Yields (inputs, targets) id arrays, EOS-terminated, deterministically per split."""
        inputs, targets, lengths = self._rows(split)
        ends = np.cumsum(lengths)
        for start, end in zip(ends - lengths, ends):
            yield inputs[start:end], targets[start:end]

    def examples(self, split: str, data_dir: str) -> tf.data.Dataset:
        del data_dir
        if split not in _SEEDS:
            raise ValueError(f"problem {self.name} has splits {sorted(_SEEDS)}, not {split!r}")
        inputs, targets, lengths = self._rows(split)
        features = {
            "inputs": tf.RaggedTensor.from_row_lengths(inputs, lengths),
            "targets": tf.RaggedTensor.from_row_lengths(targets, lengths),
        }
        # Slices of a [N, None] ragged tensor carry a ragged spec of rank 0; reshaping
        # makes them the plain int64 vectors that padded batching expects.
        dataset = tf.data.Dataset.from_tensor_slices(features)
        return dataset.map(lambda example: {k: tf.reshape(v, [-1]) for k, v in example.items()})

    def fingerprint(self, data_dir: str) -> str:
        del data_dir
        return f"{self.name}:{self.num_symbols}:{self.train_length}:{self.num_examples[TRAIN]}"


class AlgorithmicCopy(AlgorithmicProblem):
    """Targets equal inputs (tensor2tensor's algorithmic_identity)."""

    name = "algorithmic_copy"

    def target_order(self, lengths):
        return np.arange(int(lengths.sum()))


class AlgorithmicReverse(AlgorithmicProblem):
    """Targets are the inputs reversed."""

    name = "algorithmic_reverse"

    def target_order(self, lengths):
        # Position p of a row of length n reads symbol n - 1 - p of that row.
        ends = np.cumsum(lengths)
        rows = np.repeat(np.arange(len(lengths)), lengths)
        return ends[rows] - 1 - (np.arange(int(ends[-1])) - (ends - lengths)[rows])
