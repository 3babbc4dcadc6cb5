"""Datagen of translation problems on real corpora: contents, metadata, reruns, bad input."""

import gzip
import json
import os
from collections import Counter

import pytest
import sentencepiece as spm
import tensorflow_datasets as tfds

from t2t_lite import problems
from t2t_lite.problems import algorithmic
from t2t_lite.problems.corpus import RawCorpus, TfdsCorpus
from t2t_lite.problems.translate import DataError, TranslateProblem


def raw_lines(path) -> list:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read().decode("utf-8").split("\n")[:-1]


def reference_pairs(model_path, source_path, target_path) -> list:
    """(inputs, targets) tuples encoded with plain SentencePiece, EOS appended."""
    reference = spm.SentencePieceProcessor(model_file=str(model_path))
    return [
        (tuple(reference.encode(s)) + (1,), tuple(reference.encode(t)) + (1,))
        for s, t in zip(raw_lines(source_path), raw_lines(target_path), strict=True)
    ]


def as_tuples(dataset) -> list:
    """(inputs, targets) tuples of a dataset of examples, in order."""
    pairs = []
    for batch in dataset.ragged_batch(4096):
        inputs, targets = batch["inputs"].to_list(), batch["targets"].to_list()
        pairs += [(tuple(x), tuple(y)) for x, y in zip(inputs, targets)]
    return pairs


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory, shared_data):
    data_dir = str(tmp_path_factory.mktemp("data"))
    problem = problems.get("multi30k_ende")
    metadata = problem.generate_data(data_dir, str(shared_data / "multi30k"), vocab_size=1000)
    return problem, data_dir, metadata


def test_registry_lists_the_translation_problems():
    names = problems.names()
    for name in ("multi30k_ende", "multi30k_enfr", "wmt14_ende", "wmt14_deen", "wmt14_enfr"):
        assert name in names
    assert problems.get("wmt14_ende").vocab_size == 37_000  # the paper's En-De size
    assert problems.get("wmt14_enfr").vocab_size == 32_000
    assert algorithmic.AlgorithmicCopy().vocab_file("anywhere") is None


def test_dev_and_test_keep_the_raw_order(multi30k, shared_data):
    problem, data_dir, metadata = multi30k
    raw = shared_data / "multi30k"
    model = problem.vocab_file(data_dir)
    for split, stem in (("dev", "val"), ("test", "test_2016_flickr")):
        expected = reference_pairs(model, raw / f"{stem}.en.gz", raw / f"{stem}.de.gz")
        assert as_tuples(problem.examples(split, data_dir)) == expected
        assert metadata["splits"][split]["examples"] == len(expected)


def test_train_holds_every_pair_once_and_records_its_lengths(multi30k, shared_data):
    problem, data_dir, metadata = multi30k
    raw = shared_data / "multi30k"
    expected = reference_pairs(
        problem.vocab_file(data_dir), raw / "train.en.gz", raw / "train.de.gz"
    )
    got = as_tuples(problem.examples("train", data_dir))
    assert len(got) == 29_000 and Counter(got) == Counter(expected)
    assert got[:50] != expected[:50], "the train split is shuffled at datagen"
    split = metadata["splits"]["train"]
    assert (split["examples"], split["skipped_empty"]) == (29_000, 0)
    # Example i goes to shard i mod 8: 29,000 = 8 x 3,625.
    assert [s["examples"] for s in split["shards"]] == [3625] * 8
    assert split["source_tokens"] == sum(len(s) for s, _ in expected)
    assert split["target_tokens"] == sum(len(t) for _, t in expected)
    lengths = Counter(max(len(s), len(t)) for s, t in expected)
    assert problem.length_counts("train", data_dir) == dict(lengths)
    assert problem.dropped_examples("train", data_dir, 20) == sum(
        c for n, c in lengths.items() if n > 20
    )


def test_rerun_with_unchanged_inputs_is_a_no_op(multi30k, shared_data):
    problem, data_dir, metadata = multi30k
    folder = problem.folder(data_dir)
    before = {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in os.listdir(folder)}
    again = problem.generate_data(data_dir, str(shared_data / "multi30k"), vocab_size=1000)
    assert again["status"] == "up to date" and metadata["status"] == "generated"
    assert again["fingerprint"] == metadata["fingerprint"] == problem.fingerprint(data_dir)
    after = {name: os.stat(os.path.join(folder, name)).st_mtime_ns for name in os.listdir(folder)}
    assert after == before


