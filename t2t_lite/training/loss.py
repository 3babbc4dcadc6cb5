"""Label-smoothed cross-entropy summed over non-padding target tokens.

The trainer divides the sums by the number of non-padding target tokens of the whole
global batch (all replicas and accumulated micro-batches), so every token weighs the
same whatever the batch's split across devices.
"""

import tensorflow as tf


def token_statistics(logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float) -> dict:
    """Sums of the training loss and of the unsmoothed metrics over non-padding tokens.

    With K = vocab size and eps = `label_smoothing`, the target distribution is
    q'(k) = (1 - eps) * [k = label] + eps / K (Szegedy et al., 2016, as cited in
    section 5.4), and the token loss is the cross-entropy H(q', p).

    Args:
        logits: float [B, T, V] scores (cast to float32 here).
        labels: int [B, T] target ids, 0 = padding.
        label_smoothing: eps in [0, 1).

    Returns:
        {"loss": smoothed cross-entropy sum, "nll": negative log-likelihood sum,
         "correct": argmax hits, "tokens": non-padding count}, float32 scalars.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)  # [B, T]
    log_probs = tf.nn.log_softmax(logits, axis=-1)  # [B, T, V]
    nll = -tf.gather(log_probs, labels, axis=-1, batch_dims=2)  # [B, T]
    uniform = -tf.reduce_mean(log_probs, axis=-1)  # [B, T]
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    hits = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
    return {
        "loss": tf.reduce_sum(loss * weights),
        "nll": tf.reduce_sum(nll * weights),
        "correct": tf.reduce_sum(hits * weights),
        "tokens": tf.reduce_sum(weights),
    }
