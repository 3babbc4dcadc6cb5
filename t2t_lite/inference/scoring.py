"""Forced decoding: how probable a trained model finds given targets for given sources.

`Scorer.score(sources, targets)` runs each (source, target) pair through the model with
teacher forcing (`model(features, training=False)`: no dropout) and reads, at every target
position, the log-probability of the target's own token. The target is EOS-terminated, so
its last position scores EOS:

    log P(y | x) = sum_t log P(y_t | y_<t, x),    t = 1 .. n, y_n = EOS,
    score        = log P(y | x) / ((5 + n) / 6) ** alpha,

the length-normalised score that beam search gives a hypothesis ending in EOS
(`t2t_lite.decoding.beam_search`: n counts the tokens generated, EOS included), so the
score of the search's best hypothesis is its beam score.

Pairs are batched like the decoder's sentences (`length_batches`, longest first) and put
back in input order. A pair's numbers do not depend on its batch: source padding is masked
out of attention, the decoder's self-attention is causal (padding after a target cannot
reach it), and padded positions are left out of the sums.

Sources are encoded as the decoder encodes them (`Decoder.encode`: the same warnings, and
a source longer than the model's maximum cut to it), so a pair is scored against what the
decoder would translate. A pair whose source is blank is not scored, as the decoder does
not decode a blank line: its record has nulls. A blank target with a source is scored as
the empty sentence (EOS alone). A target the vocabulary refuses, or longer than the
model's positions, stops the run naming the file and line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from t2t_lite.ids import PAD_ID
from t2t_lite.inference.decode import Decoder
from t2t_lite.inference.outputs import json_line
from t2t_lite.inference.text_files import DecodeError, read_lines, write_lines
from t2t_lite.runs.progress import ItemProgress
from t2t_lite.search import length_batches, pad_batch


@dataclasses.dataclass
class PairScore:
    """The model's view of one target given its source.

    Attributes:
        ids: the target's ids, EOS last.
        token_log_probs: log P of each of `ids` given the source and the ids before it.
        log_prob: their sum, log P(target + EOS | source).
        score: `log_prob` / ((5 + n) / 6) ** alpha, n = len(ids).
    """

    ids: list
    token_log_probs: list
    log_prob: float
    score: float

    @property
    def num_tokens(self) -> int:
        return len(self.ids)


@dataclasses.dataclass
class EncodedPairs:
    """Pairs as ids, ready to score (`Scorer.encode`).

    Attributes:
        sources: per pair, the source's ids (EOS not included), or None when it is blank.
        targets: per pair, the target's ids (EOS not included; [] for a blank target).
        warnings: one message per source that was cut or looks like an unexpected script.
    """

    sources: list
    targets: list
    warnings: list


@dataclasses.dataclass
class ScoreResult:
    """The scores of a list of pairs, in input order.

    Attributes:
        pairs: per pair, its PairScore, or None when its source is blank.
        warnings: one message per source that was cut or looks like an unexpected script.
        seconds: wall time spent scoring.
    """

    pairs: list
    warnings: list
    seconds: float

    @property
    def scored(self) -> list:
        return [pair for pair in self.pairs if pair is not None]

    @property
    def num_tokens(self) -> int:
        """Target tokens scored, EOS included."""
        return sum(pair.num_tokens for pair in self.scored)

    @property
    def mean_token_log_prob(self) -> float:
        """log P per target token over every pair scored (NaN when none was)."""
        tokens = self.num_tokens
        return sum(pair.log_prob for pair in self.scored) / tokens if tokens else float("nan")


def length_penalty(num_tokens: int, alpha: float) -> float:
    """GNMT's length penalty ((5 + n) / 6) ** alpha, as beam search divides by it."""
    return ((5.0 + num_tokens) / 6.0) ** alpha


