"""Length-bucketed token batches on real data: budget, coverage, shapes.

The batch properties run on two corpora of different length profiles: Multi30k En-Fr
(short image captions) and WMT news En-De (newstest2010 + newssyscomb2009 as training
text, about 3,000 longer news sentences).
"""

import dataclasses
import gzip
import logging
from collections import Counter

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from t2t_lite import hparams, problems
from t2t_lite.problems import pipeline
from t2t_lite.problems.problem import Problem

# tensor2tensor's boundaries for max_length 256, worked by hand from x -> max(x + 1,
# int(1.1 x)): +1 steps while 1.1 x < x + 2 (x < 20), then 20 -> 22 -> 24 -> ... -> 236,
# and 236 * 1.1 = 259.6 passes 256, which closes the list.
T2T_BOUNDARIES_256 = list(range(8, 21)) + [
    22, 24, 26, 28, 30, 33, 36, 39, 42, 46, 50, 55, 60, 66, 72, 79, 86, 94, 103, 113,
    124, 136, 149, 163, 179, 196, 215, 236, 256,
]  # fmt: skip
HP = dataclasses.replace(hparams.get("transformer_tiny"), batch_size=1024, max_length=256)


def encode_reference(problem, data_dir, files: dict) -> dict:
    """{split: [(inputs, targets)]} of the raw `files` ({split: [(source, target) paths]}),
    encoded with plain SentencePiece, independently of datagen and the pipeline."""
    processor = spm.SentencePieceProcessor(model_file=problem.vocab_file(data_dir))
    reference = {}
    for split, pairs in files.items():
        reference[split] = []
        for paths in pairs:
            sides = []
            for path in paths:
                opener = gzip.open if path.suffix == ".gz" else open
                with opener(path, "rt", encoding="utf-8") as f:
                    lines = f.read().split("\n")[:-1]
                sides.append([tuple(ids) + (1,) for ids in processor.encode(lines)])
            reference[split] += list(zip(*sides, strict=True))
    return reference


@pytest.fixture(scope="module")
def enfr(tmp_path_factory, shared_data):
    """(problem, data_dir, reference) of Multi30k En-Fr."""
    data_dir = str(tmp_path_factory.mktemp("data"))
    raw = shared_data / "multi30k"
    problem = problems.get("multi30k_enfr")
    problem.generate_data(data_dir, str(raw), vocab_size=1000)
    files = {
        split: [(raw / f"{stem}.en.gz", raw / f"{stem}.fr.gz")]
        for split, stem in (("train", "train"), ("dev", "val"))
    }
    return problem, data_dir, encode_reference(problem, data_dir, files)


WMT_TRAIN = ("newstest2010", "newssyscomb2009")  # 2,489 + 502 pairs


@pytest.fixture(scope="module")
def wmt_news(tmp_path_factory, shared_data):
    """(problem, data_dir, reference) of wmt14_ende built from real news files.

    Train: two older news test sets; dev: newstest2013; test: newstest2012 in the place
    of newstest2014, which is not among the shared files.
    """
    data_dir = tmp_path_factory.mktemp("wmt_data")
    raw = data_dir / "raw"
    raw.mkdir()
    news = shared_data / "wmt_news_2008_2012"
    links = {f"newstest2014.{lang}": news / f"newstest2012.en-de.{lang}" for lang in ("en", "de")}
    for language in ("en", "de"):
        links[f"newstest2013.{language}"] = (
            shared_data / "wmt13_newstest2013" / f"newstest2013.{language}"
        )
        for stem in WMT_TRAIN:
            links[f"{stem}.en-de.{language}"] = news / f"{stem}.en-de.{language}"
    for name, target in links.items():
        (raw / name).symlink_to(target)
    problem = problems.get("wmt14_ende")
    problem.generate_data(str(data_dir), str(raw), vocab_size=1000)
    files = {
        "train": [(raw / f"{stem}.en-de.en", raw / f"{stem}.en-de.de") for stem in WMT_TRAIN],
        "dev": [(raw / "newstest2013.en", raw / "newstest2013.de")],
    }
    return problem, str(data_dir), encode_reference(problem, str(data_dir), files)


