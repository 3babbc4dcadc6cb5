"""Text-to-text problems from parallel corpora: raw text -> shared vocab -> sharded TFRecords.

`TranslateProblem.generate_data` (what `python -m t2t_lite.datagen` runs) does, once,
reporting each stage as it goes (see `progress`):

1. read the corpus: plain-text files in the raw folder (`<stem>.<language>`, one
   sentence per line, optionally gzipped) or, for subclasses that offer it, TFDS; a
   first quick pass counts the pairs, so later stages can say how long they have to go;
2. train a shared SentencePiece BPE vocabulary on a bounded random sample of the
   training sentences of both languages (`vocab.model`; see `sampling`);
3. encode every split into `tf.train.Example` records with int64 features "inputs"
   and "targets" ending in EOS, in worker processes, one per CPU (see `encoding`):
   `<split>-00000-of-00008.tfrecord`, ... Example i goes to shard i mod F, so reading
   the F shards in turn gives back the corpus order; the train shards are then
   shuffled inside, which spreads every part of the corpus over every stretch of the
   read order. The output is the same bytes whatever the number of workers, and
   memory does not grow with the corpus;
4. write `metadata.json` last: counts, skipped empty lines, the length histogram, the
   sha256 of the vocabulary and of every shard, and a fingerprint of the raw inputs and
   settings.

Rerunning with the same inputs and settings checks the files against their hashes (a
full read, cheap next to a build) and does nothing more when they match. A shard whose
bytes changed (even at the same size) is named and the data rebuilt from the raw
inputs, which the fingerprint says are the ones it was made from. Readers (`metadata`)
check sizes only, as they run often. Shards and the vocabulary are written under
temporary names and renamed when complete, and `metadata.json` (which readers require)
is removed first and written last, so an interrupted run leaves nothing that a reader
or a later run would trust.

Bad input raises `DataError` naming the file and line: a missing file, invalid UTF-8,
source and target files of different lengths, a corpus with no text. A pair whose
source or target line is empty (or only whitespace and NUL characters) is skipped and
counted in the metadata ("skipped_empty", with the first locations), never silently.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

import tensorflow as tf

from t2t_lite.metrics import bleu_report
from t2t_lite.problems import records
from t2t_lite.problems.corpus import DataError, ParallelFiles, RawCorpus, find_stems
from t2t_lite.problems.problem import Problem
from t2t_lite.problems.progress import Progress
from t2t_lite.problems.records import METADATA_FILE, VOCAB_FILE
from t2t_lite.problems.vocab import SentencePieceEncoder

FORMAT_VERSION = 1


class TranslateProblem(Problem):
    """A text-to-text problem over parallel corpora with a shared SentencePiece vocabulary.

    Subclass and set `name`, the languages and, when your files are not named
    `train.<lang>`, `dev.<lang>` and `test.<lang>`, `raw_stems`. The raw folder defaults
    to `DATA_DIR/<name>/raw/`. For example:

        class EuroparlEnEs(TranslateProblem):
            name = "europarl_enes"
            source_language, target_language = "en", "es"
            raw_stems = {"train": ("europarl-v7.es-en",), "dev": ("dev",), "test": ("test",)}
            vocab_size = 16_000
    """

    source_language = "en"
    target_language = "de"
    # Split -> file stems `<stem>.<language>[.gz]`; "*" = every stem no other split names.
    raw_stems = {"train": ("train",), "dev": ("dev",), "test": ("test",)}
    vocab_size = 8000
    vocab_sample_size = 1_000_000  # sentences the vocabulary is trained on, at most
    model_type = "bpe"
    bpe_dropout = 0.0  # > 0: train pairs segmented by BPE-dropout (Provilkov et al., 2020)
    train_copies = 1  # train pairs written this many times, each segmented anew
    num_shards = {"train": 8}  # other splits: 1
    # A reverse problem reads the data of `data_folder` with inputs and targets swapped.
    reverse = False
    data_folder = ""  # defaults to `name`
    tfds_name = ""  # the TensorFlow Datasets builder of subclasses that offer one
    downloadable = False  # whether `corpus` can fetch the published files (download=)
    eval_metric = "bleu"

    # Where things are.
    def folder(self, data_dir: str) -> str:
        """`DATA_DIR/<data_folder or name>`: vocabulary, shards and metadata."""
        return os.path.join(data_dir, self.data_folder or self.name)

    def vocab_file(self, data_dir: str) -> str:
        """The SentencePiece model shared by inputs and targets."""
        return os.path.join(self.folder(data_dir), VOCAB_FILE)

    def raw_files(self, raw_dir: str) -> dict:
        """Split -> [ParallelFiles] found in `raw_dir` following `raw_stems`.

        Raises:
            DataError: for a missing folder or file, a file without its partner in the
                other language, or a stem present both plain and gzipped.
        """
        if not os.path.isdir(raw_dir):
            raise DataError(f"{raw_dir}: raw data folder not found; {self._naming()}")
        found = find_stems(raw_dir, (self.source_language, self.target_language))
        named = {stem for stems in self.raw_stems.values() for stem in stems if stem != "*"}
        files = {}
        for split, stems in self.raw_stems.items():
            wanted = []
            for stem in stems:
                wanted += sorted(set(found) - named) if stem == "*" else [stem]
            if not wanted:
                raise DataError(f"{raw_dir}: no files for split {split}; {self._naming()}")
            files[split] = [self._pair(raw_dir, stem, found.get(stem, {})) for stem in wanted]
        return files

    def _pair(self, raw_dir: str, stem: str, paths: dict) -> ParallelFiles:
        for language in (self.source_language, self.target_language):
            if language not in paths:
                raise DataError(
                    f"{os.path.join(raw_dir, f'{stem}.{language}')}[.gz]: file not found; "
                    f"{self._naming()}"
                )
        return ParallelFiles(paths[self.source_language], paths[self.target_language])

    def _naming(self) -> str:
        pairs = ", ".join(
            f"{split}: "
            + " ".join(f"{s}.{self.source_language}/.{self.target_language}" for s in st)
            for split, st in self.raw_stems.items()
        )
        return f"problem {self.name} expects line-aligned files (optionally .gz) {pairs}"

    def corpus(self, data_dir: str, raw_dir: str | None, source: str):
        """The corpus to generate from: raw files (the only source of this class)."""
        if source not in ("auto", "raw"):
            raise ValueError(f"problem {self.name} reads raw files only; got source={source!r}")
        return RawCorpus(self.raw_files(raw_dir or os.path.join(self.folder(data_dir), "raw")))

    # Datagen.
    def generate_data(
        self,
        data_dir: str,
        raw_dir: str | None = None,
        *,
        vocab_size: int | None = None,
        bpe_dropout: float | None = None,
        train_copies: int | None = None,
        source: str = "auto",
        tfds_data_dir: str | None = None,
        progress: Progress | None = None,
        workers: int | None = None,
        download=None,
    ) -> dict:
        """Builds vocabulary, shards and metadata under `folder(data_dir)`, unless up to date.

        Args:
            data_dir: the data folder (one sub-folder per problem).
            raw_dir: the raw text folder; defaults to `DATA_DIR/<folder>/raw`.
            vocab_size: overrides the class's `vocab_size`.
            bpe_dropout: overrides the class's `bpe_dropout`: the chance that each BPE
                merge is skipped when a training pair is segmented (0.1 in Provilkov et
                al., 2020); dev and test keep the one deterministic segmentation.
            train_copies: overrides the class's `train_copies`: how many times the
                training pairs are written, each copy segmented anew (with BPE-dropout,
                about one per epoch the training will run).
            source: "auto", "raw" or (where offered) "tfds".
            tfds_data_dir: where TensorFlow Datasets keeps its downloads and prepared
                data, for problems that offer the TFDS source (`tfds_name`).
            progress: reports the stages (`t2t_lite.datagen` log, INFO); default:
                a line every 5 seconds per running stage.
            workers: processes that encode, shuffle and hash; default: one per CPU.
            download: a `download.Source`: first fetch the corpus files the problem
                reads into the raw folder (problems with `downloadable` only).

        Returns:
            The metadata, with "status" "generated" or "up to date".
        """
        folder = self.folder(data_dir)
        progress = progress or Progress()
        options = {}
        if tfds_data_dir is not None:
            if not self.tfds_name:
                raise ValueError(
                    f"problem {self.name} reads raw files only, so tfds_data_dir does not apply"
                )
            options["tfds_data_dir"] = tfds_data_dir
        if download is not None:
            if not self.downloadable:
                raise ValueError(
                    f"problem {self.name} has no published files to download; put its raw "
                    "files in the raw folder"
                )
            options.update(download=download, progress=progress)
        bpe_dropout = self.bpe_dropout if bpe_dropout is None else bpe_dropout
        train_copies = self.train_copies if train_copies is None else train_copies
        if not 0.0 <= bpe_dropout < 1.0:
            raise ValueError(
                f"bpe_dropout={bpe_dropout}: the chance of skipping a merge must be at least 0 "
                "and below 1 (0.1 in the BPE-dropout paper; 0 for none)"
            )
        if bpe_dropout and self.model_type != "bpe":
            raise ValueError(
                f"bpe_dropout={bpe_dropout} applies to BPE vocabularies; problem {self.name} "
                f"has a {self.model_type} vocabulary"
            )
        if isinstance(train_copies, bool) or not isinstance(train_copies, int) or train_copies < 1:
            raise ValueError(
                f"train_copies={train_copies!r}: give the number of times the training pairs "
                "are written, 1 or more"
            )
        corpus = self.corpus(data_dir, raw_dir, source, **options)
        settings = {
            "format_version": FORMAT_VERSION,
            "languages": [self.source_language, self.target_language],
            "vocab_size": vocab_size or self.vocab_size,
            "vocab_sample_size": self.vocab_sample_size,
            "model_type": self.model_type,
            "num_shards": {split: self.num_shards.get(split, 1) for split in corpus.splits},
        }
        if bpe_dropout or train_copies > 1:  # Absent otherwise: earlier data stays up to date.
            settings.update(bpe_dropout=bpe_dropout, train_copies=train_copies)
        symbols = self.vocab_symbols(corpus)
        if symbols:
            settings["user_symbols"] = symbols
        inputs = corpus.identity()  # reads (or, from TFDS, downloads) the corpus: may fail
        os.makedirs(folder, exist_ok=True)
        fingerprint = records.digest(json.dumps([settings, inputs], sort_keys=True).encode())[:16]
        old = records.load_json(os.path.join(folder, METADATA_FILE))
        if old and old.get("fingerprint") == fingerprint:
            # Content, not just sizes: bytes changed in place keep a shard's size.
            damage = records.damaged(folder, old, content=True, progress=progress)
            if not damage:
                logging.info("%s: up to date (fingerprint %s); nothing to do", folder, fingerprint)
                return {**old, "status": "up to date"}
            # Rebuilt at once: the user ran the command that rebuilds, and the raw
            # inputs are the ones the data was made from (same fingerprint).
            logging.warning("%s; rebuilding the data of %s from its raw inputs", damage, folder)
        metadata = records.generate(folder, corpus, settings, progress, workers)
        metadata.update(fingerprint=fingerprint, inputs=inputs)
        records.write_json(os.path.join(folder, METADATA_FILE), metadata)
        logging.info("%s: generated (fingerprint %s)", folder, fingerprint)
        return {**metadata, "status": "generated"}

    # Outputs.
    def score(self, hypotheses: Sequence[str], references: Sequence[str]) -> dict:
        """sacreBLEU (with its signature) and the paper's tokenized BLEU, each labelled."""
        return dict(metric="bleu", **bleu_report(hypotheses, references, self.target_language))

    def format_scores(self, report: dict) -> list:
        return [
            f"{result['label']}: {result['score']:.2f}  [{result['signature']}]"
            for result in (report["sacrebleu"], report["tokenized_bleu"])
        ]

    def vocab_symbols(self, corpus) -> list:
        """Pieces the vocabulary must hold as single ids (none here; parsing's brackets)."""
        return []

    # Reading.
    def metadata(self, data_dir: str) -> dict:
        """The checked `metadata.json` of a completed datagen run.

        Raises:
            DataError: when datagen has not completed, or a shard or the vocabulary
                no longer matches what datagen wrote.
        """
        folder = self.folder(data_dir)
        metadata = records.load_json(os.path.join(folder, METADATA_FILE))
        if metadata is None:
            raise DataError(
                f"{os.path.join(folder, METADATA_FILE)}: not found, so the data of problem "
                f"{self.name} is missing or incomplete; run `python -m t2t_lite.datagen "
                f"--problem={self.name} --data_dir={data_dir}`"
            )
        damage = records.damaged(folder, metadata)
        if damage:
            raise DataError(
                f"{damage}; rerun `python -m t2t_lite.datagen --problem={self.name} "
                f"--data_dir={data_dir}`"
            )
        return metadata

    def verify(self, data_dir: str) -> None:
        """Each shard's sha256 against metadata.json (a shard rewritten in place keeps its size)."""
        metadata = self.metadata(data_dir)
        damage = records.damaged(self.folder(data_dir), metadata, content=True)
        if damage:
            raise DataError(
                f"{damage}; rerun `python -m t2t_lite.datagen --problem={self.name} "
                f"--data_dir={data_dir}`"
            )

    def encoders(self, data_dir: str) -> dict:
        self.metadata(data_dir)
        encoder = SentencePieceEncoder(self.vocab_file(data_dir))
        return {"inputs": encoder, "targets": encoder}

    def fingerprint(self, data_dir: str) -> str:
        return self.metadata(data_dir)["fingerprint"]

    def length_counts(self, split: str, data_dir: str) -> dict:
        """{length: examples} of max(len(inputs), len(targets)), EOS included."""
        counts = self._split_metadata(split, data_dir)["length_counts"]
        return {int(length): count for length, count in counts.items()}

    def shard_files(self, split: str, data_dir: str) -> list:
        """The TFRecord files of `split`, in shard order."""
        folder = self.folder(data_dir)
        return [
            os.path.join(folder, s["file"]) for s in self._split_metadata(split, data_dir)["shards"]
        ]

    def _split_metadata(self, split: str, data_dir: str) -> dict:
        splits = self.metadata(data_dir)["splits"]
        if split not in splits:
            raise ValueError(f"problem {self.name} has splits {sorted(splits)}, not {split!r}")
        return splits[split]

    def examples(self, split: str, data_dir: str) -> tf.data.Dataset:
        """Examples of `split` in a fixed order (the corpus order for dev and test)."""
        return self._read(self.shard_files(split, data_dir))

    def sharded_examples(self, split, data_dir, input_context=None) -> tf.data.Dataset:
        """Reads whole shard files per input pipeline when they divide evenly.

        Shard i holds examples i, i + F, ... of `examples()`, so files k, k + n, ... are
        exactly the examples that element-wise sharding would give pipeline k.
        """
        files = self.shard_files(split, data_dir)
        count = input_context.num_input_pipelines if input_context else 1
        if count > 1 and len(files) % count == 0:
            return self._read(files[input_context.input_pipeline_id :: count])
        return super().sharded_examples(split, data_dir, input_context)

    def _read(self, files: list) -> tf.data.Dataset:
        dataset = tf.data.Dataset.from_tensor_slices(files).interleave(
            lambda path: tf.data.TFRecordDataset(path, buffer_size=1 << 20),
            cycle_length=len(files),
            block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        spec = {"inputs": tf.io.RaggedFeature(tf.int64), "targets": tf.io.RaggedFeature(tf.int64)}

        def parse(record):
            example = tf.io.parse_single_example(record, spec)
            if self.reverse:
                return {"inputs": example["targets"], "targets": example["inputs"]}
            return example

        return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
