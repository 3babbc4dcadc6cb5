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
hypothesis filled is empty). With `output_format="jsonl"`, one JSON object per input line
instead (`output_records`): the hypotheses (the best, or all with `return_beams`) with
their search scores and token counts. What is written for a hypothesis is the problem's
(`problem.outputs`: the text as decoded, or for parsing a tree over the input's words), and
so are the scores of a reference file (`problem.score`, `problem.format_scores`): the
decodes written are the ones scored.

Inputs that cannot be decoded as given are reported, never skipped silently: a line the
vocabulary refuses stops the run naming the file and line; a line longer than the model's
maximum is cut to it with a warning; a line written mostly in byte-fallback pieces (a
script the vocabulary was not trained on) gets a warning.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from t2t_lite.ids import EOS_ID
from t2t_lite.inference.guidance import encode_lines_guidance, read_guidance
from t2t_lite.inference.outputs import (
    check_format,
    formatted,
    json_line,
    output_lines,
    output_records,
)
from t2t_lite.inference.text_files import DecodeError, one_line, read_lines, write_lines
from t2t_lite.metrics import write_scores_json
from t2t_lite.runs.progress import ItemProgress
from t2t_lite.runs.restore import TrainedModel
from t2t_lite.search import (
    SearchConfig,
    Translator,
    guidance_batch,
    length_batches,
    pad_batch,
    strip_ids,
)

# A line whose tokens are at least this share of byte-fallback pieces gets a warning.
BYTE_FALLBACK_SHARE = 0.5


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
        num_tokens: per line, the K hypotheses' lengths as their length penalty counts
            them (EOS included when they end with it); 0 for a slot no hypothesis filled,
            empty for empty lines.
        constraints_met: with constraints, per line whether the best hypothesis contains
            every required phrase (False only when they cannot fit in its maximum
            length); None for empty lines. Empty without constraints.
    """

    beams: list
    scores: list
    warnings: list
    target_tokens: int
    seconds: float
    num_tokens: list = dataclasses.field(default_factory=list)
    constraints_met: list = dataclasses.field(default_factory=list)

    @property
    def best(self) -> list:
        """The best hypothesis of every line."""
        return [beams[0] for beams in self.beams]


class Decoder:
    """Translates lines of text with a trained model.

    Args:
        trained: the restored model (`load_trained_model`).
        data_dir: the data folder holding the problem's vocabulary.
        config: how to search (`SearchConfig.for_problem(problem, hp, ...)`).
        batch_size: sentences per batch.
        printer: where progress lines and warnings go.
        report_every: seconds between progress lines.
        translator: what searches, with `Translator.search`'s contract; default: a
            `Translator` of `trained.model` (another engine, e.g. CTranslate2, otherwise).
    """

    def __init__(
        self,
        trained: TrainedModel,
        data_dir: str,
        config: SearchConfig,
        batch_size: int = 32,
        printer: Callable = print,
        report_every: float = 10.0,
        translator=None,
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
        self.translator = translator or Translator(
            trained.model, config, constraint=self.problem.search_constraint(data_dir)
        )
        # Decoder positions run to S + extra_length - 1 with S = tokens + EOS.
        limit = trained.hp.max_position - config.extra_length
        self.max_input_tokens = min(config.max_input_length or limit, limit) - 1
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
        guidance: Sequence | None = None,
    ) -> DecodeResult:
        """Decodes `lines`; see the module docstring for batching, order and bad input.

        `guidance`: optional per line (phrases, prefix) as text (`read_guidance`): the
        output must contain every phrase and start with the prefix (beam search only).
        """
        encoded, warnings = self.encode(lines, source, first_line)
        guided = encode_lines_guidance(
            self.target_encoder, guidance, encoded, self.config.extra_length, source, first_line
        )
        for warning in warnings:
            self.printer(f"warning: {warning}")
        width = self.config.width
        beams = [[""] * width for _ in lines]
        scores = [[] for _ in lines]
        lengths = [[] for _ in lines]
        met = [None] * len(lines) if guided else []
        present = [index for index, ids in enumerate(encoded) if ids is not None]
        progress = ItemProgress(len(present), self.printer, self.report_every)
        start, tokens = time.monotonic(), 0
        sizes = [len(encoded[index]) for index in present]
        for batch in length_batches(sizes, self.batch_size, self.config.extra_length):
            rows = [present[position] for position in batch]
            inputs = pad_batch([encoded[r] for r in rows])
            if guided:
                ids, batch_scores, batch_met = self.translator.search_guided(
                    inputs, guidance_batch(*zip(*[guided[r] for r in rows], strict=True))
                )
                for row, index in enumerate(rows):
                    met[index] = bool(np.asarray(batch_met)[row, 0])
            else:
                ids, batch_scores = self.translator.search(inputs)
            ids, batch_scores = np.asarray(ids), np.asarray(batch_scores)  # [B, K, L], [B, K]
            batch_tokens = 0
            for row, index in enumerate(rows):
                hypotheses = [strip_ids(hypothesis) for hypothesis in ids[row]]
                batch_tokens += len(hypotheses[0])
                beams[index] = [self.target_encoder.decode(h) for h in hypotheses]
                scores[index] = [float(score) for score in batch_scores[row]]
                lengths[index] = [_num_tokens(hypothesis) for hypothesis in ids[row]]
            tokens += batch_tokens
            if show_progress:
                progress.add(len(rows), batch_tokens)
        seconds = time.monotonic() - start
        for number, line_met in enumerate(met, start=first_line):
            if line_met is False:
                warning = (
                    f"{source} line {number}: its constraints do not fit in the maximum output "
                    f"length (input + {self.config.extra_length} tokens); decoded without them"
                )
                warnings.append(warning)
                self.printer(f"warning: {warning}")
        return DecodeResult(beams, scores, warnings, tokens, seconds, lengths, met)


def _num_tokens(row) -> int:
    """Length of a hypothesis [L] (column 0 the start id) as its length penalty counts it:
    its generated tokens, with the EOS that ends it."""
    generated = np.asarray(row)[1:]
    count = len(strip_ids(row))
    return count + int(count < len(generated) and generated[count] == EOS_ID)


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


def decode_file(
    decoder: Decoder,
    input_path: str,
    output_path: str,
    reference_path: str | None = None,
    return_beams: bool = False,
    output_format: str = "text",
    constraints_path: str | None = None,
    prefix_path: str | None = None,
) -> dict:
    """Decodes `input_path` into `output_path` and, with references, scores it.

    `constraints_path` and `prefix_path` (files aligned with the input, see
    `t2t_lite.inference.guidance`) give each line phrases its output must contain and
    text it must start with.

    `output_format` "text" writes `output_lines`, "jsonl" `output_records` (one JSON
    object per line). The scores go to `<output_path>.<metric>.json` with the search
    settings, checkpoint and files they came from.

    Returns:
        {"sentences", "sentences_per_sec", "tokens_per_sec", "warnings",
         "output", and with references "scores" (the JSON's content) and "scores_file"}.

    Raises:
        DecodeError: unreadable input or reference, a reference of another length, or an
            unknown `output_format`.
    """
    check_format(output_format)
    lines = read_lines(input_path)
    references = read_lines(reference_path) if reference_path else None
    if references is not None:
        if len(references) != len(lines):
            raise DecodeError(
                f"{reference_path} has {len(references):,} lines but {input_path} has "
                f"{len(lines):,}; pass the reference file aligned with the input"
            )
        try:
            decoder.problem.check_references(references, reference_path)
        except ValueError as error:
            raise DecodeError(str(error)) from None
    guidance = None
    if constraints_path or prefix_path:
        guidance = read_guidance(constraints_path, prefix_path, len(lines))
    write_lines(output_path, [])  # Fails now, not after decoding, if it cannot be written.
    result = decoder.translate(lines, source=input_path, show_progress=True, guidance=guidance)
    write_lines(
        output_path,
        formatted(decoder.problem, result, lines, return_beams, references, output_format),
    )
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
        # The lines written above (for parsing, trees with the gold tags on their leaves).
        hypotheses = output_lines(decoder.problem, result, lines, references=references)
        try:
            report = decoder.problem.score(hypotheses, references)
        except ValueError as error:
            raise DecodeError(f"scoring {output_path} against {reference_path}: {error}") from None
        report.update(
            hypotheses_file=output_path,
            reference_file=reference_path,
            input_file=input_path,
            checkpoint=decoder.trained.checkpoint_path,
            search=dataclasses.asdict(decoder.config),
        )
        scores_file = f"{output_path}.{report['metric']}.json"
        write_scores_json(scores_file, report)
        for line in decoder.problem.format_scores(report):
            decoder.printer(line)
        decoder.printer(f"wrote scores to {scores_file}")
        summary.update(scores=report, scores_file=scores_file)
    return summary


def interactive(
    decoder: Decoder,
    stdin=None,
    stdout=None,
    return_beams: bool = False,
    output_format: str = "text",
) -> int:
    """Decodes each line read from `stdin` as soon as it arrives; returns the lines decoded.

    Prints one output line per input line on `stdout` (the same format as files; a JSON
    object's "line" counts stdin's lines); errors about a line go to stderr and decoding
    continues (an empty line; in jsonl, no hypotheses and the "error"). A prompt is shown
    on a terminal.
    """
    check_format(output_format)
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
            if output_format == "jsonl":
                failed = {"line": count, "source": text, "hypotheses": [], "error": str(error)}
                stdout.write(json_line(failed))
            stdout.write("\n")
        else:
            if output_format == "jsonl":
                record = output_records(decoder.problem, result, [text], return_beams)[0]
                stdout.write(json_line({**record, "line": count}))
            else:
                stdout.write(
                    one_line(output_lines(decoder.problem, result, [text], return_beams)[0])
                )
            stdout.write("\n")
        stdout.flush()


def use_ptb_form(problem) -> None:
    """Makes `problem` write (and score) trees in Penn Treebank form, `( (S ...) )`.

    Raises:
        DecodeError: when the problem's outputs are not trees (it has no `ptb_output`).
    """
    if not hasattr(problem, "ptb_output"):
        raise DecodeError(
            f"--ptb_output is for parsing problems (trees); problem {problem.name} writes text"
        )
    problem.ptb_output = True
