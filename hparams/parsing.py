"""Hparams sets for constituency parsing (paper, section 6.3), one function each.

The paper trains "a 4-layer transformer with d_model = 1024" on the WSJ training sentences
(about 40K), selecting dropout, learning rates and beam size on section 22 and leaving every
other parameter as in the English-to-German base model. The widths not named there (d_ff 4096,
16 heads) are those of the big model at d_model 1024. With so little data the model is
regularised more than the base model is, and less than the big one (P_drop 0.3): 0.2 on
sub-layer outputs and on attention weights, as tensor2tensor's WSJ-only parsing set did.

Source and target embeddings are separate matrices (the target one still tied to the
pre-softmax projection), as in tensor2tensor's parsing sets. Sharing them fails here: the
targets are bracket tokens and never words, so every softmax gradient pushes all word
embeddings the same way, the inputs become indistinguishable and the encoder's output turns
constant within a few hundred steps (seen on the WSJ sample).
"""

import dataclasses

from t2t_lite.hparams.hparams import HParams
from t2t_lite.hparams.transformer import BIG_WIDTHS, transformer_base


def transformer_parsing() -> HParams:
    """Section 6.3: N=4, d_model 1024, d_ff 4096, h 16, dropout 0.2; trees up to 512 tokens."""
    return dataclasses.replace(
        transformer_base(),
        **BIG_WIDTHS,
        num_encoder_layers=4,
        num_decoder_layers=4,
        shared_embedding=False,
        dropout=0.2,
        attention_dropout=0.2,
        max_length=512,
    )


def transformer_parsing_small() -> HParams:
    """transformer_parsing at CPU size: 2+2 layers of width 256, for the 3,400-tree WSJ sample.

    Small batches (1,024 tokens, one per update) give many updates in a CPU budget of minutes;
    dropout 0.2 on sub-layer outputs (attention weights 0.1), as a 30-minute run sees the
    sample's trees about 25 times. Layer normalization comes first in each
    sub-layer (tensor2tensor's later default): with the paper's post-norm and this learning
    rate the encoder's output turned constant over positions within 500 steps on the sample,
    with pre-norm it stays informative.

    `source_pointer`: each decoder input also gets the encoder output at the next word to
    place (the lexicalized targets of `wsj_parsing` copy the words in order), so the decoder
    never has to find its place in the sentence by attention alone; docs/parsing.md gives
    the measurements.
    """
    return dataclasses.replace(
        transformer_base(),
        shared_embedding=False,
        num_encoder_layers=2,
        num_decoder_layers=2,
        hidden_size=256,
        filter_size=1024,
        num_heads=4,
        normalize_first=True,
        dropout=0.2,
        attention_dropout=0.1,
        batch_size=1024,
        effective_batch_tokens=0,
        max_length=256,
        learning_rate=2.0,
        warmup_steps=1000,
        source_pointer=True,
        train_steps=5_000,  # about 30 minutes on 2 CPU cores (docs/parsing.md)
    )
