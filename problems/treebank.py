"""The Penn Treebank files of `wsj_parsing` and how their trees are split.

Raw data, from `--raw_dir` or `DATA_DIR/wsj_parsing/raw/`, searched recursively:
- tree files end in `.mrg` or `.trees`: multi-line PTB files, or one tree per line;
- a tree file named `wsj_SSNN.mrg` (the PTB layout `wsj/02/wsj_0201.mrg`) holds trees of WSJ
  section SS; a tree file `STEM.*` beside a `STEM.fileids` file takes each tree's file id from
  the line of that file with the tree's number (the shared sample:
  `wsj_0001-0179.oneline.mrg` + `wsj_0001-0179.fileids`);
- a tree file named `train.*`, `dev.*` or `test.*` goes to that split whole.

Split by file id. When any tree comes from sections 02-21 (the full treebank), the standard
split: sections 02-21 train, 22 dev, 23 test; other sections are not used. Otherwise (the NLTK
10% sample, sections 00-01, which the shared data holds as files wsj_0001-0179): files
wsj_0160-0169 dev (105 trees), wsj_0170-0179 test (168 trees), every other file train (3,396
trees of wsj_0001-0159). Whole files go to one split, so no article is split across them.
"""

from __future__ import annotations

import logging
import os
import re

from t2t_lite.problems import trees
from t2t_lite.problems.corpus import DataError, file_digest
from t2t_lite.problems.problem import EVAL, TEST, TRAIN

TREE_SUFFIXES = (".mrg", ".trees")
FILEIDS_SUFFIX = ".fileids"
STANDARD_SECTIONS = {TRAIN: range(2, 22), EVAL: range(22, 23), TEST: range(23, 24)}
SAMPLE_FILES = {EVAL: range(160, 170), TEST: range(170, 180)}  # the rest of the sample: train
_FILE_ID = re.compile(r"wsj_(\d\d)(\d\d)")
_SPLITS = (TRAIN, EVAL, TEST)
# Changes when preprocessing or linearization change the examples of the same trees.
_EXAMPLE_FORMAT = 1


_LAYOUT_HINT = (
    "problem wsj_parsing reads Penn Treebank files wsj_SSNN.mrg (e.g. wsj/02/wsj_0201.mrg), "
    "tree files with a STEM.fileids file naming each tree's source file, or files "
    "train.trees, dev.trees and test.trees"
)


def find_tree_files(raw_dir: str) -> list:
    """Tree files (`.mrg`, `.trees`) under `raw_dir`, recursively, in sorted path order.

    Raises:
        DataError: when the folder is missing or holds no tree file.
    """
    if not os.path.isdir(raw_dir):
        raise DataError(f"{raw_dir}: raw treebank folder not found; {_LAYOUT_HINT}")
    found = []
    for folder, subfolders, names in os.walk(raw_dir):
        subfolders.sort()
        found += [os.path.join(folder, n) for n in sorted(names) if n.endswith(TREE_SUFFIXES)]
    if not found:
        raise DataError(f"{raw_dir}: no tree files (*.mrg, *.trees); {_LAYOUT_HINT}")
    return found


def _stem(path: str) -> str:
    return os.path.join(os.path.dirname(path), os.path.basename(path).split(".")[0])


def _file_ids(path: str, count: int) -> list:
    """One file id (or explicit split name) per tree of the tree file `path`."""
    name = os.path.basename(path)
    if name.split(".")[0] in _SPLITS:
        return [name.split(".")[0]] * count
    ids_path = _stem(path) + FILEIDS_SUFFIX
    if os.path.exists(ids_path):
        with open(ids_path, encoding="utf-8") as handle:
            ids = [line.strip() for line in handle if line.strip()]
        if len(ids) != count:
            raise DataError(
                f"{ids_path}: names {len(ids)} file ids but {path} holds {count} trees; "
                "the file must name the source file of each tree, one per line, in order"
            )
        for number, file_id in enumerate(ids, 1):
            if not _FILE_ID.match(file_id):
                raise DataError(f"{ids_path}:{number}: {file_id!r} is not a WSJ file id wsj_SSNN")
        return ids
    if not _FILE_ID.match(name):
        raise DataError(
            f"{path}: cannot tell which WSJ file its trees come from, so not which split they "
            f"belong to; {_LAYOUT_HINT}"
        )
    return [name] * count


def split_of(file_id: str, standard: bool) -> str | None:
    """The split of a tree from `file_id` (`wsj_0201.mrg`, or `train`/`dev`/`test`).

    Args:
        file_id: a WSJ file name, or a split name for split-named tree files.
        standard: True for the section split of the full treebank, False for the sample's.

    Returns:
        "train", "dev", "test", or None when the standard split does not use the section.
    """
    if file_id in _SPLITS:
        return file_id
    section, number = (int(part) for part in _FILE_ID.match(file_id).groups())
    if standard:
        return next((s for s, sections in STANDARD_SECTIONS.items() if section in sections), None)
    index = section * 100 + number
    return next((s for s, files in SAMPLE_FILES.items() if index in files), TRAIN)


