"""tools/multi30k_recipe.py: the precision it trains in and the speed it reports.

The precision comes from `cpu_features.training_policy`, which tools/parse_wsj_sample.py
shares.

The recipe itself runs for 30 minutes and is measured by hand (docs/quality.md); these tests
cover the parts it decides from the machine and the vocabulary it builds.
"""

import gzip
import itertools

import pytest
import sentencepiece as spm
import tensorflow as tf
from conftest import load_tool

from t2t_lite.training import cpu_features

WITH_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni avx512_bf16 amx_tile\n"
WITHOUT_BF16 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_vnni\n"


@pytest.fixture(scope="module")
def recipe():
    return load_tool("multi30k_recipe")


def test_auto_trains_in_bfloat16_only_on_a_cpu_that_multiplies_it(tmp_path):
    with_bf16, without = tmp_path / "with", tmp_path / "without"
    with_bf16.write_text(WITH_BF16)
    without.write_text(WITHOUT_BF16)
    choose = cpu_features.training_policy
    assert choose("auto", "float32", False, str(with_bf16)) == "mixed_bfloat16"
    assert choose("auto", "float32", False, str(without)) == "float32"
    assert choose("auto", "float32", False, str(tmp_path / "unreadable")) == "float32"
    # A GPU keeps the set's policy, whatever its host CPU has.
    assert choose("auto", "float32", True, str(with_bf16)) == "float32"
    assert choose("auto", "mixed_float16", True, str(with_bf16)) == "mixed_float16"
    # The set's own policy, and an explicit choice, are kept everywhere.
    assert choose("set", "float32", False, str(with_bf16)) == "float32"
    assert choose("float32", "float32", False, str(with_bf16)) == "float32"
    assert choose("mixed_bfloat16", "float32", False, str(without)) == "mixed_bfloat16"


def test_the_policy_reaches_the_hparams_and_an_explicit_override_wins(recipe, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(WITH_BF16)
    base = ["--raw_dir=r", "--work_dir=w"]
    args = recipe._arguments(base)
    assert args.dtype_policy == "set"
    hp = recipe.recipe_hparams(args, has_gpu=False, cpuinfo_path=str(cpuinfo))
    assert (hp.dtype_policy, hp.hidden_size) == ("float32", 256)
    args = recipe._arguments(base + ["--dtype_policy=auto"])
    hp = recipe.recipe_hparams(args, has_gpu=False, cpuinfo_path=str(cpuinfo))
    assert hp.dtype_policy == "mixed_bfloat16"
    args = recipe._arguments(
        base + ["--dtype_policy=auto", "--hparams=dtype_policy=float32,dropout=0.2"]
    )
    hp = recipe.recipe_hparams(args, has_gpu=False, cpuinfo_path=str(cpuinfo))
    assert (hp.dtype_policy, hp.dropout) == ("float32", 0.2)
    with pytest.raises(SystemExit):
        recipe._arguments(base + ["--dtype_policy=float16"])


def test_the_reported_rate_is_the_median_of_the_logged_rates(recipe, tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step, rate in enumerate([100.0, 4000.0, 3000.0, 3500.0, 2000.0], start=1):
            tf.summary.scalar("train/tokens_per_sec", rate, step=step)
            tf.summary.scalar("train/loss", 7.0, step=step)
    writer.close()
    assert recipe._median_tokens_per_sec(str(tmp_path)) == 3000.0
    assert recipe._median_tokens_per_sec(str(tmp_path / "none")) is None


def test_splits_default_to_both_and_val_alone_leaves_the_test_set_unread(recipe, capsys):
    base = ["--raw_dir=r", "--work_dir=w"]
    assert recipe._arguments(base).splits == ["test_2016_flickr", "val"]
    assert recipe._arguments(base + ["--splits=val"]).splits == ["val"]
    with pytest.raises(SystemExit):
        recipe._arguments(base + ["--splits=val,test_2017"])
    assert (
        "--splits: unknown ['test_2017']; known: test_2016_flickr, val" in capsys.readouterr().err
    )


def _head_of_multi30k(shared_data, folder, lines):
    """The first `lines` pairs of each En-De split of the shared Multi30k, gzipped as shipped."""
    folder.mkdir()
    for stem in ("train", "val", "test_2016_flickr"):
        for language in ("en", "de"):
            name = f"{stem}.{language}.gz"
            with gzip.open(shared_data / "multi30k" / name, "rt", encoding="utf-8") as source:
                head = "".join(itertools.islice(source, lines))
            with gzip.open(folder / name, "wt", encoding="utf-8") as target:
                target.write(head)
    return folder


def test_vocab_size_reaches_datagen(recipe, shared_data, tmp_path):
    raw = _head_of_multi30k(shared_data, tmp_path / "raw", 400)
    base = [f"--raw_dir={raw}", f"--work_dir={tmp_path}"]
    assert recipe._arguments(base).vocab_size == 0
    metadata = recipe.generate(recipe._arguments(base + ["--vocab_size=600"]), str(tmp_path / "d"))
    assert metadata["settings"]["vocab_size"] == 600
    vocab = tmp_path / "d" / "multi30k_ende" / "vocab.model"
    model = spm.SentencePieceProcessor(model_file=str(vocab))
    assert model.get_piece_size() == 600


def test_a_negative_vocab_size_is_refused_by_name(recipe, capsys):
    with pytest.raises(SystemExit):
        recipe._arguments(["--raw_dir=r", "--work_dir=w", "--vocab_size=-5"])
    assert "--vocab_size: -5 is negative" in capsys.readouterr().err


def test_bpe_dropout_and_copies_reach_datagen(recipe, shared_data, tmp_path):
    raw = _head_of_multi30k(shared_data, tmp_path / "raw", 400)
    base = [f"--raw_dir={raw}", f"--work_dir={tmp_path}", "--vocab_size=600"]
    args = recipe._arguments(base)
    assert args.bpe_dropout is None and args.train_copies is None  # the problem's own
    flags = ["--bpe_dropout=0.1", "--train_copies=2"]
    metadata = recipe.generate(recipe._arguments(base + flags), str(tmp_path / "d"))
    assert (metadata["settings"]["bpe_dropout"], metadata["settings"]["train_copies"]) == (0.1, 2)
    assert metadata["splits"]["train"]["examples"] == 800
    assert metadata["splits"]["dev"]["examples"] == 400
    with pytest.raises(SystemExit) as refused:
        recipe.generate(recipe._arguments(base + ["--train_copies=0"]), str(tmp_path / "e"))
    assert str(refused.value.code).startswith("multi30k_recipe: train_copies=0: give the number")