def test_encoders_expose_the_vocab_file(multi30k):
    problem, data_dir, _ = multi30k
    encoders = problem.encoders(data_dir)
    assert encoders["inputs"] is encoders["targets"]
    assert encoders["inputs"].model_path == problem.vocab_file(data_dir)
    assert problem.vocab_sizes(data_dir) == (1000, None)


class TinyEnDe(TranslateProblem):
    name = "tiny_ende"
    vocab_size = 400
    num_shards = {"train": 3}


@pytest.fixture
def tiny(tmp_path, shared_data):
    """A raw folder with real captions: train 300, dev 40, test 40 pairs."""
    raw = tmp_path / "raw"
    raw.mkdir()
    multi30k = shared_data / "multi30k"
    for language in ("en", "de"):
        lines = raw_lines(multi30k / f"train.{language}.gz")
        for split, part in (
            ("train", lines[:300]),
            ("dev", lines[300:340]),
            ("test", lines[340:380]),
        ):
            (raw / f"{split}.{language}").write_text("\n".join(part) + "\n", encoding="utf-8")
    return TinyEnDe(), str(tmp_path / "data"), raw


def test_fingerprint_follows_inputs_and_settings(tiny):
    problem, data_dir, raw = tiny
    first = problem.generate_data(data_dir, str(raw))
    resized = problem.generate_data(data_dir, str(raw), vocab_size=420)
    assert resized["status"] == "generated" and resized["fingerprint"] != first["fingerprint"]
    assert problem.encoders(data_dir)["inputs"].vocab_size == 420
    lines = raw_lines(raw / "dev.de")
    (raw / "dev.de").write_text("\n".join(lines[:-1] + ["Ein anderer Satz."]) + "\n")
    edited = problem.generate_data(data_dir, str(raw), vocab_size=420)
    assert edited["status"] == "generated"
    assert len({first["fingerprint"], resized["fingerprint"], edited["fingerprint"]}) == 3


def test_mismatched_line_counts_name_file_and_line(tiny):
    problem, data_dir, raw = tiny
    lines = raw_lines(raw / "train.de")
    (raw / "train.de").write_text("\n".join(lines[:-2]) + "\n")
    with pytest.raises(
        DataError,
        match=rf"{raw}/train.en:299: line has no partner: {raw}/train.de ends after 298 lines",
    ):
        problem.generate_data(data_dir, str(raw))


def test_invalid_utf8_names_file_and_line(tiny):
    problem, data_dir, raw = tiny
    data = (raw / "dev.de").read_bytes().split(b"\n")
    data[16] = data[16][:5] + b"\xff\xfe" + data[16][5:]
    (raw / "dev.de").write_bytes(b"\n".join(data))
    with pytest.raises(DataError, match=rf"{raw}/dev.de:17: invalid UTF-8 at byte 5"):
        problem.generate_data(data_dir, str(raw))


def test_missing_files_are_named(tiny, tmp_path):
    problem, data_dir, raw = tiny
    os.remove(raw / "test.de")
    with pytest.raises(
        DataError, match=rf"{raw}/test.de\[.gz\]: file not found; problem tiny_ende expects"
    ):
        problem.generate_data(data_dir, str(raw))
    with pytest.raises(DataError, match=rf"{tmp_path}/nowhere: raw data folder not found"):
        problem.generate_data(data_dir, str(tmp_path / "nowhere"))
    with pytest.raises(
        DataError, match=r"metadata.json: not found.*t2t_lite.datagen --problem=tiny_ende"
    ):
        problem.examples("train", data_dir)


def test_plain_and_gzipped_twins_are_ambiguous(tiny):
    problem, data_dir, raw = tiny
    with gzip.open(raw / "dev.en.gz", "wb") as f:
        f.write((raw / "dev.en").read_bytes())
    with pytest.raises(DataError, match="dev.en exists both plain and gzipped"):
        problem.generate_data(data_dir, str(raw))


def test_empty_corpus_is_an_error(tiny):
    problem, data_dir, raw = tiny
    (raw / "test.en").write_text("")
    (raw / "test.de").write_text("")
    with pytest.raises(
        DataError, match=rf"{raw}/test.en \+ {raw}/test.de: no non-empty sentence pairs"
    ):
        problem.generate_data(data_dir, str(raw))
    (raw / "train.en").write_text("\n \n\n")
    (raw / "train.de").write_text("\n\n\t\n")
    with pytest.raises(DataError, match=r"train.en \+ .*train.de: no text \(empty corpus\)"):
        problem.generate_data(data_dir, str(raw))


