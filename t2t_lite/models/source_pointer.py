"""The source pointer: the encoder output at the next source token to copy (not in the paper).

For targets that copy the source in order with other tokens between (lexicalized trees:
`(NP the dog )NP` over `the dog`), each decoder input also gets the encoder output at
the source position of the next token to copy: the number of copied tokens among the
decoder inputs so far, where a copied token is any id >= 2 that is not a non-copy id
(a bracket). So the decoder always sees the source token it must place next, whatever
its position in the target.
"""

import numpy as np
from keras import ops


def non_copy_table(non_copy_ids, vocab_size: int) -> np.ndarray:
    """int32 [V]: 1 at the `non_copy_ids`, 0 elsewhere."""
    table = np.zeros(vocab_size, np.int32)
    table[list(non_copy_ids)] = 1
    return table


def copies(ids, table):
    """int32, the shape of `ids`: 1 where an id is a copied source token (not padding,
    EOS or a non-copy id of `table`, from `non_copy_table`)."""
    ids = ops.cast(ids, "int32")
    return ops.where(ids > 1, 1 - ops.take(table, ids), 0)


def read(encoder_output, positions):
    """encoder_output [B, S, D] at positions [B, T] (clipped to S - 1) -> [B, T, D]."""
    last = ops.shape(encoder_output)[1] - 1
    index = ops.minimum(positions, last)[:, :, None]  # [B, T, 1]
    return ops.take_along_axis(encoder_output, index, axis=1)
