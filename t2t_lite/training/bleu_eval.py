"""BLEU during training: decode a bounded dev subset at every evaluation and log sacreBLEU.

The trainer creates one `BleuEvaluator` (for problems whose `eval_metric` is "bleu") and
calls `log_bleu` from its evaluation branch. The evaluator decodes the first `sentences`
dev examples with the same `Translator` as the decoder command (beam search with the
problem's beam size and alpha, or greedy decoding, which is faster), detokenizes the best
hypotheses and scores them with sacreBLEU's corpus BLEU on text, never on subword ids.
TensorBoard gets the scalar `eval/bleu`, the text summary `eval/samples` (source,
reference and hypothesis of the first few sentences) and the text summary
`eval/bleu_table`: every BLEU of this process so far as a table, readable from the first
evaluation on, where a chart of one or two points shows little.

The references (and the sources shown in the samples) are the dev examples decoded by the
problem's vocabulary, so that BLEU needs only the data folder, not the raw corpus. For the
translation problems they are the raw dev lines exactly, character for character:

- datagen writes the dev pairs in file order, skipping only pairs with an empty side
  (counted in metadata.json as `skipped_empty`), so example k is the k-th non-empty pair;
- lines are read with only their line ending removed (no stripping, no other cleaning);
- the SentencePiece vocabulary normalizes nothing (rule "identity", whitespace kept) and
  encodes U+2581 as byte pieces, so `decode(encode(text)) == text` for every string
  (`problems/vocab.py`), and bytes outside the learned pieces fall back to byte pieces.

tests/test_decoder.py checks this equality on the evaluated subset of Multi30k's dev
split, and that the logged BLEU equals sacreBLEU against the raw reference file. Only if a
dev pair had an empty side would the k-th example and the k-th file line differ; the BLEU
is then still that of the evaluated pairs, against their own reference text.
"""

from __future__ import annotations

import logging
import time

import tensorflow as tf

from t2t_lite.metrics import sacrebleu_corpus
from t2t_lite.problems import pipeline
from t2t_lite.search import (
    SearchConfig,
    Translator,
    length_batches,
    pad_batch,
    strip_ids,
    without_eos,
)

_MARKDOWN_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]<>#|"})


