"""Named hparams sets for the Transformer, one function each.

Every set is `transformer_base()` with its differences written out, one level deep, so
each set reads in one place. Figures in comments are from Vaswani et al. (2017), Table 3.

The paper's sets update on about 25,000 target tokens whatever the devices
(`effective_batch_tokens`; the trainer accumulates batches to reach it). The sets for
one small device or a CPU update on one batch per replica (`effective_batch_tokens=0`).
"""

import dataclasses

from t2t_lite.hparams.hparams import HParams

# Section 5.1: "approximately 25000 source tokens and 25000 target tokens" per batch.
PAPER_BATCH_TOKENS = 25_000
# Table 3, "big": the widths of the big model.
BIG_WIDTHS = {"hidden_size": 1024, "filter_size": 4096, "num_heads": 16}
# Section 5.2: the base models trained for 100,000 steps, the big ones for 300,000.
BASE_STEPS, BIG_STEPS = 100_000, 300_000


def transformer_base() -> HParams:
    """The paper's base model: N=6, d_model 512, d_ff 2048, h 8, P_drop 0.1, eps_ls 0.1.

    Each update sees ~25,000 target tokens: on 8 replicas of 4,096 tokens one batch
    each, on one replica 7 accumulated batches; 100,000 updates.
    """
    return HParams(effective_batch_tokens=PAPER_BATCH_TOKENS, train_steps=BASE_STEPS)


def transformer_big() -> HParams:
    """The paper's big model: d_model 1024, d_ff 4096, h 16, P_drop 0.3 (En-De), 300,000 steps."""
    return dataclasses.replace(transformer_base(), **BIG_WIDTHS, dropout=0.3, train_steps=BIG_STEPS)


def transformer_big_enfr() -> HParams:
    """The big model as trained for En-Fr, with P_drop 0.1 (section 6.1), 300,000 steps."""
    return dataclasses.replace(transformer_base(), **BIG_WIDTHS, dropout=0.1, train_steps=BIG_STEPS)


def transformer_base_single_gpu() -> HParams:
    """transformer_base for one small device: smaller batches, longer warmup."""
    return dataclasses.replace(
        transformer_base(),
        batch_size=2048,
        warmup_steps=16000,
        learning_rate=2.0,
        effective_batch_tokens=0,
    )


def transformer_big_single_gpu() -> HParams:
    """transformer_big for one device: the batch that fits, longer warmup, P_drop 0.1."""
    return dataclasses.replace(
        transformer_base(),
        **BIG_WIDTHS,
        batch_size=2048,
        warmup_steps=16000,
        dropout=0.1,
        effective_batch_tokens=0,
        train_steps=BIG_STEPS,
    )


def transformer_small() -> HParams:
    """Two layers of width 256: a model that trains on a CPU in minutes."""
    return dataclasses.replace(
        transformer_base(),
        num_encoder_layers=2,
        num_decoder_layers=2,
        hidden_size=256,
        filter_size=1024,
        num_heads=4,
        batch_size=2048,
        learning_rate=2.0,
        warmup_steps=1000,
        effective_batch_tokens=0,
        train_steps=2_000,
    )


def transformer_tiny() -> HParams:
    """Two layers of width 128, for tests and the generated algorithmic problems."""
    return dataclasses.replace(
        transformer_base(),
        num_encoder_layers=2,
        num_decoder_layers=2,
        hidden_size=128,
        filter_size=512,
        num_heads=4,
        batch_size=1024,
        max_length=64,
        learning_rate=0.5,
        warmup_steps=400,
        effective_batch_tokens=0,
        train_steps=3_000,  # the README's main job: reversal learnt to >= 99% accuracy
    )


def transformer_algorithmic() -> HParams:
    """One pre-norm layer a side of width 128, no dropout: the generated algorithmic problems.

    transformer_tiny's width, heads, batches and learning rate. A run sees fewer examples
    than the 100,000 of the train split, each new, so dropout has nothing to regularise and
    only slows learning. One encoder and one decoder layer, pre-norm and a 200-step warmup
    find the positional rule of reversal within 500 updates; the rate then falls linearly
    towards zero over the last 80% of the run, which settles it there in half the updates
    that eq. 3 alone needs (docs/quality.md).
    """
    return dataclasses.replace(
        transformer_base(),
        num_encoder_layers=1,
        num_decoder_layers=1,
        hidden_size=128,
        filter_size=512,
        num_heads=4,
        normalize_first=True,
        dropout=0.0,
        batch_size=1024,
        max_length=64,
        learning_rate=0.5,
        warmup_steps=200,
        cooldown_fraction=0.8,
        effective_batch_tokens=0,
        train_steps=1_000,  # the README's main job: reversal learnt to >= 99% accuracy
    )


def transformer_multi30k() -> HParams:
    """Three layers of width 256 for Multi30k-sized corpora on a CPU in about 30 minutes.

    Pre-norm keeps the short, high-learning-rate schedule stable; sentences are short,
    so buckets stop at 100 tokens.
    """
    return dataclasses.replace(
        transformer_base(),
        num_encoder_layers=3,
        num_decoder_layers=3,
        hidden_size=256,
        filter_size=1024,
        num_heads=4,
        normalize_first=True,
        batch_size=2048,
        max_length=100,
        learning_rate=1.0,  # peak 2.8e-3 at step 500 (chosen on val, docs/quality.md)
        warmup_steps=500,
        effective_batch_tokens=0,
        train_steps=3_000,  # about 30 minutes on 2 CPU cores (docs/quality.md)
    )
