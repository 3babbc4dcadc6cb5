"""Parallel corpora read as text pairs: raw line-aligned files, or TensorFlow Datasets.

A corpus has `splits`, `identity()` (what the data fingerprint hashes: file contents, or
the TFDS builder and version), `describe(split)` (for messages) and `pairs(split)`,
yielding `(origin, line or record number from 1, source text, target text)`.

Raw files are UTF-8, one sentence per line, `\\n` or `\\r\\n` line ends, optionally
gzipped (`.gz`). Every problem with the input data raises `DataError`, whose message
names the file and the line and says what to do.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import hashlib
import itertools
import os
import re
import shutil
import zlib


class DataError(ValueError):
    """Input data that cannot be used; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class ParallelFiles:
    """One line-aligned pair of text files (plain or .gz)."""

    source: str
    target: str


def read_lines(path: str):
    """Yields (line number from 1, text) of a UTF-8 file without its line terminator.

    Raises:
        DataError: naming the file (and line) when it is missing, not valid gzip, or
            not valid UTF-8.
    """
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found")
    number = 0
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            for number, text in numbered_lines(f, path):  # noqa: B007 (used after the loop)
                yield number, text
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path}: unreadable after line {number}: {error}") from None


def numbered_lines(stream, where: str):
    """Yields (line number from 1, text) of a binary stream, without `\\n` or `\\r\\n`.

    Raises:
        DataError: naming `where` and the line when a line is not valid UTF-8.
    """
    for number, raw in enumerate(stream, 1):
        if raw.endswith(b"\n"):
            raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        yield number, decode_utf8(raw, f"{where}:{number}")


def decode_utf8(raw: bytes, where: str) -> str:
    """`raw` as text; DataError naming `where` and the byte offset when not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(
            f"{where}: invalid UTF-8 at byte {error.start} ({raw[error.start : error.start + 4]!r} "
            f"in {raw[max(0, error.start - 20) : error.start + 20]!r}); convert the file to UTF-8 "
            "or remove the line from both files of the pair"
        ) from None


def read_parallel(files: ParallelFiles):
    """Yields (origin, line number, source text, target text) of a line-aligned pair.

    Raises:
        DataError: when one file has more lines than the other, naming both and the line.
    """
    for source, target in itertools.zip_longest(read_lines(files.source), read_lines(files.target)):
        if source is None or target is None:
            shorter, longer, extra = (
                (files.source, files.target, target)
                if source is None
                else (files.target, files.source, source)
            )
            raise DataError(
                f"{longer}:{extra[0]}: line has no partner: {shorter} ends after "
                f"{extra[0] - 1} lines; the source and target files must be line-aligned"
            )
        yield files.source, source[0], source[1], target[1]


class RawCorpus:
    """Parallel text files per split (see `TranslateProblem.raw_files`)."""

    def __init__(self, files: dict):
        self.files = files
        self.splits = tuple(files)

    def identity(self) -> dict:
        """Content hashes of the inputs: what the data fingerprint covers."""
        return {
            split: [[file_digest(f.source), file_digest(f.target)] for f in pairs]
            for split, pairs in self.files.items()
        }

    def describe(self, split: str) -> str:
        return ", ".join(f"{f.source} + {f.target}" for f in self.files[split])

    def pairs(self, split: str):
        for files in self.files[split]:
            yield from read_parallel(files)

    def count(self, split: str) -> int:
        """Pairs of `split`, from the line count of the source files (a fast first pass)."""
        return sum(count_lines(files.source) for files in self.files[split])


class TfdsCorpus:
    """A translation dataset of TensorFlow Datasets, read as text pairs."""

    def __init__(self, builder_name: str, languages: tuple, splits: dict, data_dir=None):
        self.builder_name = builder_name
        self.languages = languages
        self.split_names = splits  # ours -> TFDS's
        self.splits = tuple(splits)
        self.data_dir = data_dir
        self._builder = None

    def builder(self):
        """The prepared TFDS builder (downloads and prepares on first use).

        Raises:
            DataError: one line naming the URL that could not be fetched (or the module
                that is missing) and the raw-files alternative. What the failed attempt
                wrote under TFDS's data folder is removed, so nothing half-made remains.
        """
        if self._builder is None:
            import tensorflow_datasets as tfds

            builder = tfds.builder(self.builder_name, data_dir=self.data_dir)
            # DATA_DIR/<dataset>/<config>/<version>: its downloads go to DATA_DIR/downloads.
            root = os.path.dirname(os.path.dirname(os.path.dirname(builder.data_dir)))
            touched = (
                [root]
                if not os.path.lexists(root)
                else [
                    os.path.join(root, "downloads"),
                    os.path.join(root, self.builder_name.split("/")[0]),
                ]
            )
            before = set().union(*(_paths_under(path) for path in touched))
            try:
                builder.download_and_prepare()
            except Exception as error:  # noqa: BLE001 (TFDS raises many kinds; all end here)
                for path in touched:
                    _remove_new_paths(path, before)
                raise DataError(self._failure(error)) from None
            self._builder = builder
        return self._builder

    def _failure(self, error: BaseException) -> str:
        what = f"TensorFlow Datasets could not prepare {self.builder_name}"
        alternative = (
            "put the WMT archives or their extracted text files in a folder and pass "
            "--raw_dir=DIR (docs/data.md lists them), or run datagen with --download"
        )
        missing = _missing_module(error)
        if missing:
            return (
                f"{what}: it needs the Python module {missing!r}, which is not installed "
                f"(pip install {missing.split('.')[0]}); or {alternative}"
            )
        url = _failed_url(error)
        where = f" downloading {url}" if url else ""
        reason = " ".join(str(error).split())[:300]
        return f"{what}:{where} failed ({type(error).__name__}: {reason}); {alternative}"

    def identity(self) -> dict:
        return {"tfds": self.builder_name, "version": str(self.builder().info.version)}

    def describe(self, split: str) -> str:
        return f"tfds {self.builder_name} {self.split_names[split]}"

    def count(self, split: str) -> int | None:
        """Records of `split`, as the prepared dataset's info gives them."""
        try:
            return self.builder().info.splits[self.split_names[split]].num_examples
        except KeyError:
            return None

    def pairs(self, split: str):
        """Yields (origin, record number from 1, source text, target text)."""
        import tensorflow_datasets as tfds

        name = self.split_names[split]
        dataset = self.builder().as_dataset(split=name, shuffle_files=False)
        origin = f"tfds {self.builder_name} {name}"
        source, target = self.languages
        for number, example in enumerate(tfds.as_numpy(dataset), 1):
            where = f"{origin} record {number}"
            yield (
                origin,
                number,
                decode_utf8(example[source], where),
                decode_utf8(example[target], where),
            )


