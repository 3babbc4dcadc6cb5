"""The `Problem` base class: what a named task supplies to training, decoding and export.

A problem knows its data (how to generate or read examples), its vocabulary (a
`TextEncoder`), its batching (tensor2tensor's length buckets, `pipeline.py`), its
decoding defaults (the paper's beam size, length penalty and extra length), and its
outputs: what the decoder writes for a decoded text (`outputs`), how outputs are scored
against references (`score`) and how the scores read (`format_scores`). The base class
scores by exact match; translation scores BLEU, parsing EVALB F1.
Examples are dicts of int64 id vectors `{"inputs": [S], "targets": [T]}` ending in EOS.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import tensorflow as tf

from t2t_lite.problems import pipeline

TRAIN, EVAL, TEST = "train", "dev", "test"


class TextEncoder:
    """Maps text to ids and back. Ids 0 (padding) and 1 (end of sequence) are reserved."""

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, text: str) -> list:
        """Ids of `text`, without the final EOS."""
        raise NotImplementedError

    def decode(self, ids) -> str:
        """Text of `ids`, stopping at the first EOS and skipping padding."""
        raise NotImplementedError


class Problem:
    """A named task. Subclasses set `name` and implement `examples` and `encoders`."""

    name: str = ""
    # Decoding defaults (paper, section 6.1): beam 4, alpha 0.6, max length input + 50.
    beam_size: int = 4
    alpha: float = 0.6
    extra_decode_length: int = 50
    # What the trainer reports during evaluation: "accuracy", "bleu" or "parse_f1".
    eval_metric: str = "accuracy"
    # How an output reads, for clients that draw it (the server's page): "text",
    # "linearized_tree" for bracketed trees such as `(S (NP John )NP )S`, or "in_order_tree"
    # for such trees in order (`John (NP )NP`), which the page shows as text.
    output_format: str = "text"

    def generate_data(self, data_dir: str, raw_dir: str | None = None, **options) -> dict:
        """Prepares vocabulary and examples under `data_dir/<name>`; returns counts.

        Problems generated in code need nothing; `options` (e.g. `vocab_size`) are
        for problems built from corpora and rejected here.
        """
        del data_dir, raw_dir
        if options:
            raise ValueError(f"problem {self.name} takes no datagen options; got {sorted(options)}")
        return {}

    def encoders(self, data_dir: str) -> dict:
        """Returns {"inputs": TextEncoder, "targets": TextEncoder} (the same object when shared)."""
        raise NotImplementedError

    def target_non_copy_ids(self, data_dir: str) -> list | None:
        """For targets that copy the input in order: the target ids that are not copies.

        What a model with `source_pointer` needs; None (the default) for problems whose
        targets do not copy their inputs.
        """
        del data_dir
        return None

    def search_constraint(self, data_dir: str):
        """What restricts the search's outputs, or None (the default: any token sequence).

        A problem whose outputs must have a form (a tree over the input's words) returns a
        callable `(inputs [B, S] int32, max_lengths [B] int32) -> StepConstraint`
        (`t2t_lite.decoding.constraints`), called inside the traced search.
        """
        del data_dir
        return None

    def outputs(
        self, hypotheses: Sequence[str], input_text: str, reference: str | None = None
    ) -> list:
        """What the decoder writes for one input line: one text per hypothesis, best first.

        Args:
            hypotheses: the detokenized hypotheses of the line ("" for an unfilled beam slot).
            input_text: the input line.
            reference: its reference, when the decodes are being scored.

        The default writes the hypotheses as decoded.
        """
        del input_text, reference
        return list(hypotheses)

    def check_references(self, references: Sequence[str], source: str) -> None:
        """Raises a ValueError naming `source` and the line of a reference `score` cannot read.

        The default reads any text.
        """
        del references, source

    def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
        """Scores `outputs` against aligned references: {"metric": name, ...values}.

        The default: the share of hypotheses equal to their reference.
        """
        if len(hypotheses) != len(references):
            raise ValueError(
                f"{len(hypotheses)} hypotheses but {len(references)} references; "
                "pass one hypothesis per reference, in order"
            )
        matches = sum(h == r for h, r in zip(hypotheses, references))
        return {
            "metric": "accuracy",
            "num_sentences": len(hypotheses),
            "exact_match": {
                "label": "sequence exact match (%)",
                "score": 100.0 * matches / max(len(hypotheses), 1),
                "matches": matches,
            },
        }

    def format_scores(self, report: dict) -> list:
        """One printable line per score of a `score` report, each with its label."""
        match = report["exact_match"]
        return [
            f"{match['label']}: {match['score']:.2f} ({match['matches']}/{report['num_sentences']})"
        ]

    def vocab_sizes(self, data_dir: str) -> tuple:
        """(input vocab size, target vocab size or None when the vocabulary is shared)."""
        encoders = self.encoders(data_dir)
        if encoders["inputs"] is encoders["targets"]:
            return encoders["inputs"].vocab_size, None
        return encoders["inputs"].vocab_size, encoders["targets"].vocab_size

    def vocab_file(self, data_dir: str) -> str | None:
        """The SentencePiece model file of the vocabulary, or None when there is none.

        With it, decoders and exporters build the in-graph tokenizer:
        `SentencePieceEncoder(path).tokenizer()` (problems/vocab.py).
        """
        del data_dir
        return None

    def examples(self, split: str, data_dir: str) -> tf.data.Dataset:
        """Unbatched examples of `split` in a fixed order."""
        raise NotImplementedError

    def sharded_examples(
        self,
        split: str,
        data_dir: str,
        input_context: tf.distribute.InputContext | None = None,
    ) -> tf.data.Dataset:
        """The part of `examples(split)` that the input pipeline of `input_context` reads.

        Pipeline k of n gets examples k, k + n, k + 2n, ...: the parts are disjoint and
        together complete. Subclasses may read whole files per pipeline instead.
        """
        dataset = self.examples(split, data_dir)
        if input_context is not None and input_context.num_input_pipelines > 1:
            dataset = dataset.shard(
                input_context.num_input_pipelines, input_context.input_pipeline_id
            )
        return dataset

    def length_counts(self, split: str, data_dir: str) -> dict | None:
        """{length: examples} of each example's longer feature (EOS included), if recorded."""
        del split, data_dir
        return None

    def dropped_examples(self, split: str, data_dir: str, max_length: int) -> int | None:
        """How many examples of `split` training drops for being longer than `max_length`.

        None when the problem records no lengths.
        """
        counts = self.length_counts(split, data_dir)
        if counts is None:
            return None
        return sum(count for length, count in counts.items() if length > max_length)

    def fingerprint(self, data_dir: str) -> str:
        """A short hash that changes when the problem's data changes."""
        return hashlib.sha256(self.name.encode()).hexdigest()[:16]

    def verify(self, data_dir: str) -> None:
        """Checks every byte of the problem's files against what datagen recorded.

        For the trainer's start: a full read, unlike the size checks of every access.
        Problems generated in code have no files. Raises DataError naming a damaged file.
        """
        del data_dir

    def dataset(
        self,
        split: str,
        data_dir: str,
        hp,
        *,
        training: bool | None = None,
        seed: int = 0,
        input_context: tf.distribute.InputContext | None = None,
        num_epochs: int | None = None,
        pad_to_bucket: bool = False,
    ) -> tf.data.Dataset:
        """Length-bucketed token batches `{"inputs": [B, S], "targets": [B, T]}` of `split`.

        Training (the default for the train split) drops examples longer than
        `hp.max_length`, shuffles with `seed` and repeats forever unless `num_epochs` is
        given; evaluation keeps every example, in order, once.

        Args:
            split: "train", "dev" or "test".
            data_dir: the data folder holding one sub-folder per problem.
            hp: the HParams; `batch_size` counts tokens per replica.
            training: overrides whether to filter, shuffle and repeat.
            seed: shuffling seed.
            input_context: from `strategy.distribute_datasets_from_function`; shards
                the examples so every replica pipeline reads a distinct part.
            num_epochs: passes over the data (None = forever when training, 1 otherwise).
            pad_to_bucket: pad inputs and targets alike to their bucket's boundary, so
                that training batches take one shape per bucket (S = T); see
                `pipeline.batch_by_length`.

        Returns:
            The batched dataset, prefetched.
        """
        training = split == TRAIN if training is None else training
        dataset = self.sharded_examples(split, data_dir, input_context)
        max_length = hp.max_length if training else max(hp.max_length, hp.max_position)
        boundaries = pipeline.bucket_boundaries(
            hp.min_length_bucket, max_length, hp.length_bucket_step
        )
        if training:
            self._report_dropped(split, data_dir, max_length)
            dataset = dataset.filter(lambda example: pipeline.example_length(example) <= max_length)
            dataset = dataset.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
            dataset = dataset.repeat(num_epochs)
        else:
            # Longer than the model's positions: skipped (and counted) rather than failing
            # the whole evaluation, as tensor2tensor's eval_drop_long_sequences does.
            self._report_skipped(split, data_dir, max_length)
            dataset = dataset.filter(lambda example: pipeline.example_length(example) <= max_length)
            dataset = dataset.repeat(num_epochs or 1)
        dataset = dataset.apply(
            pipeline.batch_by_length(boundaries, hp.batch_size, pad_to_bucket=pad_to_bucket)
        )
        return dataset.prefetch(tf.data.AUTOTUNE)

    def _report_dropped(self, split: str, data_dir: str, max_length: int) -> None:
        dropped = self.dropped_examples(split, data_dir, max_length)
        if dropped:
            total = sum(self.length_counts(split, data_dir).values())
            logging.warning(
                "problem %s, split %s: training drops %d of %d examples (%.2f%%) longer than "
                "max_length=%d tokens",
                self.name,
                split,
                dropped,
                total,
                100.0 * dropped / total,
                max_length,
            )

    def _report_skipped(self, split: str, data_dir: str, max_length: int) -> None:
        skipped, total = pipeline.count_longer(self, split, data_dir, max_length)
        if skipped:
            logging.warning(
                "problem %s, split %s: evaluation skips %d of %d examples longer than %d "
                "tokens, the most its batches hold (max of the max_length and max_position "
                "hparams); loss and accuracy are over the other %d",
                self.name,
                split,
                skipped,
                total,
                max_length,
                total - skipped,
            )


def log_counts(name: str, counts: dict) -> None:
    logging.info("%s: %s", name, ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items())))
