import dataclasses

import pytest

from t2t_lite import hparams


def test_registry_has_the_paper_sets():
    for name in (
        "transformer_base",
        "transformer_big",
        "transformer_big_enfr",
        "transformer_base_single_gpu",
        "transformer_tiny",
    ):
        assert name in hparams.names()


def test_transformer_base_is_the_paper_model():
    hp = hparams.get("transformer_base")
    # Vaswani et al. (2017), Table 3 row "base" and section 5.3-5.4.
    assert (hp.num_encoder_layers, hp.num_decoder_layers) == (6, 6)
    assert (hp.hidden_size, hp.filter_size, hp.num_heads) == (512, 2048, 8)
    assert hp.dropout == 0.1 and hp.label_smoothing == 0.1
    assert (hp.adam_beta1, hp.adam_beta2, hp.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert hp.warmup_steps == 4000 and hp.learning_rate == 1.0
    assert hp.normalize_first is False


def test_transformer_big_and_enfr():
    big = hparams.get("transformer_big")
    assert (big.hidden_size, big.filter_size, big.num_heads, big.dropout) == (1024, 4096, 16, 0.3)
    assert hparams.get("transformer_big_enfr").dropout == 0.1


def test_hparams_are_frozen():
    hp = hparams.get("transformer_tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        hp.hidden_size = 3


def test_override_parses_types():
    hp = hparams.override(
        hparams.get("transformer_base"),
        "hidden_size=256, dropout=0.2,normalize_first=true,position_encoding=learned",
    )
    assert hp.hidden_size == 256 and hp.dropout == 0.2
    assert hp.normalize_first is True and hp.position_encoding == "learned"


def test_override_rejects_unknown_key_listing_valid_ones():
    with pytest.raises(ValueError, match=r"unknown hparam 'hiden_size'.*hidden_size"):
        hparams.override(hparams.get("transformer_base"), "hiden_size=3")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("hidden_size=big", "hidden_size' is an int"),
        ("dropout=lots", "dropout' is a float"),
        ("normalize_first=maybe", "normalize_first' is a bool"),
        ("hidden_size", "not of the form key=value"),
        ("num_heads=7", "not divisible by num_heads"),
        ("dropout=1.5", "must be in"),
    ],
)
def test_override_rejects_bad_values(spec, message):
    with pytest.raises(ValueError, match=message):
        hparams.override(hparams.get("transformer_base"), spec)


def test_unknown_set_lists_known_sets():
    with pytest.raises(ValueError, match="known sets: .*transformer_base"):
        hparams.get("transformer_huge")


def test_json_round_trip():
    hp = hparams.get("transformer_big")
    assert hparams.HParams.from_json(hp.to_json()) == hp
