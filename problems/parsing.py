"""English constituency parsing on the Wall Street Journal part of the Penn Treebank.

The problem of section 6.3 of the paper, in the form of Vinyals et al. (2015), "Grammar as a
Foreign Language": inputs are the words of a sentence, targets its linearized tree
(`problems/trees.py`), top-down, with the words themselves as leaves: for
"(S (NP (NNP John)) (VP (VBZ sleeps)) (. .))"

    inputs:  John sleeps .
    targets: (S (NP John )NP (VP sleeps )VP . )S

(`leaves = "placeholder"` gives Vinyals et al.'s `(S (NP XX )NP (VP XX )VP XX )S`.) The model
predicts brackets, not POS tags: scoring puts the gold tags back (see `WsjParsing.score`).
Trees are preprocessed first: the outer bracket, `-NONE-` empty elements, the constituents they
leave empty, function tags and indices are removed. Both sides share one SentencePiece
vocabulary built by `TranslateProblem`'s datagen (~16k for the full WSJ, as the paper's
WSJ-only setting; pass `vocab_size` for less data), in which every bracket token of the
training trees is one piece (`vocab_symbols`).

Decoding: beam search admits only well-formed trees whose leaves are exactly the input's words
(`search_constraint`, `TreeConstraint`), so no output needs repair; `postprocess` still
repairs any text (an unconstrained search's output, say) into such a tree.

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

Decoding defaults are the paper's: beam 21, alpha 0.3, maximum length input + 300.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence

import tensorflow as tf

from t2t_lite.decoding.constraints import BracketConstraint
from t2t_lite.problems import trees
from t2t_lite.problems.corpus import DataError, file_digest
from t2t_lite.problems.problem import EOS_ID, EVAL, TEST, TRAIN
from t2t_lite.problems.translate import TranslateProblem
from t2t_lite.problems.vocab import SPACE_MARK

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

    Offers what `TranslateProblem.generate_data` needs of a corpus: `splits`, `identity()`,
    `describe(split)` and `pairs(split)`, whose items are (tree file, tree number from 1,
    words, linearized tree). A tree left without words by preprocessing gives an empty pair,
    which datagen skips and counts.
    """

    def __init__(self, raw_dir: str, leaves: str = "word"):
        self.raw_dir = raw_dir
        self.leaves = leaves
        if self.leaves not in trees.LEAVES:
            raise ValueError(f"leaves must be one of {trees.LEAVES}, got {self.leaves!r}")
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
        }

    def describe(self, split: str) -> str:
        return f"{self.raw_dir} ({self.split_name} split, {split}: {len(self._trees[split])} trees)"

    def gold_trees(self, split: str) -> list:
        """The preprocessed trees of `split` in file order, one line each, as in its examples.

        Trees left without words (skipped by datagen) are left out here too.
        """
        found = []
        for _, _, tree in self._trees[split]:
            try:
                found.append(trees.to_string(trees.preprocess(tree)))
            except ValueError:
                continue
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
                " ".join(trees.linearize(tree, leaves=self.leaves)),
            )


