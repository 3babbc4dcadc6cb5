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

Decoding defaults are the paper's: beam 21, alpha 0.3, maximum length input + 300. The
treebank files it reads and how they are split: `problems/treebank.py`.

Penn Treebank form (`ptb_output = True`, the decoder's `--ptb_output`): every tree is written
inside the label-less outer bracket, `( (S ...) )`, as PTB files have it, and `score` scores
the reference trees as they are (outer bracket, empty elements, function tags and all) against
the trees in that form, as the EVALB program run on the two files does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from t2t_lite.problems import trees
from t2t_lite.problems.problem import TRAIN
from t2t_lite.problems.translate import TranslateProblem
from t2t_lite.problems.tree_constraint import TreeConstraint, is_bracket_piece
from t2t_lite.problems.treebank import TreebankCorpus, find_tree_files, split_of
from t2t_lite.problems.vocab import SPACE_MARK


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
    # Where each constituent's opening token stands (`trees.linearize`): before it.
    order = "top_down"
    # The most opening brackets in a row that decoding admits. The sample's 3,396 training
    # trees have at most 6; without a bound, a model unsure of the next word can prefer
    # opening brackets to it until the length limit (long unary chains).
    max_open_run = 8
    # Section 6.3: beam 21, alpha 0.3, maximum output length input + 300.
    beam_size = 21
    alpha = 0.3
    extra_decode_length = 300
    eval_metric = "parse_f1"
    # Trees in Penn Treebank form, inside the label-less outer bracket `( (S ...) )` of PTB
    # files (the decoder's --ptb_output). EVALB counts that bracket like any other, so that a
    # parse file in this form scores against PTB gold files as the gold trees do.
    ptb_output = False
    output_format = "linearized_tree"  # the server's page draws each output as a tree

    def corpus(self, data_dir: str, raw_dir: str | None, source: str) -> TreebankCorpus:
        """The treebank under `raw_dir` (default `DATA_DIR/wsj_parsing/raw`)."""
        if source not in ("auto", "raw"):
            raise ValueError(f"problem {self.name} reads treebank files only; got {source=}")
        return TreebankCorpus(
            raw_dir or os.path.join(self.folder(data_dir), "raw"),
            leaves=self.leaves,
            order=self.order,
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
        return [i for i, piece in enumerate(pieces) if is_bracket_piece(piece)]

    def search_constraint(self, data_dir: str) -> TreeConstraint:
        """Beam search outputs only well-formed trees over the input's words."""
        pieces = self.encoders(data_dir)["targets"].pieces()
        return TreeConstraint(pieces, self.leaves, self.max_open_run, self.order)

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
        tree = trees.delinearize(output_text.split(), words, tags=tags, order=self.order)
        return trees.to_string(tree)

    def outputs(
        self, hypotheses: Sequence[str], input_text: str, reference: str | None = None
    ) -> list:
        """Trees over the input's words: `postprocess` of each hypothesis.

        The leaves carry the placeholder tag `XX`, or the gold tags of `reference` when
        given (the trees `score` scores, so EVALB run on the written file gives the same
        figures). An empty input line stays empty, and so does a beam slot no hypothesis
        filled.
        """
        parsed = [
            self.postprocess(hypothesis, input_text)
            if input_text.strip() and (hypothesis or rank == 0)
            else ""
            for rank, hypothesis in enumerate(hypotheses)
        ]
        if reference is not None:
            parsed = self.with_gold_tags(parsed, [reference] * len(parsed))
        return [_ptb_form(tree) for tree in parsed] if self.ptb_output else parsed

    def reference_trees(
        self, split: str, data_dir: str, raw_dir: str | None = None, raw: bool = False
    ) -> list:
        """The gold trees of `split` (dev and test examples follow their order), one per line:
        preprocessed, or with `raw=True` as the treebank files write them."""
        return self.corpus(data_dir, raw_dir, "raw").gold_trees(split, raw=raw)

    def read_references(self, path: str | os.PathLike) -> list:
        """The preprocessed trees of a gold file (`.mrg` or one per line), one line each."""
        return [trees.to_string(trees.preprocess(t)) for t in trees.read_trees(path)]

    def check_references(self, references: Sequence[str], source: str) -> None:
        """Raises a ValueError "SOURCE line N: ..." at the first line that is not one gold tree.

        Empty lines pass (EVALB skips them). `score` reads the same trees the same way.
        """
        hint = "; the reference file must hold one gold tree (PTB brackets) per line"
        for number, text in enumerate(references, 1):
            if not text.strip():
                continue
            where = f"{source} line {number}"
            try:
                _preprocessed(text, where)
            except ValueError as error:
                # One tree per line: the parser's tree and line numbers say nothing more.
                message = str(error).replace(f"{where}, tree 1, line 1:", f"{where}:")
                raise ValueError(message + hint) from None

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

        Gold trees are preprocessed (raw PTB lines are fine), or with `ptb_output` scored as
        they are against the hypotheses in PTB form (see the module docstring). A hypothesis leaf tagged with the
        placeholder `XX` takes the gold tag of its word when the hypothesis and gold words are
        the same: COLLINS.prm deletes punctuation by its tag, and this is the usual convention
        for tag-less parsers. Tagging accuracy then only measures tags the model predicted.

        Args:
            hypotheses: one bracketed tree per sentence (`postprocess` output); "" for a
                parse failure, which EVALB skips.
            references: the gold trees, aligned with `hypotheses`.
            params: an `EvalbParams` (`t2t_lite.metrics.evalb.load_params(path)`); COLLINS.

        Returns:
            {"metric": "parse_f1", "f1", "precision", "recall", "complete_match", "average_crossing",
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
            tagged = _with_gold_tags(hypothesis, gold, number)
            if self.ptb_output:  # both sides as the files have them, as EVALB reads them
                gold_lines.append(reference if gold else "")
                test_lines.append(_ptb_form(tagged))
            else:
                gold_lines.append(trees.to_string(gold) if gold else "")
                test_lines.append(tagged)
        result = evalb.evalb_score(
            gold_lines, test_lines, params or evalb.COLLINS, sources=("reference", "hypothesis")
        )
        summary = result.all
        return {
            "metric": "parse_f1",
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

    def format_scores(self, report: dict) -> list:
        return [
            f"EVALB bracketing F1 (COLLINS.prm): {report['f1']:.2f} (precision "
            f"{report['precision']:.2f}, recall {report['recall']:.2f}, "
            f"{report['valid']}/{report['sentences']} sentences scored)"
        ]


class WsjParsingInOrder(WsjParsing):
    """`wsj_parsing_in_order`: `wsj_parsing` with in-order targets (`trees.linearize`).

    Each constituent's opening token follows its first child (Liu & Zhang 2017;
    Fernandez-Gonzalez & Gomez-Rodriguez 2020 for sequence-to-sequence parsers), so the
    label is chosen once the constituent's first part has been read: "John sleeps ." ->
    `John (NP )NP (S sleeps (VP )VP . )S`. The same vocabulary symbols, search and scores;
    the search admits in-order trees only (`InOrderBracketConstraint`).
    """

    name = "wsj_parsing_in_order"
    order = "in_order"
    output_format = "in_order_tree"  # the server's page shows such outputs as text


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


def _ptb_form(tree: str) -> str:
    """A one-line tree inside PTB's label-less outer bracket: `(S ...)` -> `( (S ...) )`."""
    return f"( {tree} )" if tree.strip() else tree


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


__all__ = ["TreebankCorpus", "WsjParsing", "WsjParsingInOrder", "find_tree_files", "split_of"]
