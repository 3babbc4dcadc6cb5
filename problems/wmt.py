"""WMT14 English-German and English-French (the paper's tasks), both directions.

Dev is newstest2013 and test newstest2014, as in the paper. Three sources:

* WMT's archives, unchanged, in `DATA_DIR/<folder>/raw/` (or `--raw_dir`): the training
  corpora (Europarl v7, Common Crawl, News Commentary v9; for En-Fr also the UN and 10^9
  French-English corpora), `dev.tgz` and `test-full.tgz` (newstest2014 as SGML). See
  `wmt_archives` for the members read; `--download` fetches the missing ones (resuming,
  checked against their recorded checksums; `download`).
* Plain-text files in the same folder, one sentence per line, line-aligned, UTF-8,
  optionally gzipped, named `<stem>.<language>`:

      newstest2013.en  newstest2013.de        dev
      newstest2014.en  newstest2014.de        test
      <corpus>.en      <corpus>.de            train: every other stem, e.g.
                                              europarl-v7.de-en.{en,de},
                                              commoncrawl.de-en.{en,de},
                                              news-commentary-v9.de-en.{en,de}

  (`fr` instead of `de` for En-Fr): the archives' members keep these names once
  extracted, and `sacrebleu -t wmt14/full -l en-de --echo src > newstest2014.en` (`--echo
  ref` for the German side) writes the test set. A folder holding any of the pair's
  archives is read as archives.
* TensorFlow Datasets `wmt14_translate/de-en` and `wmt14_translate/fr-en` (downloads
  the corpora; needs a network): used when no raw folder exists, or with `--source=tfds`;
  `--tfds_data_dir` says where TFDS keeps them.

The reverse problems `wmt14_deen` and `wmt14_fren` read the data of `wmt14_ende` and
`wmt14_enfr` (same folder, same raw files, same vocabulary) with inputs and targets swapped.
"""

from __future__ import annotations

import os

from t2t_lite.problems import download as downloads
from t2t_lite.problems import wmt_archives
from t2t_lite.problems.corpus import RawCorpus, TfdsCorpus
from t2t_lite.problems.translate import TranslateProblem


class Wmt14Problem(TranslateProblem):
    """A WMT14 language pair; WMT's archives, raw files or TFDS."""

    source_language = "en"
    raw_stems = {"train": ("*",), "dev": ("newstest2013",), "test": ("newstest2014",)}
    num_shards = {"train": 64}
    vocab_sample_size = 2_000_000
    tfds_name = ""
    tfds_splits = {"train": "train", "dev": "validation", "test": "test"}
    tfds_data_dir = None  # TFDS's default (~/tensorflow_datasets)
    downloadable = True

    def corpus(
        self,
        data_dir: str,
        raw_dir: str | None,
        source: str,
        tfds_data_dir: str | None = None,
        download: downloads.Source | None = None,
        progress=None,
    ):
        """The raw folder when `raw_dir` is given or `DATA_DIR/<folder>/raw` exists, else TFDS.

        A raw folder holding any of the pair's archives is read as archives, else as
        text files. With `download`, the missing archives are fetched into the raw folder
        first (created if need be). TFDS keeps its data in `tfds_data_dir`, else the
        class's `tfds_data_dir`, else its own default (~/tensorflow_datasets).
        """
        if source not in ("auto", "raw", "tfds"):
            raise ValueError(f"source must be auto, raw or tfds; got {source!r}")
        if download is not None and source == "tfds":
            raise ValueError("--download fetches WMT's archives, which --source=tfds does not read")
        folder = raw_dir or os.path.join(self.folder(data_dir), "raw")
        languages = (self.source_language, self.target_language)
        if download is not None:
            archives = wmt_archives.archives_of(languages)
            downloads.fetch_all(archives, folder, download, progress)
            return wmt_archives.ArchiveCorpus(folder, languages)
        if source == "raw" or (source == "auto" and (raw_dir or os.path.isdir(folder))):
            if os.path.isdir(folder) and wmt_archives.has_archives(folder, languages):
                return wmt_archives.ArchiveCorpus(folder, languages)
            return RawCorpus(self.raw_files(folder))
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