class WsjParsing(TranslateProblem):
    """`wsj_parsing`: words -> linearized tree, WSJ split by file id, scored by EVALB F1."""

    name = "wsj_parsing"
    source_language = "words"  # recorded in the metadata; there are no language files
    target_language = "tree"
    vocab_size = 16_000
    num_shards = {TRAIN: 8}
    # What stands for each word in the targets (`trees.linearize`): the words themselves, so
    # that the decoder sees which word it has reached; "placeholder" is Vinyals et al.'s `XX`.
    leaves = "word"
    # The most opening brackets in a row that decoding admits. The sample's 3,396 training
    # trees have at most 6; without a bound, a model unsure of the next word can prefer
    # opening brackets to it until the length limit (long unary chains).
    max_open_run = 8
    # Section 6.3: beam 21, alpha 0.3, maximum output length input + 300.
    beam_size = 21
    alpha = 0.3
    extra_decode_length = 300
    eval_metric = "parse_f1"

    def corpus(self, data_dir: str, raw_dir: str | None, source: str) -> TreebankCorpus:
        """The treebank under `raw_dir` (default `DATA_DIR/wsj_parsing/raw`)."""
        if source not in ("auto", "raw"):
            raise ValueError(f"problem {self.name} reads treebank files only; got {source=}")
        return TreebankCorpus(
            raw_dir or os.path.join(self.folder(data_dir), "raw"), leaves=self.leaves
        )

    def vocab_symbols(self, corpus: TreebankCorpus) -> list:
        """Every bracket token of the training trees (and `XX`), each one vocabulary id.

        Each symbol carries SentencePiece's space mark (`▁(NP`), as it follows a space in the
        target text, so a target is one id per bracket and the words' pieces are exactly
        those of the input. Brackets cannot occur inside PTB words, which write them -LRB-.
        """
        symbols = {trees.POS_PLACEHOLDER} if self.leaves == "placeholder" else set()
        for _, _, _, target in corpus.pairs(TRAIN):
            symbols |= trees.bracket_symbols(target.split())
        return [SPACE_MARK + symbol for symbol in sorted(symbols)]

    def target_non_copy_ids(self, data_dir: str) -> list | None:
        """The bracket ids, when the targets' leaves are the input's pieces (`leaves="word"`)."""
        if self.leaves != "word":
            return None
        pieces = self.encoders(data_dir)["targets"].pieces()
        return [i for i, piece in enumerate(pieces) if _is_bracket_piece(piece)]

    def search_constraint(self, data_dir: str) -> TreeConstraint:
        """Beam search outputs only well-formed trees over the input's words."""
        pieces = self.encoders(data_dir)["targets"].pieces()
        return TreeConstraint(pieces, self.leaves, self.max_open_run)

    def postprocess(
        self, output_text: str, input_text: str, tags: Sequence[str] | None = None
    ) -> str:
        """The tree, on one line, that a decoded target text gives over the input's words.

        Repairs malformed output (`trees.delinearize`), so the result is always a valid tree
        whose leaves are exactly the input words.

        Args:
            output_text: the decoded targets, e.g. "(S (NP XX )NP (VP XX XX )VP )S".
            input_text: the sentence as the model read it (words separated by spaces).
            tags: one POS tag per word to put on the leaves. None keeps the output's tags
                when the problem predicts them (`keep_pos`), and otherwise gives every leaf
                the placeholder `XX`, whatever token the output put in its place.

        Returns:
            The bracketed tree, or "" (a parse failure for EVALB) for an empty input.
        """
        words = input_text.split()
        if not words:
            return ""
        if tags is None and self.leaves != "tag":
            tags = [trees.POS_PLACEHOLDER] * len(words)
        return trees.to_string(trees.delinearize(output_text.split(), words, tags=tags))

    def reference_trees(self, split: str, data_dir: str, raw_dir: str | None = None) -> list:
        """The gold trees of `split` (dev and test examples follow their order), one per line."""
        return self.corpus(data_dir, raw_dir, "raw").gold_trees(split)

    def read_references(self, path: str | os.PathLike) -> list:
        """The preprocessed trees of a gold file (`.mrg` or one per line), one line each."""
        return [trees.to_string(trees.preprocess(t)) for t in trees.read_trees(path)]

    def check_references(self, references: Sequence[str], source: str) -> None:
        """Raises a ValueError "SOURCE line N: ..." at the first line that is not one gold tree.

        Empty lines pass (EVALB skips them). `score` reads the same trees the same way.
        """
        for number, text in enumerate(references, 1):
            if not text.strip():
                continue
            where = f"{source} line {number}"
            try:
                _preprocessed(text, where)
            except ValueError as error:
                # One tree per line: the parser's tree and line numbers say nothing more.
                message = str(error).replace(f"{where}, tree 1, line 1:", f"{where}:")
                raise ValueError(message) from None

    def with_gold_tags(self, hypotheses: Sequence[str], references: Sequence[str]) -> list:
        """`hypotheses` (trees) with placeholder tags replaced by the aligned gold trees' tags.

        What `score` does before scoring, so that the trees it scores can be written out
        and rescored by EVALB itself; a tree whose words differ from its gold tree's is
        kept as it is.
        """
        return [
            _with_gold_tags(
                hypothesis, _gold_tree(reference, number) if reference.strip() else None, number
            )
            for number, (hypothesis, reference) in enumerate(zip(hypotheses, references), 1)
        ]

    def reference_inputs(self, references: Sequence[str]) -> list:
        """The input text (preprocessed words) of each gold tree; "" for an empty line."""
        return [
            " ".join(trees.words(_gold_tree(text, n))) if text.strip() else ""
            for n, text in enumerate(references, 1)
        ]

    def score(self, hypotheses: Sequence[str], references: Sequence[str], params=None) -> dict:
        """EVALB scores of hypothesis trees against gold trees (COLLINS.prm by default).

        Gold trees are preprocessed (raw PTB lines are fine). A hypothesis leaf tagged with the
        placeholder `XX` takes the gold tag of its word when the hypothesis and gold words are
        the same: COLLINS.prm deletes punctuation by its tag, and this is the usual convention
        for tag-less parsers. Tagging accuracy then only measures tags the model predicted.

        Args:
            hypotheses: one bracketed tree per sentence (`postprocess` output); "" for a
                parse failure, which EVALB skips.
            references: the gold trees, aligned with `hypotheses`.
            params: an `EvalbParams` (`t2t_lite.metrics.evalb.load_params(path)`); COLLINS.

        Returns:
            {"f1", "precision", "recall", "complete_match", "average_crossing",
            "tagging_accuracy"} in percent (crossings per sentence) over valid sentences,
            "cutoff_f1" over those of at most "cutoff_len" words, and the counts
            "sentences", "valid", "errors", "skipped", "stopped_early".

        Raises:
            ValueError: when the lists differ in length or a tree is malformed, naming it.
        """
        from t2t_lite.metrics import evalb

        if len(hypotheses) != len(references):
            raise ValueError(
                f"{len(hypotheses)} hypotheses but {len(references)} reference trees; "
                "pass one hypothesis per gold tree, in order"
            )
        gold_lines, test_lines = [], []
        for number, (hypothesis, reference) in enumerate(zip(hypotheses, references), 1):
            gold = _gold_tree(reference, number) if reference.strip() else None
            gold_lines.append(trees.to_string(gold) if gold else "")
            test_lines.append(_with_gold_tags(hypothesis, gold, number))
        result = evalb.evalb_score(
            gold_lines, test_lines, params or evalb.COLLINS, sources=("reference", "hypothesis")
        )
        summary = result.all
        return {
            "f1": result.f1,
            "precision": summary.precision,
            "recall": summary.recall,
            "complete_match": summary.complete_match,
            "average_crossing": summary.average_crossing,
            "tagging_accuracy": summary.tagging_accuracy,
            "cutoff_f1": _f1(result.cutoff),
            "cutoff_len": result.cutoff_len,
            "sentences": summary.sentences,
            "valid": summary.valid,
            "errors": summary.errors,
            "skipped": summary.skips,
            "stopped_early": result.stopped_early,
        }


