"""Multi-head attention (section 3.2.2) with a fixed-size cache for decoding."""

import keras
from keras import ops

from t2t_lite import kernels as kernel_sets
from t2t_lite.kernels import cache_write, projection
from t2t_lite.layers.dropout import Dropout

# Added to the logits of masked keys; exp() of it underflows to exactly 0 in float32.
_MASKED_LOGIT = -1e9


@keras.saving.register_keras_serializable(package="t2t_lite")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, eq. 1 per head.

    head_j = softmax(Q W_j^Q (K W_j^K)^T / sqrt(Dh)) V W_j^V, with h = `num_heads` heads
    of width Dh = D / h. The four projections have biases (4 (D^2 + D) parameters).
    Softmax runs in float32 whatever the compute dtype.

    Three ways to call it:
    - full: `layer(query, value, attention_mask=m)`; `value=None` means self-attention.
    - precomputed keys/values: `layer(query, key_value=layer.compute_key_value(memory))`,
      for encoder-decoder attention while decoding (projected once per sentence). With a
      query of one position, the keys, values and mask may be those of B sentences for
      B * g query rows, g consecutive rows a sentence (a beam's hypotheses).
    - cached self-attention step: `layer(x, cache=c, cache_index=i, attention_mask=m)`
      with x [B, 1, D] and c = {"key", "value"} of [B, H, L, Dh]. The new key/value is
      scattered into slot i (no dynamic slicing, no growing tensors), so shapes are static
      under `tf.function(jit_compile=True)`; slot i must still hold the zeros the cache
      started with (steps write slots 0, 1, ... in order), which lets the CPU kernel
      write in place (`t2t_lite.kernels.cache_write`). Returns (output, new_cache).

    Stored keys and values (the cache, `compute_key_value`) are head-major, [B, H, T, Dh]:
    the two attention products then read them as they lie, where [B, T, H, Dh] would be
    transposed in full at every decoding step.

    `return_attention=True` (full and precomputed calls) also returns the attention
    probabilities, for pictures of them (`t2t_lite.models.attention_maps`); the
    computation is the same either way.

    Args:
        num_heads: h.
        hidden_size: D, width of the projections and of the output; divisible by h.
        dropout: dropout rate on the attention weights.
        kernels: "keras" or "cpu": how the projections and the dropout are computed
            (see `t2t_lite.kernels`).
    """

    def __init__(
        self,
        num_heads: int,
        hidden_size: int,
        dropout: float = 0.0,
        kernels: str = kernel_sets.KERAS,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_size % num_heads:
            raise ValueError(
                f"MultiHeadAttention: hidden_size {hidden_size} is not divisible by "
                f"num_heads {num_heads}; choose a head count that divides it"
            )
        self.num_heads = num_heads
        self.hidden_size = hidden_size
        self.dropout = dropout
        self.kernels = kernel_sets.check(kernels, "MultiHeadAttention")
        self.head_size = hidden_size // num_heads

    def build(self, query_shape, value_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        heads = (None, self.num_heads, self.head_size)
        self.query_dense = self._projection("query_dense")
        self.query_dense.build(query_shape)
        self.key_dense = self._projection("key_dense")
        self.key_dense.build(value_shape)
        self.value_dense = self._projection("value_dense")
        self.value_dense.build(value_shape)
        self.output_dense = keras.layers.EinsumDense(
            "bthk,hkd->btd",
            output_shape=(None, self.hidden_size),
            bias_axes="d",
            name="output_dense",
            dtype=self.dtype_policy,
        )
        self.output_dense.build((None, *heads))
        self.attention_dropout = Dropout(
            self.dropout, kernels=self.kernels, name="attention_dropout", dtype=self.dtype_policy
        )
        self.built = True

    def _projection(self, name):
        # [B, T, D_in] -> [B, T, H, Dh]
        return keras.layers.EinsumDense(
            "btd,dhk->bthk",
            output_shape=(None, self.num_heads, self.head_size),
            bias_axes="hk",
            name=name,
            dtype=self.dtype_policy,
        )

    def _project(self, dense, x):
        """`dense(x)` over [B, T, ...]; the CPU kernel computes it as one 2-D product."""
        if self.kernels == kernel_sets.CPU:
            return projection.positionwise(dense, x)
        return dense(x)

    def _write(self, cache, slots, update):
        """The step's key or value into its (still empty) slot; in place with the CPU kernel."""
        if self.kernels == kernel_sets.CPU:
            return cache_write.write_slot(cache, slots, update)
        return ops.scatter_update(cache, slots, update)

    def compute_key_value(self, value):
        """Projects the memory once: {"key", "value"}, each [B, H, Tk, Dh]."""
        return {
            "key": _heads_first(self._project(self.key_dense, value)),
            "value": _heads_first(self._project(self.value_dense, value)),
        }

    def call(
        self,
        query,
        value=None,
        attention_mask=None,
        key_value=None,
        cache=None,
        cache_index=None,
        training=None,
        return_attention=False,
    ):
        """Attends from `query` [B, Tq, D] to the keys/values of `value` [B, Tk, D].

        Args:
            query: [B, Tq, D_in].
            value: [B, Tk, D_in] memory; None for self-attention (uses `query`).
            attention_mask: bool, broadcastable to [B, Tq, Tk]; True = may attend.
            key_value: precomputed {"key", "value"} [B, H, Tk, Dh]; replaces `value`.
            cache: self-attention cache {"key", "value"} [B, H, L, Dh]; needs Tq = 1.
            cache_index: scalar int, the slot the new key/value is written to.
            training: enables attention-weights dropout.
            return_attention: also return the attention probabilities; not with `cache`.

        Returns:
            [B, Tq, D], or ([B, 1, D], new_cache) when `cache` is given, or with
            `return_attention` ([B, Tq, D], probabilities [B, H, Tq, Tk]): softmax over the
            masked keys, in the compute dtype, before attention dropout (masked keys get
            exactly 0).
        """
        if return_attention and cache is not None:
            raise ValueError(
                "MultiHeadAttention: return_attention is for full calls; a cached step "
                "does not return probabilities"
            )
        projected = self._project(self.query_dense, query)  # [B, Tq, H, Dh]
        projected = projected * ops.cast(self.head_size**-0.5, projected.dtype)
        if key_value is None:
            key_value = self.compute_key_value(query if value is None else value)
        key, value_heads = key_value["key"], key_value["value"]  # [B, H, Tk, Dh]
        if cache is None and key_value is not None and query.shape[1] == 1 and not return_attention:
            return self._attend_grouped(projected, key, value_heads, attention_mask, training)
        query_heads = _heads_first(projected)  # [B, H, Tq, Dh]

        new_cache = None
        if cache is not None:
            if cache_index is None:
                raise ValueError("MultiHeadAttention: a cached call needs cache_index")
            if query.shape[1] not in (None, 1):
                raise ValueError(
                    f"MultiHeadAttention: a cached call decodes one position; "
                    f"got a query of length {query.shape[1]}"
                )
            slots = _slot_indices(ops.shape(key)[0], self.num_heads, cache_index)
            key = self._write(cache["key"], slots, key[:, :, 0])  # [B, H, L, Dh]
            value_heads = self._write(cache["value"], slots, value_heads[:, :, 0])
            new_cache = {"key": key, "value": value_heads}

        output, weights = self._attend(query_heads, key, value_heads, attention_mask, training)
        if return_attention:
            return output, weights
        return output if new_cache is None else (output, new_cache)

    def _attend(self, query, key, value, attention_mask, training):
        """(output [B, Tq, D], probabilities [B, H, Tq, Tk] before dropout)."""
        scores = ops.einsum("bhqk,bhtk->bhqt", query, key)  # [B, H, Tq, Tk]
        scores = ops.cast(scores, "float32")
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")[:, None, :, :]  # [B, 1, Tq, Tk]
            scores = ops.where(mask, scores, _MASKED_LOGIT)
        weights = ops.cast(ops.softmax(scores, axis=-1), self.compute_dtype)
        dropped = self.attention_dropout(weights, training=training)
        context = ops.transpose(ops.einsum("bhqt,bhtk->bhqk", dropped, value), (0, 2, 1, 3))
        return self._project(self.output_dense, context), weights  # [B, Tq, D]

    def _attend_grouped(self, query, key, value, attention_mask, training):
        """One query per row over keys shared by groups of consecutive rows: [N, 1, D].

        query [N, 1, H, Dh] (projected and scaled) for N = B * g rows, where rows b * g ..
        b * g + g - 1 (the hypotheses of sentence b in a beam search) read key and value
        [B, H, Tk, Dh] and attention_mask [B, 1, Tk] of row b (g = 1: one row each). A
        group's queries are the g rows of one product over its keys: keys and values are
        read once per sentence, not once per hypothesis.
        """
        batch = ops.shape(key)[0]
        group = ops.shape(query)[0] // batch
        grouped = ops.reshape(query, (batch, group, self.num_heads, self.head_size))
        output, _ = self._attend(_heads_first(grouped), key, value, attention_mask, training)
        return ops.reshape(output, (-1, 1, self.hidden_size))  # [B, g, D] -> [N, 1, D]

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "hidden_size": self.hidden_size,
                "dropout": self.dropout,
                "kernels": self.kernels,
            }
        )
        return config


def _heads_first(x):
    """[B, T, H, Dh] -> [B, H, T, Dh]."""
    return ops.transpose(x, (0, 2, 1, 3))


def _slot_indices(batch, num_heads, index):
    """[B, H, 3] int32 indices (b, h, index) of slot `index` in every row and head."""
    rows = ops.broadcast_to(ops.arange(batch, dtype="int32")[:, None], (batch, num_heads))
    heads = ops.broadcast_to(ops.arange(num_heads, dtype="int32")[None, :], (batch, num_heads))
    slots = ops.full((batch, num_heads), ops.cast(index, "int32"), dtype="int32")
    return ops.stack([rows, heads, slots], axis=-1)
