"""Reading EVALB's input: one bracketed sentence per line, as leaves and labelled spans.

A line is read as EVALB reads it (README sections 6 and 7; the rules are listed in
`t2t_lite.metrics.evalb`): a `(TAG word)` pair is a leaf, any other bracket a constituent whose
label loses its function tags and indices; a bracket without a label (the outer `( (S ...) )` of
Penn Treebank files) is a constituent with the label "".
"""

from __future__ import annotations

import dataclasses
import os
import re

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_FUNCTION_TAG = re.compile(r"[-=]")


@dataclasses.dataclass(frozen=True)
class Sentence:
    """A sentence as EVALB sees it: leaves in order and phrasal spans over leaf indices."""

    words: tuple
    tags: tuple
    spans: tuple  # ((label without function tags, first leaf, last leaf + 1), ...); "" label-less


def strip_function_tags(label: str) -> str:
    """`NP-SBJ-1`, `NP=2` -> `NP`; labels such as `-NONE-` and `-LRB-` stay whole."""
    if len(label) > 1 and label.startswith("-") and label.endswith("-"):
        return label
    match = _FUNCTION_TAG.search(label, 1)
    return label[: match.start()] if match else label


def read_sentence(text: str, where: str) -> Sentence | None:
    """Parses one line (a tree, or several side by side); None when it holds no brackets."""
    tokens = _TOKEN.findall(text)
    if not tokens:
        return None
    words, tags, spans, stack = [], [], [], []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "(":
            label = tokens[index + 1] if index + 1 < len(tokens) else ")"
            label = "" if label in ("(", ")") else label
            index += 1 if label else 0
            ahead = tokens[index + 1 : index + 3]
            if label and len(ahead) == 2 and ahead[0] not in ("(", ")") and ahead[1] == ")":
                words.append(ahead[0])
                tags.append(label)
                index += 2
            else:
                stack.append((label, len(words)))
        elif token == ")":
            if not stack:
                raise ValueError(f"{where}: ')' closes nothing; the brackets are unbalanced")
            label, start = stack.pop()
            spans.append((strip_function_tags(label), start, len(words)))
        else:
            raise ValueError(
                f"{where}: word {token!r} has no POS tag; EVALB needs (TAG word) for every word"
            )
        index += 1
    if stack:
        raise ValueError(
            f"{where}: {len(stack)} bracket(s) never closed; EVALB reads one tree per line"
        )
    return Sentence(tuple(words), tuple(tags), tuple(spans))


def read_lines(path: str | os.PathLike) -> list:
    """The lines of a text file, without line ends; a final newline ends the last line."""
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]