class TreeConstraint:
    """Builds the search's `BracketConstraint` for a batch of encoded sentences.

    The vocabulary's bracket pieces (`▁(NP`, `▁)NP`) open and close constituents. With
    lexicalized targets (`leaves="word"`) the leaves are the input's own pieces, copied in
    order, and brackets stand only before a piece that starts a word (`▁...`); with
    placeholder targets every word is one `XX`. Either way each decoded output is a tree
    whose leaves are exactly the input's words.

    Args:
        pieces: the SentencePiece piece of every id of the target vocabulary.
        leaves: the problem's `leaves` ("word", "placeholder" or "tag").
        max_open_run: the most opening brackets in a row, or None.
    """

    def __init__(self, pieces: Sequence[str], leaves: str, max_open_run: int | None = None):
        if leaves == "tag":
            raise ValueError("a tree constraint needs targets with words or XX as leaves")
        labels, open_labels, close_labels = {}, [], []
        for piece in pieces:
            symbol = piece[1:]
            bracket = _is_bracket_piece(piece)
            label = labels.setdefault(symbol[1:], len(labels)) if bracket else -1
            open_labels.append(label if bracket and symbol[0] == "(" else -1)
            close_labels.append(label if bracket and symbol[0] == ")" else -1)
        if not any(label >= 0 for label in open_labels):
            raise ValueError("the target vocabulary has no bracket pieces; rerun datagen")
        self.open_labels, self.close_labels = open_labels, close_labels
        self.word_start = [piece.startswith(SPACE_MARK) for piece in pieces]
        self.leaves = leaves
        self.max_open_run = max_open_run
        self.placeholder_id = None
        if leaves == "placeholder":
            self.placeholder_id = pieces.index(SPACE_MARK + trees.POS_PLACEHOLDER)

    def __call__(self, inputs, max_lengths):
        """`BracketConstraint` for ids [B, S] (EOS-terminated, 0-padded) and row limits [B]."""
        inputs = tf.cast(inputs, tf.int32)
        pieces = tf.where(inputs > EOS_ID, inputs, 0)  # the words' pieces, EOS dropped
        starts = tf.logical_and(tf.gather(tf.constant(self.word_start), pieces), pieces > 0)
        if self.leaves == "word":
            leaves, boundary = pieces, starts
            count = tf.reduce_sum(tf.cast(pieces > 0, tf.int32), axis=1)
        else:
            leaves = tf.fill(tf.shape(inputs), self.placeholder_id)
            boundary = tf.ones_like(starts)
            count = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
        return BracketConstraint(
            leaves, count, boundary, max_lengths, self.open_labels, self.close_labels, EOS_ID,
            max_open_run=self.max_open_run,
        )  # fmt: skip