class TreebankCorpus:
    """Treebank files read as (words, linearized tree) text pairs, split by file id.

    `leaves` and `order` are `trees.linearize`'s: what stands for each word, and whether each
    constituent's opening token comes before it (top-down) or after its first child.

    Offers what `TranslateProblem.generate_data` needs of a corpus: `splits`, `identity()`,
    `describe(split)` and `pairs(split)`, whose items are (tree file, tree number from 1,
    words, linearized tree). A tree left without words by preprocessing gives an empty pair,
    which datagen skips and counts.
    """

    def __init__(self, raw_dir: str, leaves: str = "word", order: str = "top_down"):
        self.raw_dir = raw_dir
        self.leaves = leaves
        if self.leaves not in trees.LEAVES:
            raise ValueError(f"leaves must be one of {trees.LEAVES}, got {self.leaves!r}")
        if order not in trees.ORDERS:
            raise ValueError(f"order must be one of {trees.ORDERS}, got {order!r}")
        self.order = order
        self.keep_pos = self.leaves == "tag"
        self.splits = _SPLITS
        self.tree_files = find_tree_files(raw_dir)
        located = []  # (path, tree number, file id, tree)
        for path in self.tree_files:
            try:
                parsed = trees.read_trees(path)
            except (ValueError, UnicodeDecodeError) as error:
                raise DataError(f"{path}: {error}") from None
            ids = _file_ids(path, len(parsed))
            located += [(path, n, i, t) for n, (i, t) in enumerate(zip(ids, parsed), 1)]
        self.standard = any(
            file_id not in _SPLITS and int(_FILE_ID.match(file_id).group(1)) in range(2, 22)
            for _, _, file_id, _ in located
        )
        self._trees = {split: [] for split in _SPLITS}
        unused = 0
        for path, number, file_id, tree in located:
            split = split_of(file_id, self.standard)
            if split is None:
                unused += 1
            else:
                self._trees[split].append((path, number, tree))
        if unused:
            logging.info("%s: %d trees outside sections 02-23 are not used", raw_dir, unused)
        empty = [split for split in _SPLITS if not self._trees[split]]
        if empty:
            raise DataError(
                f"{raw_dir}: no trees for split(s) {', '.join(empty)} under the "
                f"{self.split_name} split ({self._counts()}); {_LAYOUT_HINT}"
            )

    @property
    def split_name(self) -> str:
        """The split rule in use: "standard" (sections 02-21 / 22 / 23) or "sample"."""
        return "standard" if self.standard else "sample"

    def _counts(self) -> str:
        return ", ".join(f"{split} {len(self._trees[split])}" for split in _SPLITS)

    def identity(self) -> dict:
        """What the data fingerprint covers: file contents and how examples are made."""
        files = [*self.tree_files]
        files += [p for p in {_stem(f) + FILEIDS_SUFFIX for f in files} if os.path.exists(p)]
        return {
            "files": sorted(
                [os.path.relpath(p, self.raw_dir), file_digest(p)[1]] for p in set(files)
            ),
            "split": self.split_name,
            "keep_pos": self.keep_pos,
            "leaves": self.leaves,
            "example_format": _EXAMPLE_FORMAT,
            # Only when not the original top-down form, so that its data keeps its identity.
            **({"order": self.order} if self.order != "top_down" else {}),
        }

    def describe(self, split: str) -> str:
        return f"{self.raw_dir} ({self.split_name} split, {split}: {len(self._trees[split])} trees)"

    def gold_trees(self, split: str, raw: bool = False) -> list:
        """The preprocessed trees of `split` in file order, one line each, as in its examples.

        Trees left without words (skipped by datagen) are left out here too. `raw=True` gives
        the same trees as the files hold them (outer bracket, empty elements, function tags).
        """
        found = []
        for _, _, tree in self._trees[split]:
            try:
                preprocessed = trees.preprocess(tree)
            except ValueError:
                continue
            found.append(trees.to_string(tree if raw else preprocessed))
        return found

    def pairs(self, split: str):
        """Yields (tree file, tree number, words, linearized tree) of `split` in file order."""
        for path, number, tree in self._trees[split]:
            try:
                tree = trees.preprocess(tree)
            except ValueError:
                yield path, number, "", ""
                continue
            yield (
                path,
                number,
                " ".join(trees.words(tree)),
                " ".join(trees.linearize(tree, leaves=self.leaves, order=self.order)),
            )
