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
    """encoder_output [B, S, D] at positions [N, T] (clipped to S - 1) -> [N, T, D].

    N = B * g: rows n * g .. n * g + g - 1 read sentence n (a beam's hypotheses share their
    sentence's encoder output; g = 1 in training). One gather of N x T vectors from the
    [B * S, D] rows, so the encoder output is neither copied per hypothesis nor rearranged.
    """
    batch, length = ops.shape(encoder_output)[0], ops.shape(encoder_output)[1]
    rows = ops.shape(positions)[0]
    sentence = ops.cast(ops.arange(rows) // ops.maximum(rows // ops.maximum(batch, 1), 1), "int32")
    index = sentence[:, None] * length + ops.minimum(ops.cast(positions, "int32"), length - 1)
    flat = ops.reshape(encoder_output, (-1, ops.shape(encoder_output)[2]))  # [B * S, D]
    return ops.take(flat, index, axis=0)  # [N, T, D]
