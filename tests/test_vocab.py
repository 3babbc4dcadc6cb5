"""SentencePiece vocabulary: reserved ids, exact round trips on real text, in-graph twin."""

import gzip
import random
from collections import Counter

import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf

from t2t_lite.problems import encoding, sampling, vocab
from t2t_lite.problems.corpus import ParallelFiles, RawCorpus
from t2t_lite.problems.progress import Progress

EDGE_CASES = [
    "",
    " ",
    "  leading and trailing  ",
    "tab\there, two  spaces, a\u00a0no-break space",
    "Straße, Öl, œuvre, naïve, Œdipe, «guillemets»",
    "combining e\u0301 versus \u00e9; ligature \ufb01",
    "emoji 😀🇩🇪, CJK 中文字, Hangul 한국어, Devanagari हिन्दी",
    "controls \x00\x01\x7f and a lone \r",
    "<pad> </s> <unk> <0x41> look like pieces",
    "\u2581",
    "\u2581\u2581 twin marks",
    "a\u2581b ▁c▁",
    " \u2581 space then mark",
]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, shared_data):
    # English and German captions only: French accents and anything rarer must go
    # through byte fallback.
    lines = []
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{language}.gz", "rt") as f:
            lines += [line.rstrip("\n") for _, line in zip(range(6000), f)]
    path = str(tmp_path_factory.mktemp("vocab") / "vocab.model")
    vocab.train_sentencepiece(lines, path, vocab_size=1000)
    return vocab.SentencePieceEncoder(path)


def _real_lines(shared_data):
    newstest = shared_data / "wmt13_newstest2013"
    lines = []
    for name in ("newstest2013.de", "newstest2013.fr", "newstest2013.fr.raw"):
        lines += (newstest / name).read_text(encoding="utf-8").split("\n")[:-1]
    with gzip.open(shared_data / "multi30k" / "test_2016_flickr.fr.gz", "rt") as f:
        lines += f.read().split("\n")[:-1]
    return lines


