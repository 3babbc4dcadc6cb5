"""Label-smoothed cross-entropy summed over non-padding target tokens.

The trainer divides the sums by the number of non-padding target tokens of the whole
global batch (all replicas and accumulated micro-batches), so every token weighs the
same whatever the batch's split across devices.
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.kernels import CPU, KERAS, cross_entropy
from t2t_lite.kernels.cross_entropy import COMPILED_MIN_VOCAB

__all__ = ["COMPILED_MIN_VOCAB", "cross_entropy_sums", "token_statistics"]


def cross_entropy_sums(
    logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float, kernels: str = KERAS
) -> tuple:
    """Label-smoothed cross-entropy and negative log-likelihood, summed over tokens.

    With K = vocab size and eps = `label_smoothing`, the target distribution is
    q'(k) = (1 - eps) * [k = label] + eps / K (Szegedy et al., 2016, as cited in
    section 5.4), and the token loss is the cross-entropy H(q', p).

    Args:
        logits: float32 [B, T, V] scores.
        labels: int32 [B, T] target ids, 0 = padding.
        label_smoothing: eps in [0, 1).
        kernels: "keras" differentiates the formula; "cpu" uses
            `t2t_lite.kernels.cross_entropy` (XLA programs, compiled once per [B, T, V]
            shape) when V >= `COMPILED_MIN_VOCAB`: worth it in training, where each
            bucket's shape recurs for the whole run, not in an evaluation pass, which
            meets many shapes a few times each.

    Returns:
        (smoothed cross-entropy sum, negative log-likelihood sum), float32 scalars;
        only the first has a gradient.
    """
    if kernels == CPU and cross_entropy.applies(logits):
        return cross_entropy.cross_entropy_sums(logits, labels, label_smoothing)
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)  # [B, T]
    log_probs = tf.nn.log_softmax(logits, axis=-1)  # [B, T, V]
    nll = -tf.gather(log_probs, labels, axis=-1, batch_dims=2)  # -log p(label)
    uniform = -tf.reduce_mean(log_probs, axis=-1)  # -mean_k log p(k)
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    return tf.reduce_sum(loss * weights), tf.stop_gradient(tf.reduce_sum(nll * weights))


def token_statistics(
    logits: tf.Tensor,
    labels: tf.Tensor,
    label_smoothing: float,
    accuracy: bool = True,
    kernels: str = KERAS,
) -> dict:
    """Sums of the training loss and of the unsmoothed metrics over non-padding tokens.

    Args:
        logits: float [B, T, V] scores (cast to float32 here).
        labels: int [B, T] target ids, 0 = padding.
        label_smoothing: eps in [0, 1) (see `cross_entropy_sums`).
        accuracy: also count argmax hits. The argmax is one more pass over the
            [B, T, V] logits, so the training step, which logs no accuracy, leaves it out.
        kernels: see `cross_entropy_sums`; the evaluation step keeps "keras".

    Returns:
        {"loss": smoothed cross-entropy sum, "nll": negative log-likelihood sum,
         "correct": argmax hits (a tie for the top goes to the lowest id; only with
         `accuracy`), "tokens": non-padding count}, float32 scalars. Only "loss" has
         a gradient.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)  # [B, T]
    loss, nll = cross_entropy_sums(logits, labels, label_smoothing, kernels)
    stats = {"loss": loss, "nll": nll, "tokens": tf.reduce_sum(weights)}
    if accuracy:
        top = tf.argmax(logits, axis=-1, output_type=tf.int32)
        stats["correct"] = tf.reduce_sum(tf.cast(tf.equal(top, labels), tf.float32) * weights)
    return stats
