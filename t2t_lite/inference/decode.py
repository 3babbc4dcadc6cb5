"""Decoding text with a trained model: what `python -m t2t_lite.decoder` runs.

`Decoder.translate(lines)` encodes the lines with the problem's vocabulary, sorts them by
length (longest first, as tensor2tensor did) and cuts them into batches of `batch_size`
sentences, so a batch pads little; runs each batch through the `Translator` (one
tf.function: encode, cache, search), in which each sentence decodes at most its own
length + extra_length tokens, as it would alone; detokenizes the hypotheses and puts them
back in input order. An empty (or whitespace-only) line decodes to an empty line without reaching
the model, so the output stays aligned with the input line for line.

Output format: one line per input line, the best hypothesis; with `return_beams`, the
beam's K hypotheses best first, separated by tabs (always K fields: a beam slot that no
hypothesis filled is empty). A parsing problem (eval_metric "parse_f1") writes trees, not
the decoded linearized trees: `problem.postprocess` turns each into a bracketed tree over
the input's words, with the placeholder POS tag `XX` on the leaves, or, when a reference
file is scored, its gold tags (the trees that are scored, so that
`python -m t2t_lite.evalb -p COLLINS.prm REFERENCE OUTPUT` recomputes the printed scores).

Inputs that cannot be decoded as given are reported, never skipped silently: a line the
vocabulary refuses stops the run naming the file and line; a line longer than the model's
maximum is cut to it with a warning; a line written mostly in byte-fallback pieces (a
script the vocabulary was not trained on) gets a warning.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

from t2t_lite.inference.restore import TrainedModel
from t2t_lite.inference.translator import SearchConfig, Translator, strip_ids
from t2t_lite.metrics import bleu_report, write_bleu_json
from t2t_lite.training.progress import format_duration

EOS_ID = 1
# A line whose tokens are at least this share of byte-fallback pieces gets a warning.
BYTE_FALLBACK_SHARE = 0.5


class DecodeError(ValueError):
    """Input that cannot be decoded; the message names the file, the line and what to do."""


@dataclasses.dataclass
class DecodeResult:
    """The decodes of a list of lines, in input order.

    Attributes:
        beams: per line, the K detokenized hypotheses, best first ([""] * K for empty lines).
        scores: per line, the K search scores (beam: log P / length penalty; greedy and
            sampling: log P); empty for empty lines.
        warnings: one message per line that was cut or looks like an unexpected script.
        target_tokens: generated tokens of the best hypotheses (EOS not counted).
        seconds: wall time spent decoding.
    """

    beams: list
    scores: list
    warnings: list
    target_tokens: int
    seconds: float

    @property
    def best(self) -> list:
        """The best hypothesis of every line."""
        return [beams[0] for beams in self.beams]

    def lines(self, return_beams: bool = False) -> list:
        """Output lines: the best hypotheses, or all K tab-separated with `return_beams`.

        Line breaks (and, between beams, tabs) inside a hypothesis become spaces, so one
        input line always gives exactly one output line.
        """
        if return_beams:
            return [
                "\t".join(one_line(beam).replace("\t", " ") for beam in beams)
                for beams in self.beams
            ]
        return [one_line(best) for best in self.best]


def read_lines(path: str) -> list:
    """The lines of a UTF-8 text file, split on "\\n" only (a final "\\r" is dropped).

    Splitting on "\\n" alone keeps line numbers equal to `wc -l` and sacreBLEU's view of
    the file, even when a line holds other Unicode line separators.

    Raises:
        DecodeError: for a missing file or invalid UTF-8, naming the line.
    """
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            data = handle.read()
    except tf.errors.NotFoundError:
        raise DecodeError(f"{path}: file not found") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise DecodeError(
            f"{path} line {line}: not valid UTF-8 (byte {error.start}); convert the file to UTF-8"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# Characters that end a line for some reader (Python's str.splitlines, editors, sacreBLEU's
# file reading): a model can emit them through byte-fallback pieces.
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """`text` with every line-break character replaced by a space."""
    return text.translate(_LINE_BREAKS)


def write_lines(path: str, lines: Iterable[str]) -> None:
    """Writes one line per item (UTF-8, "\\n"), creating the parent folder.

    Line-break characters inside an item become spaces, so line i of the file is
    always item i.
    """
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for line in lines:
            handle.write(one_line(line) + "\n")


def length_batches(lengths: Sequence[int], batch_size: int) -> list:
    """Indices of `lengths` sorted longest first, cut into batches of `batch_size`.

    Ties keep input order, so the batches are deterministic.
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


