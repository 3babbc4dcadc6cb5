"""Token embeddings, which also give the pre-softmax projection (section 3.4)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_lite")
class TokenEmbedding(keras.layers.Layer):
    """One [V, D] matrix E used both ways: ids -> E[ids] * sqrt(D), and x -> x E^T.

    "We share the same weight matrix between the two embedding layers and the
    pre-softmax linear transformation ... we multiply those weights by sqrt(d_model)."
    The model holds one for a shared vocabulary (source, target and pre-softmax), or
    one per vocabulary (the source's; the target's, which gives the pre-softmax too).
    E is initialised from N(0, D^-0.5), so looked-up vectors have unit variance after
    the scaling. The padding id 0 embeds to the zero vector.

    Args:
        vocab_size: V.
        hidden_size: D.
    """

    def __init__(self, vocab_size: int, hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=self.hidden_size**-0.5),
        )
        self.built = True

    def call(self, inputs, reverse=False):
        """Embeds ids, or with `reverse=True` projects vectors to vocabulary logits.

        Args:
            inputs: int ids [B, T], or with `reverse=True` vectors [B, T, D].
            reverse: False to look up, True for the pre-softmax projection (no bias).

        Returns:
            [B, T, D] embeddings, or [B, T, V] logits (compute dtype).
        """
        table = ops.cast(self.embeddings, self.compute_dtype)  # [V, D]
        if reverse:
            # As one contraction over D: oneDNN runs it as a batched product reading E as it
            # lies, where a matmul with E transposed takes about 1.5 times as long on CPUs.
            return ops.einsum("btd,vd->btv", inputs, table)  # [B, T, V]
        vectors = ops.take(table, inputs, axis=0)  # [B, T, D]
        not_padding = ops.cast(ops.not_equal(inputs, 0), self.compute_dtype)[..., None]
        return vectors * ops.cast(self.hidden_size**0.5, self.compute_dtype) * not_padding

    def attend(self, inputs):
        """The pre-softmax projection: [B, T, D] -> logits [B, T, V] = x E^T."""
        return self(inputs, reverse=True)

    def get_config(self):
        config = super().get_config()
        config.update({"vocab_size": self.vocab_size, "hidden_size": self.hidden_size})
        return config
