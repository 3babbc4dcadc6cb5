"""Position information added to the embeddings: the paper's sinusoids (section 3.5)
and the learned table it compares them with (Table 3, row E)."""

import math

import keras
from keras import ops


def _positions(inputs, start_index):
    """The positions start_index .. start_index + T - 1 of `inputs` [B, T, ...], int32 [T]."""
    length = ops.shape(inputs)[1]
    return ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")


@keras.saving.register_keras_serializable(package="t2t_lite")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)).

    Even dimensions hold sines and odd dimensions cosines (interleaved, as written in
    the paper). Computed on the fly in float32, so it has no weights and no length
    limit; the result is cast to the compute dtype.

    Args:
        max_wavelength: the 10000 of the formula.
    """

    def __init__(self, max_wavelength: float = 10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength

    def call(self, inputs, start_index=0):
        """Returns the encodings of the positions of `inputs`.

        Args:
            inputs: [B, T, D] embeddings (only T, D and the dtype are used).
            start_index: position of the first row: 0 for a full sequence, i for the
                cached step that decodes position i (scalar int tensor or int).

        Returns:
            [T, D] in the compute dtype, to be added to `inputs`.
        """
        hidden_size = inputs.shape[-1]
        if hidden_size is None or hidden_size % 2:
            raise ValueError(
                "SinusoidalPositionEncoding needs a known, even model width D; "
                f"got inputs of shape {inputs.shape}"
            )
        positions = ops.cast(_positions(inputs, start_index), "float32")  # [T]
        two_i = ops.arange(0, hidden_size, 2, dtype="float32")  # [D/2]: 2i
        inverse_frequency = ops.exp(two_i * (-math.log(self.max_wavelength) / hidden_size))
        angles = positions[:, None] * inverse_frequency[None, :]  # [T, D/2]
        encoding = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)  # [T, D/2, 2]
        encoding = ops.reshape(encoding, (-1, hidden_size))  # [T, D], sin/cos interleaved
        return ops.cast(encoding, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"max_wavelength": self.max_wavelength})
        return config


@keras.saving.register_keras_serializable(package="t2t_lite")
class LearnedPositionEmbedding(keras.layers.Layer):
    """A learned [max_position, D] table of position vectors (Table 3, row E).

    Rows are initialised from N(0, 1/2), the per-element variance of the sinusoids
    they replace, so both encodings start at the same scale relative to the
    sqrt(D)-scaled token embeddings.

    Args:
        max_position: number of rows; positions must stay below it.
        hidden_size: D.
    """

    def __init__(self, max_position: int, hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.max_position = max_position
        self.hidden_size = hidden_size

    def build(self, inputs_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_position, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.5**0.5),
        )
        self.built = True

    def call(self, inputs, start_index=0):
        """Returns the table rows of the positions of `inputs`.

        Args:
            inputs: [B, T, D] embeddings (only T is used).
            start_index: position of the first row (scalar int tensor or int).

        Returns:
            [T, D] in the compute dtype.
        """
        length = inputs.shape[1]
        if isinstance(start_index, int) and length is not None:
            if start_index + length > self.max_position:
                raise ValueError(
                    f"LearnedPositionEmbedding: positions up to {start_index + length - 1} "
                    f"asked of a table of {self.max_position} rows; raise max_position "
                    "or shorten the sequences"
                )
        table = ops.cast(self.embeddings, self.compute_dtype)
        return ops.take(table, _positions(inputs, start_index), axis=0)  # [T, D]

    def get_config(self):
        config = super().get_config()
        config.update({"max_position": self.max_position, "hidden_size": self.hidden_size})
        return config
