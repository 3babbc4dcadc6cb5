"""Reading and writing the decoder's text files: one sentence per line, UTF-8, in order."""

from __future__ import annotations

import os
from collections.abc import Iterable

import tensorflow as tf


class DecodeError(ValueError):
    """Input that cannot be decoded; the message names the file, the line and what to do."""


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