def one_epoch(problem, data_dir) -> list:
    dataset = problem.dataset("train", data_dir, HP, training=True, num_epochs=1, seed=5)
    return list(dataset.as_numpy_iterator())


@pytest.fixture(scope="module")
def train_epoch(enfr):
    return one_epoch(*enfr[:2])


@pytest.fixture(scope="module")
def wmt_news_epoch(wmt_news):
    return one_epoch(*wmt_news[:2])


# (corpus fixture, its training epoch fixture, training pairs in the raw files)
CORPORA = {
    "multi30k": ("enfr", "train_epoch", 29_000),
    "wmt_news": ("wmt_news", "wmt_news_epoch", 2991),
}


@pytest.fixture(scope="module", params=sorted(CORPORA))
def corpus(request):
    """(problem, data_dir, reference, training epoch, training pairs) of each real corpus."""
    data, epoch, pairs = CORPORA[request.param]
    return (*request.getfixturevalue(data), request.getfixturevalue(epoch), pairs)


def rows(batches) -> list:
    """The (inputs, targets) of every example in `batches`, padding removed."""
    return [
        (tuple(x[x != 0]), tuple(y[y != 0]))
        for batch in batches
        for x, y in zip(batch["inputs"], batch["targets"])
    ]


def test_bucket_boundaries_are_tensor2tensors():
    assert pipeline.bucket_boundaries(8, 256, 1.1) == T2T_BOUNDARIES_256
    assert pipeline.bucket_batch_sizes([8, 100, 2000], 1000) == [125, 10, 1]


def test_tokens_per_batch_never_exceed_the_budget(corpus):
    problem, data_dir, _, train_epoch, _ = corpus
    dev = list(problem.dataset("dev", data_dir, HP).as_numpy_iterator())
    # Training buckets end at max_length, evaluation's at max_position (256 is a boundary
    # of the first list only).
    for batches, longest in ((train_epoch, HP.max_length), (dev, HP.max_position)):
        boundaries = set(pipeline.bucket_boundaries(8, longest, 1.1))
        for batch in batches:
            (size, source), (_, target) = batch["inputs"].shape, batch["targets"].shape
            assert size * max(source, target) <= HP.batch_size
            assert source in boundaries and target in boundaries, "padded to a bucket boundary"


def test_evaluation_sees_every_example_once(corpus):
    problem, data_dir, reference, _, _ = corpus
    batches = problem.dataset("dev", data_dir, HP).as_numpy_iterator()
    assert Counter(rows(batches)) == Counter(reference["dev"])


def test_a_training_epoch_sees_every_example_once(corpus):
    _, _, reference, train_epoch, pairs = corpus
    # No pair of either corpus is longer than max_length (WMT's longest has 244 tokens),
    # so the epoch holds every pair of the raw files.
    assert len(reference["train"]) == len(rows(train_epoch)) == pairs
    assert Counter(rows(train_epoch)) == Counter(reference["train"])


def test_training_drops_long_examples_and_reports_how_many(enfr, caplog):
    problem, data_dir, reference = enfr
    hp = dataclasses.replace(HP, max_length=24)
    kept = [pair for pair in reference["train"] if max(map(len, pair)) <= 24]
    dropped = len(reference["train"]) - len(kept)
    assert 1000 < dropped < 20_000, "the cut must bite on real data"
    with caplog.at_level(logging.WARNING):
        dataset = problem.dataset("train", data_dir, hp, num_epochs=1)
    assert f"training drops {dropped} of 29000 examples" in caplog.text
    assert problem.dropped_examples("train", data_dir, 24) == dropped
    assert Counter(rows(dataset.as_numpy_iterator())) == Counter(kept)


def test_length_spread_inside_a_batch_is_one_bucket(corpus):
    train_epoch = corpus[3]
    boundaries = pipeline.bucket_boundaries(8, HP.max_length, 1.1)
    for batch in train_epoch:
        lengths = [max(len(x), len(y)) for x, y in rows([batch])]
        buckets = {pipeline.boundary_of(length, boundaries) for length in lengths}
        assert len(buckets) == 1
        (bucket,) = buckets
        lower = boundaries[boundaries.index(bucket) - 1] if bucket != boundaries[0] else 0
        assert lower < min(lengths) and max(lengths) <= bucket
        assert max(batch["inputs"].shape[1], batch["targets"].shape[1]) == bucket


