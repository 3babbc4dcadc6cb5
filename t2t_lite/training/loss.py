"""Label-smoothed cross-entropy summed over non-padding target tokens.

The trainer divides the sums by the number of non-padding target tokens of the whole
global batch (all replicas and accumulated micro-batches), so every token weighs the
same whatever the batch's split across devices.
"""

import tensorflow as tf


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


# Each is one XLA program: its passes over the [B, T, V] logits fuse (inside a step that
# XLA compiles as a whole, they are inlined into it).
_forward_compiled = tf.function(_forward, jit_compile=True)
_backward_compiled = tf.function(_backward, jit_compile=True)

# The smallest vocabulary for which the XLA programs are used by default. They compile
# once per [B, T, V] shape (tenths of a second on a CPU) and then save passes over the
# logits, a saving that grows with V: `tools/benchmark_loss.py` prints both ways side by
# side. For the generated problems' dozen symbols the saving is a fraction of a
# millisecond per update, which thousands of updates do not turn into the seconds that
# compiling every bucket's shape costs.
COMPILED_MIN_VOCAB = 1000


def cross_entropy_sums(
    logits: tf.Tensor, labels: tf.Tensor, label_smoothing: float, compiled: bool | None = None
) -> tuple:
    """Label-smoothed cross-entropy and negative log-likelihood, summed over tokens.

    With K = vocab size and eps = `label_smoothing`, the target distribution is
    q'(k) = (1 - eps) * [k = label] + eps / K (Szegedy et al., 2016, as cited in
    section 5.4), and the token loss is the cross-entropy H(q', p).

    Compiled, the gradient with respect to the logits is written out rather than
    derived through log-softmax: per non-padding token it is p - q', with p the model's
    softmax. The forward program keeps two numbers per token (max logit and softmax
    normaliser); the backward program recomputes p from them and the logits. So the
    [B, T, V] logits are read three times forward and once backward, and nothing of that
    size is written but the gradient (differentiating the formula through log-softmax
    reads and writes it about ten times). Only the loss sum carries a gradient.

    Args:
        logits: float32 [B, T, V] scores.
        labels: int32 [B, T] target ids, 0 = padding.
        label_smoothing: eps in [0, 1).
        compiled: True runs the forward and backward programs through XLA, which
            compiles them once per [B, T, V] shape: worth it in training with a real
            vocabulary, where each bucket's shape recurs for the whole run. False
            computes the same sums with plain TensorFlow ops (gradient by autodiff):
            for an evaluation pass, which meets many shapes (dev sentences beyond the
            last bucket keep their own lengths) a few times each. None: compiled when
            V >= `COMPILED_MIN_VOCAB`.

    Returns:
        (smoothed cross-entropy sum, negative log-likelihood sum), float32 scalars.
    """
    if compiled is None:
        compiled = logits.shape[-1] is not None and logits.shape[-1] >= COMPILED_MIN_VOCAB
    if not compiled:
        loss, nll, _, _ = _forward(logits, labels, label_smoothing)
        return loss, tf.stop_gradient(nll)

    @tf.custom_gradient
    def sums(z):
        loss, nll, top, total = _forward_compiled(z, labels, label_smoothing)

        def backward(upstream, *unused):
            return _backward_compiled(z, labels, label_smoothing, top, total, upstream)

        return (loss, tf.stop_gradient(nll)), backward

    return sums(logits)


def token_statistics(
    logits: tf.Tensor,
    labels: tf.Tensor,
    label_smoothing: float,
    accuracy: bool = True,
    compiled: bool | None = None,
) -> dict:
    """Sums of the training loss and of the unsmoothed metrics over non-padding tokens.

    Args:
        logits: float [B, T, V] scores (cast to float32 here).
        labels: int [B, T] target ids, 0 = padding.
        label_smoothing: eps in [0, 1) (see `cross_entropy_sums`).
        accuracy: also count argmax hits. The argmax is one more pass over the
            [B, T, V] logits (about 0.6% of a transformer_base update on 2 CPU cores),
            so the training step, which logs no accuracy, leaves it out.
        compiled: see `cross_entropy_sums` (None: by vocabulary size); the
            evaluation step passes False.

    Returns:
        {"loss": smoothed cross-entropy sum, "nll": negative log-likelihood sum,
         "correct": argmax hits (a tie for the top goes to the lowest id; only with
         `accuracy`), "tokens": non-padding count}, float32 scalars. Only "loss" has
         a gradient.
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    weights = tf.cast(tf.not_equal(labels, 0), tf.float32)  # [B, T]
    loss, nll = cross_entropy_sums(logits, labels, label_smoothing, compiled)
    stats = {"loss": loss, "nll": nll, "tokens": tf.reduce_sum(weights)}
    if accuracy:
        top = tf.argmax(logits, axis=-1, output_type=tf.int32)
        stats["correct"] = tf.reduce_sum(tf.cast(tf.equal(top, labels), tf.float32) * weights)
    return stats