class Scorer:
    """Scores targets given sources with the model of `decoder`.

    Args:
        decoder: the Decoder of the run (TensorFlow engine): its model, source encoding,
            target vocabulary, `config.alpha`, `batch_size`, printer and report interval.
    """

    def __init__(self, decoder: Decoder):
        if getattr(decoder.trained, "model", None) is None:
            raise DecodeError("scoring needs the TensorFlow model; pass --engine=tensorflow")
        self.decoder = decoder
        self.alpha = decoder.config.alpha
        self.max_target_tokens = decoder.trained.hp.max_position
        model = decoder.trained.model
        spec = tf.TensorSpec([None, None], tf.int32)
        self._log_probs = tf.function(
            lambda inputs, targets: target_log_probs(model, inputs, targets),
            autograph=False,
            input_signature=[spec, spec],
        )

    def encode_targets(self, lines: Sequence[str], source: str, first_line: int = 1) -> list:
        """Target ids of every line, EOS not included.

        Raises:
            DecodeError: a line the vocabulary refuses, or one whose tokens and EOS need
                more positions than the model has, naming `source` and the line.
        """
        encoded = []
        for number, line in enumerate(lines, start=first_line):
            try:
                ids = list(self.decoder.target_encoder.encode(line)) if line.strip() else []
            except ValueError as error:
                raise DecodeError(f"{source} line {number}: {error}") from None
            if len(ids) + 1 > self.max_target_tokens:
                raise DecodeError(
                    f"{source} line {number}: {len(ids) + 1:,} tokens with EOS, more than the "
                    f"model's max_position {self.max_target_tokens:,}; shorten or split the pair"
                )
            encoded.append(ids)
        return encoded

    def encode(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        source_name: str = "input",
        target_name: str = "target",
        first_line: int = 1,
    ) -> EncodedPairs:
        """Ids of every pair, checked before any is scored; prints the sources' warnings.

        Raises:
            DecodeError: lists of different lengths, or a line that cannot be scored,
                naming `source_name` or `target_name` and the line (from `first_line`).
        """
        check_aligned(sources, targets, source_name, target_name)
        source_ids, warnings = self.decoder.encode(sources, source_name, first_line)
        target_ids = self.encode_targets(targets, target_name, first_line)
        for warning in warnings:
            self.decoder.printer(f"warning: {warning}")
        return EncodedPairs(source_ids, target_ids, warnings)

    def score(
        self,
        sources: Sequence[str],
        targets: Sequence[str],
        source_name: str = "input",
        target_name: str = "target",
        show_progress: bool = False,
        first_line: int = 1,
    ) -> ScoreResult:
        """Scores each (source, target) pair; see the module docstring.

        Messages name `source_name` and `target_name` and the line, counting from
        `first_line`.
        """
        encoded = self.encode(sources, targets, source_name, target_name, first_line)
        return self.score_encoded(encoded, show_progress)

    def score_encoded(self, encoded: EncodedPairs, show_progress: bool = False) -> ScoreResult:
        """Scores pairs that `encode` returned, batched by length, in input order."""
        decoder = self.decoder
        sources, targets = encoded.sources, encoded.targets
        present = [index for index, ids in enumerate(sources) if ids is not None]
        progress = ItemProgress(
            len(present), decoder.printer, decoder.report_every, "scored", "pairs"
        )
        pairs = [None] * len(sources)
        start = time.monotonic()
        lengths = [max(len(sources[index]), len(targets[index])) for index in present]
        for batch in length_batches(lengths, decoder.batch_size):
            rows = [present[position] for position in batch]
            inputs = pad_batch([sources[index] for index in rows])  # [B, S]
            targets_batch = pad_batch([targets[index] for index in rows])  # [B, T]
            log_probs = self._log_probs(inputs, targets_batch).numpy()  # [B, T]
            batch_tokens = 0
            for row, index in enumerate(rows):
                n = len(targets[index]) + 1  # EOS included
                pairs[index] = self._pair(targets_batch[row, :n], log_probs[row, :n])
                batch_tokens += n
            if show_progress:
                progress.add(len(rows), batch_tokens)
        return ScoreResult(pairs, encoded.warnings, time.monotonic() - start)

    def _pair(self, ids: np.ndarray, log_probs: np.ndarray) -> PairScore:
        token_log_probs = [float(value) for value in log_probs]
        total = float(np.sum(log_probs, dtype=np.float64))
        return PairScore(
            ids=[int(token) for token in ids],
            token_log_probs=token_log_probs,
            log_prob=total,
            score=total / length_penalty(len(token_log_probs), self.alpha),
        )

    def records(self, result: ScoreResult, sources: Sequence[str], targets: Sequence[str]) -> list:
        """One JSON-ready dict per pair (docs/decoding.md lists the fields)."""
        names = _token_names(self.decoder.target_encoder)
        records = []
        for index, (pair, source, target) in enumerate(zip(result.pairs, sources, targets)):
            record = {"line": index + 1, "source": source, "target": target}
            if pair is None:
                record.update(
                    tokens=[], token_log_probs=[], log_prob=None, score=None, num_tokens=0
                )
            else:
                record.update(
                    tokens=[names[token] if names else token for token in pair.ids],
                    token_log_probs=pair.token_log_probs,
                    log_prob=pair.log_prob,
                    score=pair.score,
                    num_tokens=pair.num_tokens,
                )
            records.append(record)
        return records