def test_reserved_ids_follow_design(encoder):
    reference = spm.SentencePieceProcessor(model_file=encoder.model_path)
    assert encoder.vocab_size == reference.get_piece_size() == 1000
    assert [reference.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
    assert [reference.id_to_piece(i) for i in (3, 4, 258)] == ["<0x00>", "<0x01>", "<0xFF>"]
    assert reference.bos_id() == -1
    assert reference.is_control(0) and reference.is_control(1)


def test_round_trip_on_real_german_and_french(encoder, shared_data):
    lines = _real_lines(shared_data)
    assert len(lines) == 3 * 3000 + 1000
    ids = encoder.encode_batch(lines)
    mismatches = [line for line, row in zip(lines, ids) if encoder.decode(row) != line]
    assert mismatches == []
    flat = np.concatenate([row for row in ids if row])
    assert flat.min() >= 3, "text must never produce pad, EOS or unk"
    # The French and no-break-space lines really needed byte pieces (ids 3..258).
    assert np.sum(flat <= 258) > 100


def test_round_trip_edge_cases_and_random_unicode(encoder):
    rng = random.Random(0)
    planes = [(0x20, 0x7F), (0xA0, 0x2FF), (0x2500, 0x25FF), (0x4E00, 0x4FFF), (0x1F300, 0x1F6FF)]
    random_texts = []
    for _ in range(300):
        chars = []
        for _ in range(rng.randrange(1, 30)):
            low, high = rng.choice(planes)
            chars.append(chr(rng.randrange(low, high)))
        random_texts.append("".join(chars))
    for text in EDGE_CASES + random_texts:
        assert encoder.decode(encoder.encode(text)) == text, repr(text)


def test_ids_equal_plain_sentencepiece_for_ordinary_text(encoder, shared_data):
    reference = spm.SentencePieceProcessor(model_file=encoder.model_path)
    lines = _real_lines(shared_data)[:3000]
    assert encoder.encode_batch(lines) == [reference.encode(line) for line in lines]


def test_space_mark_is_spelt_in_bytes(encoder):
    mark = [encoder.encode("\u2581")[i] for i in range(3)]
    expected = [3 + byte for byte in "\u2581".encode()]  # <0xE2> <0x96> <0x81>
    assert mark == expected
    ids = encoder.encode("a\u2581b")
    assert any(ids[i : i + 3] == expected for i in range(len(ids)))


def test_decode_stops_at_eos_and_skips_padding(encoder):
    ids = encoder.encode("Ein Hund läuft.")
    assert encoder.decode([0] + ids + [1] + encoder.encode("danach") + [0, 0]) == "Ein Hund läuft."


def test_in_graph_tokenizer_matches_python(encoder, shared_data):
    texts = EDGE_CASES + _real_lines(shared_data)[::50]
    tokenizer = encoder.tokenizer()
    ragged = tokenizer.tokenize(tf.constant(texts))
    assert ragged.dtype == tf.int64
    assert ragged.to_list() == [row + [1] for row in encoder.encode_batch(texts)]
    # Detokenize a padded batch with junk after EOS.
    padded = ragged.to_tensor(default_value=0)
    junk = tf.concat([padded, tf.fill([len(texts), 3], tf.constant(7, tf.int64))], axis=1)
    decoded = [s.decode("utf-8") for s in tokenizer.detokenize(junk).numpy()]
    assert decoded == texts


def test_in_graph_tokenizer_in_tf_data_and_saved_model(encoder, tmp_path):
    texts = ["Zwei Männer stehen am Fluss.", "a\u2581b", ""]
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(encoder.tokenizer().tokenize)
    rows = [row for batch in dataset for row in batch.to_list()]
    assert rows == [row + [1] for row in encoder.encode_batch(texts)]

    module = tf.Module()
    module.tokenizer = encoder.tokenizer()
    module.round_trip = tf.function(
        lambda t: module.tokenizer.detokenize(module.tokenizer.tokenize(t)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert [s.decode() for s in loaded.round_trip(tf.constant(texts)).numpy()] == texts


def test_foreign_vocab_is_rejected(tmp_path, shared_data):
    lines = (shared_data / "wmt13_newstest2013" / "newstest2013.en").read_text().split("\n")[:2000]
    path = tmp_path / "default.model"
    # SentencePiece's own defaults: unk 0, bos 1, eos 2, no padding.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(path)[:-6], vocab_size=500, minloglevel=2
    )
    with pytest.raises(ValueError, match=r"default\.model does not match.*pad id -1 and EOS id 2"):
        vocab.SentencePieceEncoder(str(path))


def test_vocab_file_depends_on_text_and_settings_only(tmp_path, shared_data):
    lines = (shared_data / "wmt13_newstest2013" / "newstest2013.de").read_text().split("\n")[:3000]
    one = vocab.train_sentencepiece(lines, str(tmp_path / "one.model"), 600, num_threads=1)
    two = vocab.train_sentencepiece(lines, str(tmp_path / "two.model"), 600, num_threads=2)
    assert open(one, "rb").read() == open(two, "rb").read()


def test_training_errors_are_explicit(tmp_path):
    with pytest.raises(ValueError, match="at least 260"):
        vocab.train_sentencepiece(["a b c"], str(tmp_path / "v.model"), vocab_size=100)
    with pytest.raises(ValueError, match="empty corpus"):
        vocab.train_sentencepiece(["", "  "], str(tmp_path / "v.model"), vocab_size=300)
    with pytest.raises(ValueError, match="vocab_size=5000 on 2 sentences"):
        vocab.train_sentencepiece(["ab", "cd"], str(tmp_path / "v.model"), vocab_size=5000)
    assert not list(tmp_path.iterdir()), "a failed training leaves no file behind"


def test_reservoir_sample_is_uniform_bounded_and_deterministic():
    population = range(100_000)
    sample = vocab.reservoir_sample(population, 2000, seed=3)
    assert len(sample) == 2000 and len(set(sample)) == 2000
    assert sample == sorted(sample), "keeps corpus order"
    assert sample == vocab.reservoir_sample(population, 2000, seed=3)
    assert sample != vocab.reservoir_sample(population, 2000, seed=4)
    # Uniform: the mean of 2,000 draws from 0..99,999 has standard deviation ~645.
    assert abs(np.mean(sample) - 49_999.5) < 4 * 645
    deciles = Counter(x // 10_000 for x in sample)
    assert min(deciles.values()) > 140 and max(deciles.values()) < 260
    assert vocab.reservoir_sample(["a", "b"], 5) == ["a", "b"]


def test_word_cache_gives_the_ids_of_plain_sentencepiece(encoder, shared_data):
    lines = _real_lines(shared_data) + EDGE_CASES
    reference = spm.SentencePieceProcessor(model_file=encoder.model_path)
    expected = encoder.encode_batch(lines)
    plain = [i for i, line in enumerate(lines) if vocab.SPACE_MARK not in line]
    assert [expected[i] for i in plain] == reference.encode([lines[i] for i in plain])
    cached = encoding.WordCachedEncoder(encoder)
    assert cached.encode_batch(lines) == expected
    assert cached.encode_batch(lines[::-1]) == expected[::-1]  # now from the cache
    # A full cache keeps what it holds and still encodes new words right.
    small = encoding.WordCachedEncoder(encoder, max_words=300)
    got = [
        row
        for start in range(0, len(lines), 500)
        for row in small.encode_batch(lines[start : start + 500])
    ]
    assert got == expected and len(small._words) <= 300


def test_word_cache_is_bypassed_for_user_symbols(tmp_path, shared_data):
    # A user symbol may hold a space, and then a sentence is not its words one by one.
    lines = _real_lines(shared_data)[:4000]
    path = str(tmp_path / "symbols.model")
    vocab.train_sentencepiece(lines, path, vocab_size=800, user_symbols=["New\u2581York"])
    encoder = vocab.SentencePieceEncoder(path)
    texts = ["He lives in New York now.", "New York, New York"] + lines[:200]
    expected = spm.SentencePieceProcessor(model_file=path).encode(texts)
    assert encoding.WordCachedEncoder(encoder).encode_batch(texts) == expected


def test_vocab_sample_holds_what_reservoir_sample_would(tmp_path, shared_data):
    newstest = shared_data / "wmt13_newstest2013"
    en = (newstest / "newstest2013.en").read_text(encoding="utf-8").split("\n")[:-1]
    de = (newstest / "newstest2013.de").read_text(encoding="utf-8").split("\n")[:-1]
    en[5], de[7], en[100], de[100] = "", "  ", "", ""  # empty sentences are never sampled
    (tmp_path / "train.en").write_text("\n".join(en) + "\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    corpus = RawCorpus(
        {"train": [ParallelFiles(str(tmp_path / "train.en"), str(tmp_path / "train.de"))]}
    )
    sentences = [s for pair in zip(en, de) for s in pair if s.strip()]
    path = str(tmp_path / "sample")
    written = sampling.vocab_sample(corpus, 1000, path, {"train": 3000}, Progress())
    assert written == 1000
    assert list(sampling.read_sample(path)) == vocab.reservoir_sample(sentences, 1000, seed=1234)
    # A sample larger than the text holds all of it, in corpus order.
    assert sampling.vocab_sample(corpus, 10_000, path, {}, Progress()) == len(sentences)
    assert list(sampling.read_sample(path)) == sentences


def test_bpe_dropout_at_zero_gives_the_ids_of_plain_sentencepiece(encoder, shared_data):
    lines = _real_lines(shared_data) + EDGE_CASES
    reference = spm.SentencePieceProcessor(model_file=encoder.model_path)
    got = encoder.sample_batch(lines, 0.0, seed=1)
    assert got == encoder.encode_batch(lines)
    plain = [i for i, line in enumerate(lines) if vocab.SPACE_MARK not in line]
    assert [got[i] for i in plain] == reference.encode([lines[i] for i in plain])


def test_bpe_dropout_round_trips_and_repeats_from_its_seed(encoder, shared_data):
    lines = _real_lines(shared_data) + EDGE_CASES
    sampled = encoder.sample_batch(lines, 0.1, seed=7)
    assert [encoder.decode(row) for row in sampled] == lines
    assert encoder.sample_batch(lines, 0.1, seed=7) == sampled
    other = encoder.sample_batch(lines, 0.1, seed=8)
    assert sum(a != b for a, b in zip(sampled, other)) > len(lines) // 4
    flat = [i for row in sampled for i in row]
    assert min(flat) >= 3, "text must never produce pad, EOS or unk"
    assert len(flat) > 1.03 * sum(map(len, encoder.encode_batch(lines)))


def test_a_lone_merge_is_refused_with_the_dropout_probability(encoder):
    # "a" is `▁` and `a`: one merge joins them, and nothing else can, so the word stays in
    # two pieces exactly when that merge is refused.
    whole = encoder.encode("a")
    assert len(whole) == 1 and encoder.pieces()[whole[0]] == "\u2581a"
    trials, dropout = 20_000, 0.25
    rows = encoder.sample_batch(["a"] * trials, dropout, seed=3)
    split = sum(len(row) == 2 for row in rows)
    assert all(len(row) in (1, 2) for row in rows)
    sigma = (trials * dropout * (1 - dropout)) ** 0.5
    assert abs(split - trials * dropout) < 5 * sigma


def test_bpe_dropout_lengthens_text_as_sentencepiece_sampling_does(encoder, shared_data):
    # SentencePiece's own BPE-dropout (`enable_sampling`, unseeded): the same refusal rule,
    # so the same mean length, whichever draws each side makes.
    reference = spm.SentencePieceProcessor(model_file=encoder.model_path)
    lines = []
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"val.{language}.gz", "rt") as f:
            lines += [line.rstrip("\n") for line in f]
    for dropout in (0.1, 0.3):
        ours = sum(map(len, encoder.sample_batch(lines, dropout, seed=11)))
        theirs = sum(
            len(reference.encode(line, enable_sampling=True, alpha=dropout, nbest_size=-1))
            for line in lines
        )
        assert abs(ours / theirs - 1) < 0.02, (dropout, ours, theirs)


def test_bpe_dropout_names_what_it_cannot_do(encoder, tmp_path, shared_data):
    for dropout in (-0.1, 1.0):
        with pytest.raises(ValueError, match="at least 0 and below 1"):
            encoder.sample_batch(["a"], dropout, seed=1)
    lines = _real_lines(shared_data)[:2000]
    path = str(tmp_path / "symbols.model")
    vocab.train_sentencepiece(lines, path, vocab_size=800, user_symbols=["New\u2581York"])
    with pytest.raises(ValueError, match="without user symbols; this one has 1"):
        vocab.SentencePieceEncoder(path).sample_batch(["New York"], 0.1, seed=1)
