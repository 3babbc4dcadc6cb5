"""Multi30k (Elliott et al., 2016), task 1: image captions in English, German and French.

A small real corpus (29,000 training pairs) that trains on a CPU: what tests, examples
and benchmarks use. There is no TFDS builder; datagen reads the distribution's raw files
as they are named in the Multi30k repository (`data/task1/raw`), gzipped or not:

    train.en.gz  train.de.gz  train.fr.gz                               -> train
    val.en.gz  val.de.gz  val.fr.gz                                     -> dev
    test_2016_flickr.en.gz  test_2016_flickr.de.gz  test_2016_flickr.fr.gz -> test

from `--raw_dir`, or from `DATA_DIR/<problem>/raw/` when it is not given.
"""

from __future__ import annotations

from t2t_lite.problems.translate import TranslateProblem


class Multi30kProblem(TranslateProblem):
    """English to another Multi30k language with a shared BPE vocabulary."""

    source_language = "en"
    raw_stems = {"train": ("train",), "dev": ("val",), "test": ("test_2016_flickr",)}
    vocab_size = 8000
    num_shards = {"train": 8}


class Multi30kEnDe(Multi30kProblem):
    """English -> German."""

    name = "multi30k_ende"
    target_language = "de"


class Multi30kEnFr(Multi30kProblem):
    """English -> French."""

    name = "multi30k_enfr"
    target_language = "fr"