def test_batches_are_deterministic_given_a_seed(enfr):
    problem, data_dir, _ = enfr

    def first(seed):
        dataset = problem.dataset("train", data_dir, HP, seed=seed)
        return [b["targets"] for b in dataset.take(30).as_numpy_iterator()]

    same, again, other = first(3), first(3), first(4)
    assert all(np.array_equal(a, b) for a, b in zip(same, again))
    assert not all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(same, other))


# Train has 8 shard files (2 divides 8: whole files per pipeline); dev has 1 (element-wise).
@pytest.mark.parametrize("split, num_pipelines", [("train", 2), ("dev", 3)])
def test_input_pipelines_get_disjoint_complete_shards(enfr, split, num_pipelines):
    problem, data_dir, reference = enfr
    total = Counter()
    for index in range(num_pipelines):
        context = tf.distribute.InputContext(num_pipelines, index, num_pipelines)
        dataset = problem.dataset(
            split, data_dir, HP, training=True, num_epochs=1, input_context=context
        )
        total += Counter(rows(dataset.as_numpy_iterator()))
    # Equal multisets: no example is missing, and none is read by two pipelines (that
    # would count it once too often).
    assert total == Counter(reference[split])


def test_file_sharding_equals_element_sharding(enfr):
    problem, data_dir, _ = enfr
    assert len(problem.shard_files("train", data_dir)) == 8
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        by_files = problem.sharded_examples("train", data_dir, context)
        by_elements = Problem.sharded_examples(problem, "train", data_dir, context)
        assert np.array_equal(_digests(by_files), _digests(by_elements))


def _digests(dataset) -> np.ndarray:
    """One hash per example, in dataset order (computed in the graph, for speed)."""

    def digest(example):
        ids = tf.concat([example["inputs"], [-1], example["targets"]], axis=0)
        text = tf.strings.reduce_join(tf.strings.as_string(ids), separator=",")
        return tf.strings.to_hash_bucket_fast(text, 2**62)

    batches = dataset.map(digest).batch(8192).as_numpy_iterator()
    return np.concatenate(list(batches))


def test_padding_efficiency_beats_ninety_percent(train_epoch):
    real = sum(np.count_nonzero(b[k]) for b in train_epoch for k in ("inputs", "targets"))
    total = sum(b[k].size for b in train_epoch for k in ("inputs", "targets"))
    assert real / total >= 0.90


def test_pad_to_bucket_gives_one_shape_per_bucket_with_the_same_examples(enfr, train_epoch):
    """What the XLA-compiled step relies on: as many batch shapes as buckets, S = T."""
    problem, data_dir, _ = enfr
    dataset = problem.dataset(
        "train", data_dir, HP, training=True, num_epochs=1, seed=5, pad_to_bucket=True
    )
    batches = list(dataset.as_numpy_iterator())
    boundaries = pipeline.bucket_boundaries(8, HP.max_length, 1.1)
    shapes = Counter(batch["inputs"].shape for batch in batches)
    for batch in batches:
        assert batch["inputs"].shape == batch["targets"].shape
        (size, length) = batch["inputs"].shape
        longest = max(max(len(x), len(y)) for x, y in rows([batch]))
        assert length == pipeline.boundary_of(longest, boundaries)
    # Full batches have the bucket's batch size; only a bucket's last batch of the epoch
    # is partial, so a bucket has at most two shapes and a partial shape occurs once.
    sizes = dict(zip(boundaries, pipeline.bucket_batch_sizes(boundaries, HP.batch_size)))
    for (size, length), count in shapes.items():
        assert size == sizes[length] or (size < sizes[length] and count == 1)
    assert max(Counter(length for _, length in shapes).values()) <= 2
    assert len(shapes) < len(batches), "full batches share their bucket's shape"
    # The same examples as the default padding, batched the same way.
    assert rows(batches) == rows(train_epoch)
    # Without it, inputs and targets of one batch are padded to different boundaries.
    assert any(b["inputs"].shape != b["targets"].shape for b in train_epoch)