class _Progress:
    """Prints decoded sentences, sentences/s, target tokens/s and the ETA every `every` s."""

    def __init__(self, total: int, printer: Callable, every: float):
        self.total, self.printer, self.every = total, printer, every
        self.start = self.last = time.monotonic()
        self.done = self.tokens = 0

    def add(self, sentences: int, tokens: int) -> None:
        self.done += sentences
        self.tokens += tokens
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            self.printer(self.line(now - self.start))

    def line(self, elapsed: float) -> str:
        elapsed = max(elapsed, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        return (
            f"decoded {self.done:,}/{self.total:,} sentences | {rate:.2f} sentences/s | "
            f"{self.tokens / elapsed:,.1f} tokens/s | ETA {format_duration(left)}"
        )


class Decoder:
    """Translates lines of text with a trained model.

    Args:
        trained: the restored model (`load_trained_model`).
        data_dir: the data folder holding the problem's vocabulary.
        config: how to search; see `search_config` for the problem's defaults.
        batch_size: sentences per batch.
        printer: where progress lines and warnings go.
        report_every: seconds between progress lines.
    """

    def __init__(
        self,
        trained: TrainedModel,
        data_dir: str,
        config: SearchConfig,
        batch_size: int = 32,
        printer: Callable = print,
        report_every: float = 10.0,
    ):
        if batch_size < 1:
            raise DecodeError(f"batch_size must be >= 1 sentence, got {batch_size}")
        self.trained = trained
        self.problem = trained.problem
        encoders = self.problem.encoders(data_dir)
        self.source_encoder, self.target_encoder = encoders["inputs"], encoders["targets"]
        self.config = config
        self.batch_size = batch_size
        self.printer = printer
        self.report_every = report_every
        self.translator = Translator(
            trained.model, config, constraint=self.problem.search_constraint(data_dir)
        )
        # Decoder positions run to S + extra_length - 1 with S = tokens + EOS.
        self.max_input_tokens = trained.hp.max_position - config.extra_length - 1
        if self.max_input_tokens < 1:
            raise DecodeError(
                f"extra_length {config.extra_length} leaves no room for input under the "
                f"model's max_position {trained.hp.max_position}; lower --extra_length"
            )
        self._byte_ids = _byte_fallback_ids(self.source_encoder)

    def encode(self, lines: Sequence[str], source: str = "input", first_line: int = 1) -> tuple:
        """Token ids of every line (None for empty lines) and the warnings raised.

        Messages name `source` and the line number, counting from `first_line`.

        Raises:
            DecodeError: a line that the vocabulary refuses, naming `source` and the line.
        """
        encoded, warnings = [], []
        for number, line in enumerate(lines, start=first_line):
            if not line.strip():
                encoded.append(None)
                continue
            try:
                ids = list(self.source_encoder.encode(line))
            except ValueError as error:
                raise DecodeError(f"{source} line {number}: {error}") from None
            warning = self._check_line(ids, source, number)
            if warning:
                warnings.append(warning)
            encoded.append(ids[: self.max_input_tokens] or None)
        return encoded, warnings

    def _check_line(self, ids: list, source: str, number: int) -> str | None:
        if len(ids) > self.max_input_tokens:
            return (
                f"{source} line {number}: {len(ids):,} tokens, more than the model's maximum "
                f"{self.max_input_tokens:,} (max_position {self.trained.hp.max_position} - "
                f"extra_length {self.config.extra_length} - 1 for EOS); decoding its first "
                f"{self.max_input_tokens:,} tokens only"
            )
        fallback = sum(token in self._byte_ids for token in ids)
        if ids and fallback >= BYTE_FALLBACK_SHARE * len(ids):
            return (
                f"{source} line {number}: {fallback} of {len(ids)} tokens are byte "
                f"fallbacks, so it is probably in a script the {self.problem.name} vocabulary "
                "was not trained on; expect a poor translation"
            )
        return None

    def translate(
        self,
        lines: Sequence[str],
        source: str = "input",
        show_progress: bool = False,
        first_line: int = 1,
    ) -> DecodeResult:
        """Decodes `lines`; see the module docstring for batching, order and bad input."""
        encoded, warnings = self.encode(lines, source, first_line)
        for warning in warnings:
            self.printer(f"warning: {warning}")
        width = self.config.beam_size if self.config.method == "beam" else 1
        beams = [[""] * width for _ in lines]
        scores = [[] for _ in lines]
        present = [index for index, ids in enumerate(encoded) if ids is not None]
        progress = _Progress(len(present), self.printer, self.report_every)
        start, tokens = time.monotonic(), 0
        for batch in length_batches([len(encoded[index]) for index in present], self.batch_size):
            rows = [present[position] for position in batch]
            ids, batch_scores = self.translator.search(pad_batch([encoded[r] for r in rows]))
            ids, batch_scores = ids.numpy(), batch_scores.numpy()  # [B, K, L], [B, K]
            batch_tokens = 0
            for row, index in enumerate(rows):
                hypotheses = [strip_ids(hypothesis) for hypothesis in ids[row]]
                batch_tokens += len(hypotheses[0])
                beams[index] = [self.target_encoder.decode(h) for h in hypotheses]
                scores[index] = [float(score) for score in batch_scores[row]]
            tokens += batch_tokens
            if show_progress:
                progress.add(len(rows), batch_tokens)
        return DecodeResult(beams, scores, warnings, tokens, time.monotonic() - start)


def search_config(problem, **overrides) -> SearchConfig:
    """The problem's decoding defaults (the paper's, section 6.1) with `overrides` that are not None.

    Keys: method, beam_size, alpha, extra_length, temperature, top_k, seed, stop_early.
    """
    values = {
        "beam_size": problem.beam_size,
        "alpha": problem.alpha,
        "extra_length": problem.extra_decode_length,
    }
    values.update({key: value for key, value in overrides.items() if value is not None})
    return SearchConfig(**values)


def _byte_fallback_ids(encoder) -> frozenset:
    """Ids of SentencePiece byte-fallback and unknown pieces; empty for other encoders."""
    model_proto = getattr(encoder, "model_proto", None)
    if model_proto is None:
        return frozenset()
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
    return frozenset(
        piece
        for piece in range(processor.get_piece_size())
        if processor.is_byte(piece) or processor.is_unknown(piece)
    )


def score_outputs(problem, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Scores detokenized hypotheses against references with the problem's metric.

    BLEU problems get `bleu_report` (sacreBLEU with its signature and the paper's tokenized
    BLEU, each labelled); accuracy problems get the share of exactly matching lines.

    Raises:
        DecodeError: for a problem scored by another tool (parsing: EVALB).
    """
    check_scorable(problem)
    if problem.eval_metric == "parse_f1":
        return dict(metric="parse_f1", **problem.score(hypotheses, references))
    if problem.eval_metric == "bleu":
        return dict(metric="bleu", **bleu_report(hypotheses, references, problem.target_language))
    matches = sum(h == r for h, r in zip(hypotheses, references, strict=True))
    return {
        "metric": "accuracy",
        "num_sentences": len(hypotheses),
        "exact_match": {
            "label": "sequence exact match (%)",
            "score": 100.0 * matches / max(len(hypotheses), 1),
            "matches": matches,
        },
    }


def check_scorable(problem) -> None:
    """Raises DecodeError unless `score_outputs` can score `problem` (BLEU or accuracy)."""
    if problem.eval_metric not in ("bleu", "accuracy", "parse_f1"):
        raise DecodeError(
            f"problem {problem.name} is scored by {problem.eval_metric}, not by the decoder; "
            "score the decodes with `python -m t2t_lite.evalb -p COLLINS.prm GOLD DECODES`"
        )


def format_scores(report: dict) -> list:
    """One printable line per score, each with its label and signature."""
    if report["metric"] == "parse_f1":
        return [
            f"EVALB bracketing F1 (COLLINS.prm): {report['f1']:.2f} (precision "
            f"{report['precision']:.2f}, recall {report['recall']:.2f}, "
            f"{report['valid']}/{report['sentences']} sentences scored)"
        ]
    if report["metric"] == "bleu":
        return [
            f"{result['label']}: {result['score']:.2f}  [{result['signature']}]"
            for result in (report["sacrebleu"], report["tokenized_bleu"])
        ]
    match = report["exact_match"]
    return [
        f"{match['label']}: {match['score']:.2f} ({match['matches']}/{report['num_sentences']})"
    ]


def is_parsing(problem) -> bool:
    """True for a problem whose outputs are linearized trees (scored by EVALB F1)."""
    return problem.eval_metric == "parse_f1"


def output_lines(
    problem,
    result: DecodeResult,
    inputs: Sequence[str],
    return_beams: bool = False,
    references: Sequence[str] | None = None,
) -> list:
    """The output lines of `result`: `result.lines(return_beams)`, or trees for parsing.

    For a parsing problem every hypothesis becomes `problem.postprocess(hypothesis, input)`:
    a well-formed tree over exactly the input's words, with placeholder tags, or with the
    gold tags of `references` (`problem.with_gold_tags`) when given; an empty input line
    stays empty, and so does a beam slot no hypothesis filled.
    """
    if not is_parsing(problem):
        return result.lines(return_beams)
    lines = []
    for index, (beams, text) in enumerate(zip(result.beams, inputs)):
        parsed = [
            problem.postprocess(hypothesis, text)
            if text.strip() and (hypothesis or rank == 0)
            else ""
            for rank, hypothesis in enumerate(beams if return_beams else beams[:1])
        ]
        if references is not None:
            parsed = problem.with_gold_tags(parsed, [references[index]] * len(parsed))
        lines.append("\t".join(parsed))
    return lines


def decode_file(
    decoder: Decoder,
    input_path: str,
    output_path: str,
    reference_path: str | None = None,
    return_beams: bool = False,
) -> dict:
    """Decodes `input_path` into `output_path` and, with references, scores it.

    The scores go to `<output_path>.<metric>.json` with the search settings, checkpoint
    and files they came from.

    Returns:
        {"sentences", "sentences_per_sec", "tokens_per_sec", "warnings",
         "output", and with references "scores" (the JSON's content) and "scores_file"}.

    Raises:
        DecodeError: unreadable input or reference, or a reference of another length.
    """
    lines = read_lines(input_path)
    references = read_lines(reference_path) if reference_path else None
    if references is not None:
        check_scorable(decoder.problem)
        if len(references) != len(lines):
            raise DecodeError(
                f"{reference_path} has {len(references):,} lines but {input_path} has "
                f"{len(lines):,}; pass the reference file aligned with the input"
            )
        if is_parsing(decoder.problem):
            try:
                decoder.problem.check_references(references, reference_path)
            except ValueError as error:
                raise DecodeError(
                    f"{error}; the reference file must hold one gold tree (PTB brackets) per line"
                ) from None
    write_lines(output_path, [])  # Fails now, not after decoding, if it cannot be written.
    result = decoder.translate(lines, source=input_path, show_progress=True)
    write_lines(output_path, output_lines(decoder.problem, result, lines, return_beams, references))
    seconds = max(result.seconds, 1e-9)
    summary = {
        "sentences": len(lines),
        "sentences_per_sec": len(lines) / seconds,
        "tokens_per_sec": result.target_tokens / seconds,
        "warnings": result.warnings,
        "output": output_path,
    }
    decoder.printer(f"wrote {len(lines):,} lines to {output_path}")
    if references is not None:
        # For parsing: the trees written above, with the gold tags on their leaves.
        hypotheses = output_lines(decoder.problem, result, lines, references=references)
        report = score_outputs(decoder.problem, hypotheses, references)
        report.update(
            hypotheses_file=output_path,
            reference_file=reference_path,
            input_file=input_path,
            checkpoint=decoder.trained.checkpoint_path,
            search=dataclasses.asdict(decoder.config),
        )
        scores_file = f"{output_path}.{report['metric']}.json"
        write_bleu_json(scores_file, report)
        for line in format_scores(report):
            decoder.printer(line)
        decoder.printer(f"wrote scores to {scores_file}")
        summary.update(scores=report, scores_file=scores_file)
    return summary


def interactive(decoder: Decoder, stdin=None, stdout=None, return_beams: bool = False) -> int:
    """Decodes each line read from `stdin` as soon as it arrives; returns the lines decoded.

    Prints one output line per input line on `stdout` (the same format as files); errors
    about a line go to stderr and decoding continues. A prompt is shown on a terminal.
    """
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    prompt = stdin.isatty()
    count = 0
    while True:
        if prompt:
            print("> ", end="", file=sys.stderr, flush=True)
        line = stdin.readline()
        if not line:
            return count
        count += 1
        try:
            text = line.rstrip("\n").rstrip("\r")
            result = decoder.translate([text], source="stdin", first_line=count)
        except DecodeError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            stdout.write("\n")
        else:
            stdout.write(one_line(output_lines(decoder.problem, result, [text], return_beams)[0]))
            stdout.write("\n")
        stdout.flush()


def default_output_path(output_dir: str, input_path: str, config: SearchConfig) -> str:
    """OUTPUT_DIR/decode/<input name>.<method>[<beam>].decodes."""
    method = f"beam{config.beam_size}" if config.method == "beam" else config.method
    name = os.path.basename(input_path) or "input"
    return os.path.join(output_dir or ".", "decode", f"{name}.{method}.decodes")
