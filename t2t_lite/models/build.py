"""`build_transformer`: the Transformer an hparams set describes, built."""

from t2t_lite import kernels as kernel_sets
from t2t_lite.models.transformer import Transformer


def build_transformer(
    hp, vocab_size: int, target_vocab_size: int | None = None, non_copy_ids=None
) -> Transformer:
    """Creates and builds (all weights created) the Transformer that `hp` describes.

    Args:
        hp: a `t2t_lite.hparams.HParams`; its model fields, dropout rates, dtype_policy
            and kernels are used. `hp.kernels` "auto" is resolved here, once, for the
            devices of the tf.distribute strategy in scope (`t2t_lite.kernels.resolve`).
        vocab_size: V of the (shared or source) vocabulary.
        target_vocab_size: size of a separate target vocabulary, or None.
        non_copy_ids: the problem's `target_non_copy_ids`, needed by `hp.source_pointer`.

    Returns:
        A built `Transformer` named "transformer".
    """
    model = Transformer(
        vocab_size=vocab_size,
        target_vocab_size=target_vocab_size,
        dropout=hp.dropout,
        attention_dropout=hp.attention_dropout,
        relu_dropout=hp.relu_dropout,
        dtype=hp.dtype_policy,
        name="transformer",
        non_copy_ids=non_copy_ids if hp.source_pointer else None,
        kernels=kernel_sets.resolve(hp.kernels),
        **hp.model_fields(),
    )
    model.build()
    return model