def find_stems(raw_dir: str, languages: tuple) -> dict:
    """{stem: {language: path}} of files `<stem>.<language>` or `<stem>.<language>.gz`."""
    found = {}
    for language in languages:
        for path in sorted(glob.glob(os.path.join(glob.escape(raw_dir), f"*.{language}*"))):
            name = os.path.basename(path)
            for suffix in (f".{language}", f".{language}.gz"):
                if name.endswith(suffix) and len(name) > len(suffix):
                    stem = name[: -len(suffix)]
                    if language in found.setdefault(stem, {}):
                        raise DataError(f"{path}: {stem}.{language} exists both plain and gzipped")
                    found[stem][language] = path
    return found


def count_lines(path: str) -> int:
    """Lines of a file as `read_lines` yields them (a last line needs no line end).

    Raises:
        DataError: naming the file when it is missing or not valid gzip.
    """
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found")
    lines, last = 0, b"\n"
    try:
        with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
            while block := f.read(1 << 20):
                lines += block.count(b"\n")
                last = block[-1:]
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path}: unreadable: {error}") from None
    return lines + (last != b"\n")


def file_digest(path: str) -> list:
    """[file name, sha256 of the content]."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            sha.update(block)
    return [os.path.basename(path), sha.hexdigest()]


def _chain(error: BaseException):
    """`error` and the exceptions it was raised from or during, outermost first."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _missing_module(error: BaseException) -> str | None:
    for link in _chain(error):
        if isinstance(link, ModuleNotFoundError) and link.name:
            return link.name
    return None


def _failed_url(error: BaseException) -> str | None:
    """The URL a download error names: the request's, else the first in a message."""
    for link in _chain(error):
        request = getattr(link, "request", None)
        if getattr(request, "url", None):
            return request.url
    for link in _chain(error):
        found = re.search(r"https?://[^\s'\"),]+", str(link))
        if found:
            return found.group(0).rstrip(".,;:")
    return None


def _paths_under(root: str) -> set:
    """Every file and folder below `root` (and `root` itself), as paths."""
    found = {root} if os.path.lexists(root) else set()
    for folder, dirs, files in os.walk(root):
        found.update(os.path.join(folder, name) for name in dirs + files)
    return found


def _remove_new_paths(root: str, before: set) -> None:
    """Removes what appeared under `root` since `before` was taken, deepest first."""
    for path in sorted(_paths_under(root) - before, key=len, reverse=True):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path) if not os.listdir(path) else shutil.rmtree(path)
            else:
                os.remove(path)
        except FileNotFoundError:
            pass
