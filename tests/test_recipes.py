"""The paper recipes of tools/recipes run end to end at toy scale, so none of them rots.

The four recipes are one line each over `paper_recipe.sh`: two of them (one per language
pair, one per model size) run end to end, and every one is checked for the paper's
settings (section 6.1: base 100,000 steps and the last 5 checkpoints averaged, big
300,000 and the last 20).

The real news files of ../shared/data stand in for the WMT14 corpora: news-test2008 to
newstest2012 as training text, newstest2013 as dev, 12 lines of newstest2012 as "newstest2014".
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "tools" / "recipes"
TOY = (
    "num_encoder_layers=1,num_decoder_layers=1,hidden_size=32,filter_size=64,num_heads=2,"
    "batch_size=512,max_length=64,effective_batch_tokens=1024"
)


def _toy_raw_dir(shared_data: Path, folder: Path, target: str) -> Path:
    news = shared_data / "wmt_news_2008_2012"
    pair = f"en-{target}"
    folder.mkdir(parents=True)
    for stem in (
        "news-test2008",
        "newssyscomb2009",
        "newstest2009",
        "newstest2010",
        "newstest2011",
    ):
        for language in ("en", target):
            (folder / f"{stem}.{pair}.{language}").symlink_to(news / f"{stem}.{pair}.{language}")
    for language in ("en", target):
        (folder / f"newstest2013.{language}").symlink_to(
            shared_data / "wmt13_newstest2013" / f"newstest2013.{language}"
        )
        lines = (news / f"newstest2012.{pair}.{language}").read_text().splitlines()[:12]
        (folder / f"newstest2014.{language}").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def language_pair_dirs(shared_data, tmp_path_factory):
    """(raw_dir, data_dir) per target language, shared by that pair's base and big recipes.

    As with the recipes' default DATA_DIR, the second recipe of a pair finds the first one's
    datagen output and its datagen step is a no-op.
    """
    folders = {}

    def get(target: str):
        if target not in folders:
            root = tmp_path_factory.mktemp(f"en_{target}")
            folders[target] = (_toy_raw_dir(shared_data, root / "raw", target), root / "data")
        return folders[target]

    return get


@pytest.mark.slow
@pytest.mark.parametrize(
    "recipe, target, steps, num_last",
    [
        ("wmt14_ende_base.sh", "de", 5, 5),
        ("wmt14_enfr_big.sh", "fr", 20, 20),
    ],
)
def test_recipe_runs_at_toy_scale(recipe, target, steps, num_last, tmp_path, language_pair_dirs):
    raw_dir, data_dir = language_pair_dirs(target)
    run_dir = tmp_path / "run"
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHON=sys.executable,
        DATA_DIR=str(data_dir),
        RUN_DIR=str(run_dir),
        RAW_DIR=str(raw_dir),
        VOCAB_SIZE="1000",
        TRAIN_STEPS=str(steps),
        SAVE_EVERY="1",
        EVAL_EVERY="1000",
        EVAL_BLEU_SENTENCES="0",
        EXTRA_HPARAMS=TOY,
    )
    result = subprocess.run(
        ["bash", str(RECIPES / recipe)], env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    # The step size: 1,024 tokens per update from 512-token batches = 2 accumulated batches.
    assert "x 2 accumulated = 1,024 effective tokens per update" in result.stdout
    averaging = json.loads((run_dir / "averaged" / "averaging.json").read_text())
    assert len(averaging["sources"]) == num_last
    assert tf.train.latest_checkpoint(str(run_dir / "averaged")).endswith(f"ckpt-{steps}")
    decoded = (run_dir / f"newstest2014.{target}.decoded").read_text().splitlines()
    assert len(decoded) == 12  # one output line per input line, whatever the model emits
    scores = json.loads((run_dir / f"newstest2014.{target}.decoded.bleu.json").read_text())
    assert scores["sacrebleu"]["signature"].startswith("nrefs:1|case:mixed")
    assert "tokenized" in scores["tokenized_bleu"]["label"]


@pytest.mark.parametrize(
    "recipe, problem, hparams_set, steps, num_last",
    [
        ("wmt14_ende_base.sh", "wmt14_ende", "transformer_base", 100_000, 5),
        ("wmt14_ende_big.sh", "wmt14_ende", "transformer_big", 300_000, 20),
        ("wmt14_enfr_base.sh", "wmt14_enfr", "transformer_base", 100_000, 5),
        ("wmt14_enfr_big.sh", "wmt14_enfr", "transformer_big_enfr", 300_000, 20),
    ],
)
def test_each_recipe_has_the_papers_settings(recipe, problem, hparams_set, steps, num_last):
    lines = [
        line
        for line in (RECIPES / recipe).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines == [
        f'exec "$(dirname "$0")/paper_recipe.sh" {problem} {hparams_set} '
        f'"${{TRAIN_STEPS:-{steps}}}" {num_last}'
    ]
