"""Required phrases and prefixes for the decoder: reading their files, encoding them to ids.

`--constraints_file` holds one JSON list of phrases per input line (`[]` for none), e.g.
`["Hund", "roten Ball"]`; `--prefix_file` one line of target text per input line (empty
for none). Both must have as many lines as the input.

Phrases and prefixes are encoded with the target vocabulary as text of their own. With
SentencePiece, that gives a phrase the pieces it has in a sentence where it stands as one
or more whole words (a SentencePiece model without user symbols never merges across a
space, and its first piece carries the word-initial mark "▁"): "Hund" must appear as the
word "Hund", not inside "Hundes". A phrase written as part of a word cannot be asked for.
A prefix is forced piece by piece, so the search continues after its last piece: "Ein
Hu" may be completed to "Ein Hund" if the vocabulary has the piece "nd".
"""

from __future__ import annotations

import dataclasses
import json

from t2t_lite.inference.text_files import DecodeError, read_lines


@dataclasses.dataclass(frozen=True)
class Guidance:
    """What one input line's output must contain and start with, as text and as target ids."""

    phrases: tuple = ()  # the phrases as given
    prefix: str = ""
    phrase_ids: tuple = ()  # per phrase, its target ids
    prefix_ids: tuple = ()


def parse_constraints(value, where: str) -> list:
    """A list of non-blank phrase strings from a JSON value; DecodeError naming `where`."""
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise DecodeError(
            f'{where}: constraints must be a JSON list of strings, e.g. ["Hund", "roten '
            f'Ball"], or [] for none; got {json.dumps(value, ensure_ascii=False)[:80]}'
        )
    if any(not phrase.strip() for phrase in value):
        raise DecodeError(f"{where}: a constraint is blank; remove it or write the phrase")
    return [phrase.strip() for phrase in value]


def read_guidance(constraints_path: str | None, prefix_path: str | None, num_lines: int) -> list:
    """Per input line, (phrases, prefix) as text; [] and "" where a file is not given.

    Raises:
        DecodeError: a file of another length than the input, or a line that is not a
            JSON list of non-blank strings, naming the file and line.
    """
    phrases = [[] for _ in range(num_lines)]
    prefixes = [""] * num_lines
    if constraints_path:
        lines = _aligned(constraints_path, num_lines)
        for number, line in enumerate(lines, start=1):
            where = f"{constraints_path} line {number}"
            try:
                value = json.loads(line) if line.strip() else []
            except json.JSONDecodeError as error:
                raise DecodeError(
                    f"{where}: not JSON ({error.msg}); write a list of phrases"
                ) from None
            phrases[number - 1] = parse_constraints(value, where)
    if prefix_path:
        prefixes = [line.strip() for line in _aligned(prefix_path, num_lines)]
    return list(zip(phrases, prefixes, strict=True))


def _aligned(path: str, num_lines: int) -> list:
    lines = read_lines(path)
    if len(lines) != num_lines:
        raise DecodeError(
            f"{path} has {len(lines):,} lines but the input has {num_lines:,}; give one line "
            "per input line (an empty list [] or an empty line for none)"
        )
    return lines


def encode_guidance(target_encoder, phrases: list, prefix: str, where: str) -> Guidance:
    """Target ids of one line's phrases and prefix (no EOS).

    Raises:
        DecodeError: a phrase or prefix the vocabulary refuses or encodes to nothing.
    """
    try:
        phrase_ids = tuple(tuple(target_encoder.encode(phrase)) for phrase in phrases)
        prefix_ids = tuple(target_encoder.encode(prefix)) if prefix else ()
    except ValueError as error:
        raise DecodeError(f"{where}: {error}") from None
    for phrase, ids in zip(phrases, phrase_ids, strict=True):
        if not ids:
            raise DecodeError(f"{where}: constraint {phrase!r} encodes to no target piece")
    return Guidance(tuple(phrases), prefix, phrase_ids, prefix_ids)


def encode_lines_guidance(
    target_encoder, guidance, encoded: list, extra_length: int, source: str, first_line: int = 1
) -> list | None:
    """Per input line ([phrase ids], prefix ids), or None without guidance.

    Args:
        target_encoder: the problem's target TextEncoder.
        guidance: per line (phrases, prefix) as text (`read_guidance`), or None.
        encoded: per line its source ids (None for an empty line).
        extra_length: the search's extra length (a line outputs at most its ids + EOS +
            this many tokens).
        source, first_line: name the lines in errors.

    Raises:
        DecodeError: a phrase the vocabulary refuses, or a prefix that leaves no room.
    """
    if guidance is None:
        return None
    if len(guidance) != len(encoded):
        raise DecodeError(f"{len(guidance)} constraints/prefixes for {len(encoded)} lines")
    guided = []
    for number, ((phrases, prefix), ids) in enumerate(
        zip(guidance, encoded, strict=True), start=first_line
    ):
        where = f"{source} line {number}"
        line = encode_guidance(target_encoder, phrases, prefix, where)
        limit = len(ids or ()) + 1 + extra_length
        if ids is not None and len(line.prefix_ids) >= limit:
            raise DecodeError(
                f"{where}: the prefix has {len(line.prefix_ids)} target pieces, not less than "
                f"the line's maximum output of {limit}; shorten it or raise --extra_length"
            )
        guided.append((list(line.phrase_ids), list(line.prefix_ids)))
    return guided