def test_empty_lines_are_skipped_and_counted(tiny):
    problem, data_dir, raw = tiny
    en, de = raw_lines(raw / "train.en"), raw_lines(raw / "train.de")
    en[9], de[99], en[199], de[199] = "", "   ", "", ""  # lines 10, 100 and 200
    (raw / "train.en").write_text("\n".join(en) + "\n")
    (raw / "train.de").write_bytes(("\r\n".join(de) + "\r\n").encode())  # Windows line ends
    metadata = problem.generate_data(data_dir, str(raw))
    split = metadata["splits"]["train"]
    assert (split["examples"], split["skipped_empty"]) == (297, 3)
    assert split["skipped_first"] == [f"{raw}/train.en:{n}" for n in (10, 100, 200)]
    encoder = problem.encoders(data_dir)["targets"]
    targets = [
        encoder.decode(e["targets"])
        for e in problem.examples("train", data_dir).as_numpy_iterator()
    ]
    kept = [d for e, d in zip(en, de) if e.strip() and d.strip()]
    assert Counter(targets) == Counter(kept)


def test_replaced_vocab_does_not_match_the_data(tiny, tmp_path):
    problem, data_dir, raw = tiny
    problem.generate_data(data_dir, str(raw))
    other = TinyEnDe()
    other.generate_data(str(tmp_path / "other"), str(raw), vocab_size=350)
    os.replace(other.vocab_file(str(tmp_path / "other")), problem.vocab_file(data_dir))
    with pytest.raises(DataError, match=r"vocab.model: the vocabulary does not match the data"):
        problem.encoders(data_dir)
    with pytest.raises(
        DataError, match=r"does not match the data.*rerun `python -m t2t_lite.datagen"
    ):
        problem.examples("dev", data_dir)