class BleuEvaluator:
    """Decodes the first `sentences` dev examples of a problem and scores them.

    Args:
        model: the Transformer being trained.
        problem: the problem (its `eval_metric` should be "bleu").
        data_dir: the data folder.
        sentences: dev examples to decode (the first ones, in corpus order).
        method: "beam" (the problem's beam size and alpha) or "greedy".
        num_samples: sentences shown as text summaries.
        batch_size: sentences per decoding batch.
    """

    def __init__(
        self,
        model,
        problem,
        data_dir: str,
        sentences: int,
        method: str = "beam",
        num_samples: int = 3,
        batch_size: int = 32,
    ):
        if sentences < 1:
            raise ValueError(f"eval_bleu_sentences must be >= 1, got {sentences}")
        encoders = problem.encoders(data_dir)
        self.target_encoder = encoders["targets"]
        self.method = method
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.inputs, targets = [], []
        try:
            for example in problem.examples("dev", data_dir).take(sentences).as_numpy_iterator():
                self.inputs.append(without_eos(example["inputs"]))
                targets.append(without_eos(example["targets"]))
        except tf.errors.DataLossError as error:  # a damaged shard: name it
            raise pipeline.read_error(problem, "dev", data_dir, error) from None
        if not self.inputs:
            raise ValueError(f"problem {problem.name} has no dev examples to compute BLEU on")
        self.sources = [encoders["inputs"].decode(ids) for ids in self.inputs]
        self.references = [self.target_encoder.decode(ids) for ids in targets]
        self.config = SearchConfig.for_problem(problem, method=method)
        self._truncate_inputs(problem, model.max_position)
        self.translator = Translator(
            model, self.config, constraint=problem.search_constraint(data_dir)
        )
        self.history = []  # (step, BLEU) of every evaluation so far

    def _truncate_inputs(self, problem, max_position: int) -> None:
        """Keeps the first tokens of inputs too long for the model's positions.

        As the decoder command does: the output positions run to input + extra_length, so
        a longer input is decoded from its first tokens, and its full reference still
        counts in the BLEU (the score stays one over all the sentences).
        """
        keep = max(max_position - self.config.extra_length - 1, 1)  # 1 for EOS
        longer = sum(len(ids) > keep for ids in self.inputs)
        if longer:
            logging.warning(
                "problem %s: BLEU decodes only the first %d tokens of %d of its %d dev "
                "sentences, longer than max_position %d less extra_length %d and EOS allow",
                problem.name, keep, longer, len(self.inputs), max_position,
                self.config.extra_length,
            )  # fmt: skip
            self.inputs = [ids[:keep] for ids in self.inputs]

    def describe(self) -> str:
        return f"{len(self.inputs)} dev sentences, {self.config.describe()}"

    def batches(self) -> list:
        """Indices of the dev sentences searched together: by length, outliers alone."""
        lengths = [len(ids) for ids in self.inputs]
        return length_batches(lengths, self.batch_size, self.config.extra_length)

    def hypotheses(self) -> list:
        """The detokenized best hypothesis of every dev sentence, in corpus order."""
        outputs = [""] * len(self.inputs)
        for batch in self.batches():
            ids, _ = self.translator.search(pad_batch([self.inputs[i] for i in batch]))
            best = ids.numpy()[:, 0, :]  # [B, L]
            for row, index in enumerate(batch):
                outputs[index] = self.target_encoder.decode(strip_ids(best[row]))
        return outputs

    def evaluate(self) -> dict:
        """Returns {"bleu", "signature", "hypotheses", "seconds"}."""
        start = time.monotonic()
        hypotheses = self.hypotheses()
        result = sacrebleu_corpus(hypotheses, self.references)
        return {
            "bleu": result.score,
            "signature": result.signature,
            "hypotheses": hypotheses,
            "seconds": time.monotonic() - start,
        }

    def samples(self, hypotheses: list) -> list:
        """Markdown (source, reference, hypothesis) of the first `num_samples` sentences."""
        return [
            f"**source:** {_escape(source)}  \n**reference:** {_escape(reference)}  \n"
            f"**hypothesis:** {_escape(hypothesis)}"
            for source, reference, hypothesis in list(
                zip(self.sources, self.references, hypotheses)
            )[: self.num_samples]
        ]


def make_bleu_evaluator(
    model, problem, data_dir: str, sentences: int, method: str
) -> BleuEvaluator | None:
    """A `BleuEvaluator`, or None when `sentences` is 0 or the problem is not scored by BLEU."""
    if sentences <= 0 or problem.eval_metric != "bleu":
        return None
    return BleuEvaluator(model, problem, data_dir, sentences, method)


def log_bleu(evaluator: BleuEvaluator | None, writer, step: int, printer=print) -> dict:
    """Decodes, prints and writes `eval/bleu`, `eval/bleu_table` and `eval/samples` at `step`.

    Returns:
        {"bleu": score} to merge into the evaluation metrics ({} without an evaluator).
    """
    if evaluator is None:
        return {}
    result = evaluator.evaluate()
    printer(
        f"eval step {step}: BLEU {result['bleu']:.2f} (sacreBLEU, detokenized; "
        f"{evaluator.describe()}; {result['seconds']:.1f}s) [{result['signature']}]"
    )
    evaluator.history.append((step, result["bleu"]))
    with writer.as_default(step=step):
        tf.summary.scalar("eval/bleu", result["bleu"], description=evaluator.describe())
        tf.summary.text("eval/bleu_table", bleu_table(evaluator.history, evaluator.describe()))
        tf.summary.text("eval/samples", tf.constant(evaluator.samples(result["hypotheses"])))
    writer.flush()
    return {"bleu": result["bleu"]}


def bleu_table(history: list, description: str) -> str:
    """Markdown: one row per (step, BLEU) of `history`, under what was decoded."""
    rows = "".join(f"| {step:,} | {bleu:.2f} |\n" for step, bleu in history)
    return f"sacreBLEU on {_escape(description)}\n\n| step | BLEU |\n|---:|---:|\n{rows}"


def _escape(text: str) -> str:
    return text.translate(_MARKDOWN_SPECIAL) if text else "(empty)"
