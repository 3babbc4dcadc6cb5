"""The LayerNorm and Dropout that wrap every sub-layer of an encoder or decoder layer."""

from t2t_lite.layers.dropout import Dropout
from t2t_lite.layers.normalization import LayerNorm


def build_norm_and_dropout(layer, block, inputs_shape):
    """Sets `layer.{block}_layer_norm` (built) and `layer.{block}_dropout`.

    `layer` supplies `layer_norm_epsilon`, `dropout`, `kernels` and `dtype_policy`; the
    attribute names are part of the checkpoint layout, so both layer types share them.
    """
    layer_norm = LayerNorm(
        epsilon=layer.layer_norm_epsilon,
        kernels=layer.kernels,
        name=f"{block}_layer_norm",
        dtype=layer.dtype_policy,
    )
    layer_norm.build(inputs_shape)
    setattr(layer, f"{block}_layer_norm", layer_norm)
    dropout = Dropout(
        layer.dropout, kernels=layer.kernels, name=f"{block}_dropout", dtype=layer.dtype_policy
    )
    setattr(layer, f"{block}_dropout", dropout)
