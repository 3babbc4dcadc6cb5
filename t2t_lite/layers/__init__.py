"""Keras 3 layers of the Transformer (keras.ops only; their CPU kernels are t2t_lite.kernels)."""

from t2t_lite.layers import masks
from t2t_lite.layers.attention import MultiHeadAttention
from t2t_lite.layers.decoder_layer import TransformerDecoderLayer
from t2t_lite.layers.embedding import TokenEmbedding
from t2t_lite.layers.encoder_layer import TransformerEncoderLayer
from t2t_lite.layers.feed_forward import FeedForwardNetwork
from t2t_lite.layers.positions import LearnedPositionEmbedding, SinusoidalPositionEncoding

__all__ = [
    "FeedForwardNetwork",
    "LearnedPositionEmbedding",
    "MultiHeadAttention",
    "SinusoidalPositionEncoding",
    "TokenEmbedding",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "masks",
]
