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
        ("effective_batch_tokens=-1", "effective_batch_tokens must be >= 0"),
    ],
)
def test_override_rejects_bad_values(spec, message):
    with pytest.raises(ValueError, match=message):
        hparams.override(hparams.get("transformer_base"), spec)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("hidden_size=big", "hparam 'hidden_size' is an int; got 'big'; valid keys: "),
        ("dropout=lots", "hparam 'dropout' is a float; got 'lots'; valid keys: "),
        (
            "normalize_first=maybe",
            "hparam 'normalize_first' is a bool; got 'maybe' (use true or false); valid keys: ",
        ),
    ],
)
def test_wrong_type_lists_the_valid_keys_with_their_types(spec, message):
    with pytest.raises(ValueError) as error:
        hparams.override(hparams.get("transformer_base"), spec)
    text = str(error.value)
    assert text.startswith(message)
    listed = text.split("; valid keys: ", 1)[1]
    for key, kind in [("batch_size", "int"), ("dropout", "float"), ("normalize_first", "bool")]:
        assert f"{key} ({kind})" in listed
    assert "position_encoding (str)" in listed
    assert listed.count(" (") == len(dataclasses.fields(hparams.HParams))


def test_paper_sets_update_on_25000_tokens_and_small_sets_on_one_batch():
    # Section 5.1: batches of "approximately 25000 source tokens and 25000 target tokens".
    for name in ("transformer_base", "transformer_big", "transformer_big_enfr"):
        assert hparams.get(name).effective_batch_tokens == 25000, name
    # Sets for one small device or a CPU keep one batch per update: accumulating to
    # 25,000 tokens would make their steps many times slower.
    small = (
        "transformer_base_single_gpu",
        "transformer_big_single_gpu",
        "transformer_small",
        "transformer_tiny",
        "transformer_multi30k",
        "transformer_parsing_small",
    )
    for name in small:
        assert hparams.get(name).effective_batch_tokens == 0, name


def test_unknown_set_lists_known_sets():
    with pytest.raises(ValueError, match="known sets: .*transformer_base"):
        hparams.get("transformer_huge")


def test_json_round_trip():
    hp = hparams.get("transformer_big")
    assert hparams.HParams.from_json(hp.to_json()) == hp
