"""WMT14 English-German and English-French (the paper's tasks), both directions.

Dev is newstest2013 and test newstest2014, as in the paper. Two sources:

* TensorFlow Datasets `wmt14_translate/de-en` and `wmt14_translate/fr-en` (downloads
  the corpora; needs a network): used when no raw folder exists, or with `--source=tfds`;
  `--tfds_data_dir` says where TFDS keeps them.
* Plain-text files in `DATA_DIR/<folder>/raw/` (or `--raw_dir`), one sentence per line,
  line-aligned, UTF-8, optionally gzipped, named `<stem>.<language>`:

      newstest2013.en  newstest2013.de        dev
      newstest2014.en  newstest2014.de        test
      <corpus>.en      <corpus>.de            train: every other stem, e.g.
                                              europarl-v7.de-en.{en,de},
                                              commoncrawl.de-en.{en,de},
                                              news-commentary-v9.de-en.{en,de}

  (`fr` instead of `de` for En-Fr). The WMT14 corpora keep these names once extracted;
  the test sets come as SGML, and `sacrebleu -t wmt14 -l en-de --echo src > newstest2014.en`
  (`--echo ref` for the German side) writes them as plain text.

The reverse problems `wmt14_deen` and `wmt14_fren` read the data of `wmt14_ende` and
`wmt14_enfr` (same folder, same raw files, same vocabulary) with inputs and targets swapped.
"""

from __future__ import annotations

import os

from t2t_lite.problems.corpus import RawCorpus, TfdsCorpus
from t2t_lite.problems.translate import TranslateProblem


class Wmt14Problem(TranslateProblem):
    """A WMT14 language pair; raw files or TFDS."""

    source_language = "en"
    raw_stems = {"train": ("*",), "dev": ("newstest2013",), "test": ("newstest2014",)}
    num_shards = {"train": 64}
    vocab_sample_size = 2_000_000
    tfds_name = ""
    tfds_splits = {"train": "train", "dev": "validation", "test": "test"}
    tfds_data_dir = None  # TFDS's default (~/tensorflow_datasets)

    def corpus(
        self, data_dir: str, raw_dir: str | None, source: str, tfds_data_dir: str | None = None
    ):
        """Raw files when `raw_dir` is given or `DATA_DIR/<folder>/raw` exists, else TFDS.

        TFDS keeps its data in `tfds_data_dir`, else the class's `tfds_data_dir`, else its
        own default (~/tensorflow_datasets).
        """
        if source not in ("auto", "raw", "tfds"):
            raise ValueError(f"source must be auto, raw or tfds; got {source!r}")
        default_raw = os.path.join(self.folder(data_dir), "raw")
        if source == "raw" or (source == "auto" and (raw_dir or os.path.isdir(default_raw))):
            return RawCorpus(self.raw_files(raw_dir or default_raw))
        return TfdsCorpus(
            self.tfds_name,
            (self.source_language, self.target_language),
            self.tfds_splits,
            tfds_data_dir or self.tfds_data_dir,
        )


class Wmt14EnDe(Wmt14Problem):
    """English -> German; the paper's shared BPE vocabulary of about 37,000 tokens."""

    name = "wmt14_ende"
    target_language = "de"
    vocab_size = 37_000
    tfds_name = "wmt14_translate/de-en"


class Wmt14DeEn(Wmt14EnDe):
    """German -> English, on the data of wmt14_ende."""

    name = "wmt14_deen"
    data_folder = "wmt14_ende"
    reverse = True


class Wmt14EnFr(Wmt14Problem):
    """English -> French; the paper's 32,000-token word-piece vocabulary size."""

    name = "wmt14_enfr"
    target_language = "fr"
    vocab_size = 32_000
    tfds_name = "wmt14_translate/fr-en"


class Wmt14FrEn(Wmt14EnFr):
    """French -> English, on the data of wmt14_enfr."""

    name = "wmt14_fren"
    data_folder = "wmt14_enfr"
    reverse = True
