"""The attention images written at every evaluation of a training run.

`eval/attention/encoder_decoder_last_layer` and `eval/attention/encoder_decoder_layers` show
the encoder-decoder attention (averaged over heads) of the first dev example, teacher-forced
on its reference, so the same sentence on the same axes is seen at every step
(`t2t_lite.models.attention_maps`): one eager forward pass of one sentence, outside the
training step.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.ids import EOS_ID
from t2t_lite.models import attention_maps
from t2t_lite.problems import pipeline
from t2t_lite.search import without_eos

# The images show at most this many tokens of each side of the dev example, so that every
# label stays readable.
ATTENTION_TOKENS = 40


def attention_example(problem, data_dir: str, max_position: int) -> dict | None:
    """The first dev example for the attention images: ids and labels, or None without one.

    Returns:
        {"source_ids", "target_ids"}: token ids without EOS, each cut to ATTENTION_TOKENS;
        {"source_labels", "target_labels"}: the pieces of those ids and EOS.
    """
    try:
        example = next(problem.examples("dev", data_dir).take(1).as_numpy_iterator(), None)
    except tf.errors.DataLossError as error:
        raise pipeline.read_error(problem, "dev", data_dir, error) from None
    if example is None or "targets" not in example:
        return None
    keep = min(ATTENTION_TOKENS, max_position - 1)  # 1 for EOS
    encoders = problem.encoders(data_dir)
    found = {}
    for side, feature in (("source", "inputs"), ("target", "targets")):
        ids = without_eos(example[feature])[:keep]
        found[f"{side}_ids"] = ids
        found[f"{side}_labels"] = attention_maps.token_labels(encoders[feature], ids + [EOS_ID])
    return found


def write_attention_images(model, example: dict | None, writer, step: int, printer) -> None:
    """Writes the eval/attention/... images of `example` (`attention_example`) at `step`."""
    if example is None:
        return
    try:
        attention = attention_maps.sentence_attention(
            model, example["source_ids"], example["target_ids"]
        )
        figures = attention_maps.summary_figures(
            attention, example["source_labels"], example["target_labels"]
        )
        images = {name: attention_maps.figure_pixels(f) for name, f in figures.items()}
    except Exception as error:  # noqa: BLE001 - a picture must not end a training run
        printer(f"eval step {step}: no attention image ({type(error).__name__}: {error})")
        return
    with writer.as_default(step=step):
        for name, pixels in images.items():
            tf.summary.image(
                f"eval/attention/{name}",
                pixels[None],
                description="First dev example, teacher-forced on its reference: rows are "
                "the target pieces predicted, columns the source pieces.",
            )
    writer.flush()
