"""What the decoder writes for its results: text lines or JSON lines.

Text: one line per input line, the best hypothesis; with `return_beams`, the beam's K
hypotheses best first, separated by tabs. JSON lines: one object per input line with the
hypotheses, their search scores and token counts. What is written for a hypothesis is the
problem's (`problem.outputs`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

from t2t_lite.inference.text_files import DecodeError, one_line

OUTPUT_FORMATS = ("text", "jsonl")


def output_lines(
    problem,
    result,
    inputs: Sequence[str],
    return_beams: bool = False,
    references: Sequence[str] | None = None,
) -> list:
    """The lines to write: per input line, the problem's `outputs` of its best hypothesis,
    or of all K tab-separated with `return_beams`.

    Line breaks (and, between beams, tabs) inside an output become spaces, so one input
    line always gives exactly one output line.
    """
    lines = []
    for index, (beams, text) in enumerate(zip(result.beams, inputs, strict=True)):
        reference = references[index] if references is not None else None
        outputs = problem.outputs(beams if return_beams else beams[:1], text, reference)
        if return_beams:
            lines.append("\t".join(one_line(output).replace("\t", " ") for output in outputs))
        else:
            lines.append(one_line(outputs[0]))
    return lines


def output_records(
    problem,
    result,
    inputs: Sequence[str],
    return_beams: bool = False,
    references: Sequence[str] | None = None,
) -> list:
    """The JSON objects to write, one per input line (k counts from 1):

        {"line": k, "source": input line,
         "hypotheses": [{"text": ..., "score": ..., "num_tokens": n}, ...]}

    The best hypothesis, or with `return_beams` every one, best first; "text" is what
    `output_lines` writes for it, "score" the search's (beam: log P / ((5 + n) / 6)^alpha;
    greedy and sampling: log P), "num_tokens" n, EOS included. With constraints,
    "constraints_met" says whether the best hypothesis contains all of them. A beam slot that no
    hypothesis filled is left out, and an empty input line has no hypotheses.
    """
    records = []
    for index, (beams, text) in enumerate(zip(result.beams, inputs, strict=True)):
        reference = references[index] if references is not None else None
        width = len(beams) if return_beams else 1
        outputs = problem.outputs(beams[:width], text, reference)
        hypotheses = [
            {"text": output, "score": score, "num_tokens": length}
            for output, score, length in zip(
                outputs, result.scores[index][:width], result.num_tokens[index][:width]
            )
            if length > 0
        ]
        record = {"line": index + 1, "source": text, "hypotheses": hypotheses}
        if result.constraints_met and result.constraints_met[index] is not None:
            # Whether the best hypothesis contains every required phrase.
            record["constraints_met"] = result.constraints_met[index]
        records.append(record)
    return records


# Characters that JSON leaves unescaped but some line readers (Python's str.splitlines)
# take as line ends.
_JSON_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_line(record: dict) -> str:
    """`record` as one line of JSON (UTF-8 text kept readable, no line-break character)."""
    return json.dumps(record, ensure_ascii=False).translate(_JSON_LINE_BREAKS)


def check_format(output_format: str) -> None:
    """A DecodeError for an `output_format` not in OUTPUT_FORMATS."""
    if output_format not in OUTPUT_FORMATS:
        raise DecodeError(
            f"unknown output format {output_format!r}; choose --output_format from {OUTPUT_FORMATS}"
        )


def formatted(problem, result, inputs, return_beams, references, output_format) -> list:
    """The output lines of `result` in `output_format`."""
    if output_format == "jsonl":
        records = output_records(problem, result, inputs, return_beams, references)
        return [json_line(record) for record in records]
    return output_lines(problem, result, inputs, return_beams, references)


def default_output_path(
    output_dir: str,
    input_path: str,
    config,
    output_format: str = "text",
    checkpoint_path: str = "",
    dtype: str = "float32",
) -> str:
    """OUTPUT_DIR/decode/<input name>.<checkpoint>.<method>[<beam>][.<dtype>].decodes[.jsonl].

    `config` is the search's SearchConfig (its method and beam size name the file); a
    search in another dtype than float32 (`--decode_dtype`) is named too.

    The checkpoint is in the name so that decoding the same input with another one (a
    later step, RUN/averaged, RUN/best) does not overwrite the previous decode and its BLEU.
    An ensemble (`output_dir` and `checkpoint_path` comma-separated) writes under its first
    run, named after every checkpoint (`checkpoint_label`).
    """
    output_dir = output_dir.split(",")[0] if output_dir else output_dir
    method = f"beam{config.beam_size}" if config.method == "beam" else config.method
    if dtype != "float32":
        method += f".{dtype}"
    name = os.path.basename(input_path) or "input"
    suffix = ".jsonl" if output_format == "jsonl" else ""
    label = checkpoint_label(checkpoint_path, output_dir)
    return os.path.join(
        output_dir or ".",
        "decode",
        f"{name}.{label + '.' if label else ''}{method}.decodes{suffix}",
    )


def checkpoint_label(checkpoint_path: str, output_dir: str) -> str:
    """A file-name part naming a checkpoint: its path under the run, "/" written "-".

    RUN/ckpt-8 gives "ckpt-8", RUN/averaged/ckpt-8 "averaged-ckpt-8"; a checkpoint outside
    the run (or a CTranslate2 export folder) its last two path parts, "other_run-ckpt-3".
    An ensemble's checkpoints ("A/ckpt-8,B/ckpt-9") give "ensemble-A-ckpt-8+B-ckpt-9".
    """
    if not checkpoint_path:
        return ""
    if "," in checkpoint_path:
        labels = [checkpoint_label(path, None) for path in checkpoint_path.split(",")]
        return "ensemble-" + "+".join(labels)
    path = os.path.abspath(checkpoint_path)
    run = os.path.abspath(output_dir) if output_dir else None
    if run and path.startswith(run + os.sep):
        parts = os.path.relpath(path, run).split(os.sep)
    else:
        parts = path.split(os.sep)[-2:]
    return "-".join(part for part in parts if part)


def default_scores_path(output_dir: str, input_path: str, checkpoint_path: str = "") -> str:
    """OUTPUT_DIR/decode/<input name>.<checkpoint>.scores.jsonl, named like the decodes
    (`default_output_path`): scores of other checkpoints never overwrite each other. An
    ensemble writes under its first run, named after every checkpoint."""
    output_dir = output_dir.split(",")[0] if output_dir else output_dir
    name = os.path.basename(input_path) or "input"
    label = checkpoint_label(checkpoint_path, output_dir)
    return os.path.join(
        output_dir or ".", "decode", f"{name}.{label + '.' if label else ''}scores.jsonl"
    )
