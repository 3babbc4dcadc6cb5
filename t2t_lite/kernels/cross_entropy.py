"""CPU kernel of the label-smoothed cross-entropy sums: two XLA programs, gradient written out.

Per non-padding token the gradient with respect to the logits is p - q', with p the
model's softmax and q' the smoothed target distribution. The forward program keeps two
numbers per token (max logit and softmax normaliser); the backward program recomputes
p from them and the logits. So the [B, T, V] logits are read three times forward and
once backward, and nothing of that size is written but the gradient (differentiating
the formula through log-softmax reads and writes it about ten times). Each program is
one XLA computation whose passes fuse; inside a step that XLA compiles as a whole, they
are inlined into it.
"""

from __future__ import annotations

import tensorflow as tf

# The smallest vocabulary for which the kernel is used. The programs compile once per
# [B, T, V] shape and then save passes over the logits, a saving that grows with V
# (`tools/benchmark_loss.py` prints both ways side by side). For the generated problems'
# dozen symbols it is too small to pay for compiling every bucket's shape.
COMPILED_MIN_VOCAB = 1000


def applies(logits) -> bool:
    """Whether the kernel pays for `logits` [B, T, V]: a known V >= `COMPILED_MIN_VOCAB`."""
    vocab_size = logits.shape[-1]
    return vocab_size is not None and vocab_size >= COMPILED_MIN_VOCAB


def _forward(logits, labels, label_smoothing):
    """Loss and NLL sums, and the per-token max logit and softmax normaliser."""
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)  # [B, T]
    top = tf.reduce_max(logits, axis=-1, keepdims=True)  # [B, T, 1]
    total = tf.reduce_sum(tf.exp(logits - top), axis=-1, keepdims=True)  # [B, T, 1]
    log_normalizer = (tf.math.log(total) + top)[..., 0]  # [B, T]
    nll = log_normalizer - tf.gather(logits, labels, axis=-1, batch_dims=2)  # -log p(label)
    uniform = log_normalizer - tf.reduce_mean(logits, axis=-1)  # -mean_k log p(k)
    loss = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    return tf.reduce_sum(loss * weights), tf.reduce_sum(nll * weights), top, total


def _backward(logits, labels, label_smoothing, top, total, upstream):
    """d(upstream * loss sum) / d logits = upstream * (p - q') on non-padding tokens."""
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)  # [B, T]
    vocab_size = tf.shape(logits)[-1]
    target = tf.one_hot(labels, vocab_size, on_value=1.0 - label_smoothing, off_value=0.0)
    smoothing = label_smoothing / tf.cast(vocab_size, tf.float32)
    probs = tf.exp(logits - top) / total
    return (probs - target - smoothing) * (upstream * weights)[..., None]


_forward_compiled = tf.function(_forward, jit_compile=True)
_backward_compiled = tf.function(_backward, jit_compile=True)


def cross_entropy_sums(logits, labels, label_smoothing: float) -> tuple:
    """(smoothed cross-entropy sum, negative log-likelihood sum) over non-padding tokens.

    Args:
        logits: float32 [B, T, V].
        labels: int32 [B, T], 0 = padding.
        label_smoothing: eps in [0, 1).

    Returns:
        Two float32 scalars; only the first has a gradient.
    """

    @tf.custom_gradient
    def sums(z):
        loss, nll, top, total = _forward_compiled(z, labels, label_smoothing)

        def backward(upstream, *unused):
            return _backward_compiled(z, labels, label_smoothing, top, total, upstream)

        return (loss, tf.stop_gradient(nll)), backward

    return sums(logits)