def _is_bracket_piece(piece: str) -> bool:
    """True for a bracket symbol of `vocab_symbols`: `▁(NP`, `▁)NP`."""
    return piece.startswith(SPACE_MARK) and piece[1:2] in ("(", ")") and len(piece) > 2


def _f1(summary) -> float:
    total = summary.precision + summary.recall
    return 2 * summary.precision * summary.recall / total if total else 0.0


def _gold_tree(text: str, number: int) -> trees.Tree:
    return _preprocessed(text, f"reference tree {number}")


def _preprocessed(text: str, source: str) -> trees.Tree:
    """The one tree of `text`, preprocessed; ValueError naming `source` if malformed."""
    tree = trees.parse_tree(text, source=source)
    try:
        return trees.preprocess(tree)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def _with_gold_tags(hypothesis: str, gold: trees.Tree | None, number: int) -> str:
    """`hypothesis` with its placeholder tags replaced by `gold`'s when the words agree."""
    if not hypothesis.strip():
        return ""
    tree = _preprocessed(hypothesis, f"hypothesis {number}")
    tagged = trees.tagged_words(tree)
    if gold is None or [word for word, _ in tagged] != trees.words(gold):
        return trees.to_string(tree)
    merged = [
        gold_tag if tag == trees.POS_PLACEHOLDER else tag
        for (_, tag), gold_tag in zip(tagged, trees.tags(gold))
    ]
    if tree.is_preterminal:
        return trees.to_string(trees.preterminal(merged[0], tagged[0][0]))
    tokens = trees.linearize(tree, keep_pos=True)
    return trees.to_string(trees.delinearize(tokens, [w for w, _ in tagged], tags=merged))


__all__ = ["TreebankCorpus", "WsjParsing", "find_tree_files", "split_of"]
