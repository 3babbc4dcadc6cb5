"""Boolean attention masks: True = may attend (DESIGN.md).

Every attention layer takes a mask broadcastable to [B, Tq, Tk]; the helpers here
build the three kinds the Transformer needs: source padding, the decoder's causal
mask over the full target, and the causal mask of one cached decoding step.
"""

from keras import ops


def padding_mask(ids):
    """Marks the real tokens of a padded batch.

    Args:
        ids: int tensor [B, S]; id 0 is padding.

    Returns:
        bool tensor [B, S], True where `ids != 0`.
    """
    return ops.not_equal(ids, 0)


def causal_mask(length):
    """The decoder's self-attention mask: position q may attend to keys 0..q.

    Args:
        length: T, a Python int or scalar int tensor.

    Returns:
        bool tensor [T, T], lower-triangular (diagonal included).
    """
    positions = ops.arange(length)
    return ops.greater_equal(positions[:, None], positions[None, :])  # [T, T]


def step_mask(index, length):
    """The causal mask of one cached step: the query at `index` sees cache slots 0..index.

    Args:
        index: i, scalar int tensor (or Python int), the position being decoded.
        length: L, the fixed length of the key/value cache.

    Returns:
        bool tensor [1, L], True for slots `<= index`.
    """
    slots = ops.arange(length)
    return ops.less_equal(slots, ops.cast(index, slots.dtype))[None, :]  # [1, L]


def attention_mask(key_mask=None, query_length=None, causal=None):
    """Combines a key padding mask and a causal mask into one [B, Tq, Tk] mask.

    Args:
        key_mask: optional bool tensor [B, Tk], True at keys that may be attended to.
        query_length: Tq; required when `causal` is None (the padding mask is
            repeated over the queries).
        causal: optional bool tensor [Tq, Tk] (e.g. `causal_mask(T)` or `step_mask(i, L)`).

    Returns:
        bool tensor [B, Tq, Tk] (or [1, Tq, Tk] when `key_mask` is None).

    Raises:
        ValueError: when neither mask is given, or when `query_length` is missing
            for a padding-only mask.
    """
    if key_mask is None and causal is None:
        raise ValueError("attention_mask needs key_mask, causal, or both; got neither")
    if causal is None:
        if query_length is None:
            raise ValueError("attention_mask with only key_mask needs query_length (Tq)")
        key_mask = ops.convert_to_tensor(key_mask)
        batch, keys = ops.shape(key_mask)[0], ops.shape(key_mask)[1]
        return ops.broadcast_to(key_mask[:, None, :], (batch, query_length, keys))
    causal = ops.convert_to_tensor(causal)[None, :, :]  # [1, Tq, Tk]
    if key_mask is None:
        return causal
    return ops.logical_and(key_mask[:, None, :], causal)  # [B, Tq, Tk]