def check_aligned(sources: Sequence, targets: Sequence, source_name: str, target_name: str):
    """Raises a DecodeError naming both files and their line counts unless they are equal."""
    if len(sources) != len(targets):
        raise DecodeError(
            f"{target_name} has {len(targets):,} lines but {source_name} has "
            f"{len(sources):,}; pass one target per source line, in order"
        )


def target_log_probs(model, inputs, targets):
    """Teacher-forced log P of each target token: ids [B, S], [B, T] -> float32 [B, T].

    `inputs` and `targets` are EOS-terminated and 0-padded; padded positions get 0.
    """
    logits = model({"inputs": inputs, "targets": targets}, training=False)  # [B, T, V]
    logits = tf.cast(logits, tf.float32)
    # log_softmax read at one id: logit - logsumexp, without a second [B, T, V] tensor.
    picked = tf.gather(logits, targets, batch_dims=2) - tf.reduce_logsumexp(logits, axis=-1)
    return tf.where(targets != PAD_ID, picked, 0.0)  # [B, T]


def _token_names(encoder) -> list | None:
    """Each id's piece for SentencePiece vocabularies; None (write ids) for others."""
    pieces = getattr(encoder, "pieces", None)
    if pieces is None:
        return None
    return list(pieces())


def score_file(decoder: Decoder, input_path: str, target_path: str, output_path: str) -> dict:
    """Scores the pairs of two aligned files into JSON lines at `output_path`.

    Prints a progress line every `decoder.report_every` seconds and a summary: pairs
    scored, mean log-probability per target token and the rate.

    Returns:
        {"pairs", "scored", "target_tokens", "mean_token_log_prob", "pairs_per_sec",
         "tokens_per_sec", "warnings", "output"}.

    Raises:
        DecodeError: an unreadable file, files of different lengths (naming both and
            their counts), or a target line that cannot be scored.
    """
    sources = read_lines(input_path)
    targets = read_lines(target_path)
    scorer = Scorer(decoder)
    # Every line is checked before the output is created: bad input leaves no file behind.
    encoded = scorer.encode(sources, targets, input_path, target_path)
    write_lines(output_path, [])  # Fails now, not after scoring, if it cannot be written.
    result = scorer.score_encoded(encoded, show_progress=True)
    records = scorer.records(result, sources, targets)
    write_lines(output_path, [json_line(record) for record in records])
    seconds = max(result.seconds, 1e-9)
    scored, tokens = len(result.scored), result.num_tokens
    summary = {
        "pairs": len(sources),
        "scored": scored,
        "target_tokens": tokens,
        "mean_token_log_prob": result.mean_token_log_prob,
        "pairs_per_sec": scored / seconds,
        "tokens_per_sec": tokens / seconds,
        "warnings": result.warnings,
        "output": output_path,
    }
    blank = len(sources) - scored
    skipped = f" ({blank:,} with a blank source, not scored)" if blank else ""
    decoder.printer(
        f"scored {scored:,} pairs{skipped} | mean log-prob per token "
        f"{result.mean_token_log_prob:.4f} over {tokens:,} tokens (EOS included) | "
        f"{summary['pairs_per_sec']:.2f} pairs/s | {summary['tokens_per_sec']:,.1f} tokens/s"
    )
    decoder.printer(f"wrote {len(records):,} lines to {output_path}")
    return summary