def test_an_interrupted_run_leaves_nothing_trusted(tiny):
    problem, data_dir, raw = tiny
    problem.generate_data(data_dir, str(raw))
    folder = problem.folder(data_dir)
    # A rerun on changed input that fails half-way (the test split is written last).
    good = (raw / "test.en").read_bytes()
    (raw / "test.en").write_bytes(good.replace(b"\n", b"\n\xc3(", 1))
    with pytest.raises(DataError, match="test.en:2: invalid UTF-8"):
        problem.generate_data(data_dir, str(raw))
    assert not os.path.exists(os.path.join(folder, "metadata.json"))
    assert [name for name in os.listdir(folder) if ".tmp-" in name] == []
    with pytest.raises(DataError, match="metadata.json: not found"):
        problem.examples("train", data_dir)
    # What a killed run leaves: temporary files and stray shards; the next run clears them.
    for name in (
        "train-00000-of-00003.tfrecord.tmp-999",
        "vocab.model.tmp-999",
        "dev-00007-of-00009.tfrecord",
    ):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"partial")
    (raw / "test.en").write_bytes(good)
    assert problem.generate_data(data_dir, str(raw))["status"] == "generated"
    names = sorted(os.listdir(folder))
    assert names == sorted(
        [
            "metadata.json",
            "vocab.model",
            "vocab.vocab",
            "dev-00000-of-00001.tfrecord",
            "test-00000-of-00001.tfrecord",
        ]
        + [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    )
    with open(os.path.join(folder, "metadata.json")) as f:
        assert json.load(f)["splits"]["dev"]["examples"] == 40


WMT_TRAIN = ("newstest2010", "newssyscomb2009")


@pytest.fixture(scope="module")
def wmt_raw(tmp_path_factory, shared_data):
    """WMT14 raw layout made of links to real news files (nothing copied).

    Training: two older news test sets; dev: newstest2013; test: newstest2012 standing in
    for newstest2014, which is not among the shared files.
    """
    raw = tmp_path_factory.mktemp("wmt_raw")
    news = shared_data / "wmt_news_2008_2012"
    for language in ("en", "de"):
        for stem in WMT_TRAIN:
            os.symlink(news / f"{stem}.en-de.{language}", raw / f"{stem}.en-de.{language}")
        os.symlink(
            shared_data / "wmt13_newstest2013" / f"newstest2013.{language}",
            raw / f"newstest2013.{language}",
        )
        os.symlink(news / f"newstest2012.en-de.{language}", raw / f"newstest2014.{language}")
    return raw


def test_wmt14_raw_layout_and_reverse_direction(wmt_raw, tmp_path, shared_data):
    data_dir = str(tmp_path)
    forward, backward = problems.get("wmt14_ende"), problems.get("wmt14_deen")
    metadata = backward.generate_data(data_dir, str(wmt_raw), vocab_size=1000)
    assert forward.folder(data_dir) == backward.folder(data_dir)
    assert metadata["splits"]["train"]["examples"] == 2489 + 502
    assert metadata["settings"]["num_shards"] == {"train": 64, "dev": 1, "test": 1}
    assert forward.generate_data(data_dir, str(wmt_raw), vocab_size=1000)["status"] == "up to date"
    newstest = shared_data / "wmt13_newstest2013"
    expected = reference_pairs(
        forward.vocab_file(data_dir), newstest / "newstest2013.en", newstest / "newstest2013.de"
    )
    assert as_tuples(forward.examples("dev", data_dir)) == expected
    assert as_tuples(backward.examples("dev", data_dir)) == [(t, s) for s, t in expected]
    encoder = backward.encoders(data_dir)["inputs"]
    first = next(backward.examples("test", data_dir).as_numpy_iterator())
    assert encoder.decode(first["inputs"]) == raw_lines(wmt_raw / "newstest2014.de")[0]


def test_wmt14_unpaired_training_file_is_named(wmt_raw, tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in os.listdir(wmt_raw):
        os.symlink(os.readlink(wmt_raw / name), raw / name)
    os.remove(raw / "newstest2010.en-de.de")
    with pytest.raises(DataError, match=rf"{raw}/newstest2010.en-de.de\[.gz\]: file not found"):
        problems.get("wmt14_ende").generate_data(str(tmp_path), str(raw), vocab_size=1000)


def test_wmt14_from_tfds_converts_every_split(tmp_path):
    problem = problems.get("wmt14_ende")
    data_dir = str(tmp_path)
    with tfds.testing.mock_data(num_examples=40):
        metadata = problem.generate_data(data_dir, source="tfds", vocab_size=300)
        builder = tfds.builder("wmt14_translate/de-en")
        expected = {
            ours: [
                (e["en"].decode(), e["de"].decode())
                for e in tfds.as_numpy(builder.as_dataset(split=theirs))
            ]
            for ours, theirs in (("train", "train"), ("dev", "validation"), ("test", "test"))
        }
    assert metadata["inputs"] == {
        "tfds": "wmt14_translate/de-en",
        "version": str(builder.info.version),
    }
    encoder = problem.encoders(data_dir)["inputs"]
    for split, pairs in expected.items():
        kept = [p for p in pairs if p[0].strip() and p[1].strip()]
        assert metadata["splits"][split]["skipped_empty"] == len(pairs) - len(kept)
        decoded = [
            (encoder.decode(e["inputs"]), encoder.decode(e["targets"]))
            for e in problem.examples(split, data_dir).as_numpy_iterator()
        ]
        if split == "train":
            assert Counter(decoded) == Counter(kept)
        else:
            assert decoded == kept


def test_wmt14_auto_source_falls_back_to_tfds_without_a_raw_folder(tmp_path, wmt_raw):
    problem = problems.get("wmt14_ende")
    data_dir = str(tmp_path)
    assert not os.path.exists(os.path.join(problem.folder(data_dir), "raw"))
    with tfds.testing.mock_data(num_examples=30):
        metadata = problem.generate_data(data_dir, vocab_size=300)  # source="auto"
        builder = tfds.builder("wmt14_translate/de-en")
        train = [
            (e["en"].decode(), e["de"].decode())
            for e in tfds.as_numpy(builder.as_dataset(split="train"))
        ]
    assert metadata["status"] == "generated"
    assert metadata["inputs"] == {
        "tfds": "wmt14_translate/de-en",
        "version": str(builder.info.version),
    }
    kept = [pair for pair in train if pair[0].strip() and pair[1].strip()]
    assert metadata["splits"]["train"]["examples"] == len(kept) > 0
    # Where TFDS keeps its data is the caller's choice, else the class's (TFDS's default).
    corpus = problem.corpus(data_dir, None, "auto", tfds_data_dir=str(tmp_path / "tfds"))
    assert isinstance(corpus, TfdsCorpus) and corpus.data_dir == str(tmp_path / "tfds")
    assert problem.corpus(data_dir, None, "auto").data_dir is None
    # Once DATA_DIR/wmt14_ende/raw exists, "auto" reads it instead.
    raw = os.path.join(problem.folder(data_dir), "raw")
    os.symlink(wmt_raw, raw)
    corpus = problem.corpus(data_dir, None, "auto")
    assert isinstance(corpus, RawCorpus)
    assert corpus.files["dev"][0].source == os.path.join(raw, "newstest2013.en")


def test_tfds_data_dir_is_refused_by_raw_only_problems(tiny):
    problem, data_dir, raw = tiny
    with pytest.raises(ValueError, match="tiny_ende reads raw files only, so tfds_data_dir"):
        problem.generate_data(data_dir, str(raw), tfds_data_dir="/tmp/tfds")
