"""Ensembles: several models searched and scored with their combined next-token distribution.

Two algorithmic_reverse runs of different widths (32 and 48), trained briefly. Expected
values are derived here without the ensemble code: each model is run alone, teacher
forced and uncached (`model(features)`), its log-softmax taken in numpy (float64), and the
models combined by the formulas of `t2t_lite.models.ensemble`:

    mean_probability:      log sum_m w_m P_m(y)
    mean_log_probability:  sum_m w_m log P_m(y), renormalised over the vocabulary
"""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python

from t2t_lite import hparams
from t2t_lite.export import export_model
from t2t_lite.export.ctranslate2_export import export_ctranslate2, export_ctranslate2_from_run
from t2t_lite.export.exporter import METADATA_FILE, ExportError
from t2t_lite.inference import Decoder, Scorer
from t2t_lite.models import Ensemble, build_transformer
from t2t_lite.problems.translate import TranslateProblem
from t2t_lite.runs import RestoreError, TrainedModel, load_models, load_trained_model, run_dir
from t2t_lite.search import SearchConfig, Translator, pad_batch, strip_ids
from t2t_lite.training import trainer

PROBLEM = "algorithmic_reverse"
TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48,"
    "warmup_steps=100,dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"
)
WIDER = TINY + ",hidden_size=48,filter_size=96"
EOS = 1
SOURCES = ["3 1 4 1 5", "9 2 6 5", "2 7 1 8 2 8", "0"]
TARGETS = ["5 1 4 1 3", "5 6 2 9", "8 2 8 1 7 2", ""]
COMBINATIONS = ["mean_probability", "mean_log_probability"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
# A one-symbol source attends over one position: Keras warns, rightly here.
pytestmark = pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")


def symbol_ids(line: str) -> list:
    return [int(symbol) + 2 for symbol in line.split()]


def _train(output_dir, steps: int, overrides: str, seed: int) -> str:
    config = trainer.RunConfig(
        problem=PROBLEM,
        output_dir=str(output_dir),
        train_steps=steps,
        eval_steps=1,
        eval_every=steps,
        save_every=steps,
        log_every=steps,
        seed=seed,
    )
    hp = hparams.override(hparams.get("transformer_tiny"), overrides)
    trainer.train_and_evaluate(config, hp, printer=lambda line: None)
    return str(output_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(run A: width 32, 60 steps; run B: width 48, 10 steps, another seed)."""
    root = tmp_path_factory.mktemp("ensemble")
    return _train(root / "a", 60, TINY, 1), _train(root / "b", 10, WIDER, 2)


@pytest.fixture(scope="module")
def trained_a(runs):
    return load_trained_model(PROBLEM, "", runs[0])


@pytest.fixture(scope="module")
def trained_b(runs):
    return load_trained_model(PROBLEM, "", runs[1])


@pytest.fixture(scope="module")
def inputs():
    return pad_batch([symbol_ids(line) for line in SOURCES])


def config_for(trained, method="beam", beam_size=3) -> SearchConfig:
    # stop_early=False: every beam is exact, so the whole n-best list is compared. One beam
    # size offered: each offered size is a search traced once more.
    return SearchConfig.for_problem(
        trained.problem,
        trained.hp,
        method=method,
        beam_size=beam_size,
        stop_early=False,
        beam_sizes=(beam_size,),
    )


def search(model, config, inputs) -> tuple:
    ids, scores = Translator(model, config).search(inputs)
    return ids.numpy(), scores.numpy()


def numpy_log_softmax(logits) -> np.ndarray:
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def next_token_log_probs(model, source_ids: list, target_ids: list) -> np.ndarray:
    """log P(. | source, target[:t]) of one model for every t: [len(target_ids), V] float64."""
    features = {
        "inputs": np.array([source_ids + [EOS]], np.int32),
        "targets": np.array([target_ids], np.int32),
    }
    return numpy_log_softmax(model(features, training=False).numpy()[0])


def combined(per_model: list, weights, combination: str) -> np.ndarray:
    """The ensemble's log-probabilities from each model's [..., V] log-probabilities."""
    w = np.asarray(weights, np.float64) / np.sum(weights)
    if combination == "mean_probability":
        return np.log(sum(wm * np.exp(lp) for wm, lp in zip(w, per_model)))
    mean = sum(wm * lp for wm, lp in zip(w, per_model))
    return numpy_log_softmax(mean)


def reference_token_log_probs(models, weights, combination, source: str, ids: list):
    """The combination's log P of each of `ids` given `source` and the ids before it: [n]."""
    source_ids = symbol_ids(source)
    per_model = [next_token_log_probs(model, source_ids, ids) for model in models]
    log_probs = combined(per_model, weights, combination)
    return log_probs[np.arange(len(ids)), ids]


def hypothesis_ids(row) -> list:
    """A hypothesis [L] (start id first) as the ids its score counts: tokens, then EOS if any."""
    tokens = strip_ids(row)
    generated = np.asarray(row)[1:]
    ended = len(tokens) < len(generated) and generated[len(tokens)] == EOS
    return tokens + [EOS] if ended else tokens


def penalty(n: int, alpha: float) -> float:
    return ((5.0 + n) / 6.0) ** alpha


@pytest.fixture(scope="module")
def reference(trained_a, inputs):
    """Model A alone: {method: (ids [B, K, L], scores [B, K])}, and its scores of TARGETS."""
    searches = {
        method: search(trained_a.model, config_for(trained_a, method), inputs)
        for method in ("beam", "greedy")
    }
    scorer = Scorer(Decoder(trained_a, "", config_for(trained_a), printer=lambda line: None))
    return searches, scorer.score(SOURCES, TARGETS).pairs


def assert_same_as_reference(trained, reference, inputs):
    """`trained` searches (n-best beam and greedy) and scores as model A does."""
    searches, pairs = reference
    for method, (ids, scores) in searches.items():
        got_ids, got_scores = search(trained.model, config_for(trained, method), inputs)
        np.testing.assert_array_equal(got_ids, ids)
        np.testing.assert_allclose(got_scores, scores, rtol=1e-5, atol=1e-5)
    assert searches["beam"][0].shape[1] == 3 and searches["greedy"][0].shape[1] == 1
    scorer = Scorer(Decoder(trained, "", config_for(trained), printer=lambda line: None))
    for got, pair in zip(scorer.score(SOURCES, TARGETS).pairs, pairs):
        assert got.ids == pair.ids
        np.testing.assert_allclose(got.token_log_probs, pair.token_log_probs, atol=1e-5)
        assert got.score == pytest.approx(pair.score, abs=1e-4)


def test_an_ensemble_of_one_equals_its_model(trained_a, reference, inputs):
    wrapped = TrainedModel(Ensemble([trained_a.model]), trained_a.hp, trained_a.problem, "x")
    assert_same_as_reference(wrapped, reference, inputs)


@pytest.mark.parametrize("combination", COMBINATIONS)
def test_two_copies_of_a_model_equal_the_model(runs, reference, inputs, combination):
    """Two separately restored copies, weighted unequally: any combination is the model."""
    copies = load_models(PROBLEM, "", f"{runs[0]},{runs[0]}", None, None, "", combination, [1, 3])
    assert isinstance(copies.model, Ensemble) and len(copies.members) == 2
    assert copies.members[0].model is not copies.members[1].model
    assert_same_as_reference(copies, reference, inputs)


@pytest.fixture(scope="module", params=COMBINATIONS)
def mixed(request, runs):
    """Runs A (width 32) and B (width 48) weighted 2 : 1, in each combination."""
    weights = [2.0, 1.0]
    trained = load_models(PROBLEM, "", ",".join(runs), None, None, "", request.param, weights)
    return trained, weights, request.param


def test_scores_equal_the_combination_of_each_models_teacher_forcing(mixed, trained_a, trained_b):
    trained, weights, combination = mixed
    assert trained.model.weights == pytest.approx((2 / 3, 1 / 3))
    scorer = Scorer(Decoder(trained, "", config_for(trained), printer=lambda line: None))
    result = scorer.score(SOURCES, TARGETS)
    models = [trained_a.model, trained_b.model]
    for source, target, pair in zip(SOURCES, TARGETS, result.pairs):
        ids = symbol_ids(target) + [EOS]
        expected = reference_token_log_probs(models, weights, combination, source, ids)
        assert pair.ids == ids
        np.testing.assert_allclose(pair.token_log_probs, expected, rtol=1e-5, atol=1e-5)
        assert pair.score == pytest.approx(expected.sum() / penalty(len(ids), 0.6), abs=1e-4)
    # The two models disagree, so the combination is neither of them.
    alone = next_token_log_probs(trained_a.model, symbol_ids(SOURCES[0]), [7, 3, 6, 3, 5, 1])
    assert not np.allclose(result.pairs[0].token_log_probs, alone[np.arange(6), [7, 3, 6, 3, 5, 1]])


def test_models_of_different_widths_beam_search_together(mixed, trained_a, trained_b, inputs):
    """Every n-best hypothesis' score is the combination's log P of it over its penalty."""
    trained, weights, combination = mixed
    assert trained.members[0].hp.hidden_size == 32 and trained.members[1].hp.hidden_size == 48
    ids, scores = search(trained.model, config_for(trained), inputs)
    models = [trained_a.model, trained_b.model]
    checked = 0
    for row, source in enumerate(SOURCES):
        for k in range(ids.shape[1]):
            if scores[row, k] < -1e8:  # a beam slot no hypothesis filled
                continue
            hypothesis = hypothesis_ids(ids[row, k])
            expected = reference_token_log_probs(models, weights, combination, source, hypothesis)
            assert scores[row, k] == pytest.approx(
                expected.sum() / penalty(len(hypothesis), 0.6), rel=1e-4, abs=1e-4
            )
            checked += 1
    assert checked >= 2 * len(SOURCES)


def test_greedy_follows_the_argmax_of_the_combination(mixed, trained_a, trained_b, inputs):
    """Greedy ensemble decoding equals an uncached greedy over the numpy combination."""
    trained, weights, combination = mixed
    config = config_for(trained, "greedy")
    ids, _ = search(trained.model, config, inputs)
    models = [trained_a.model, trained_b.model]
    for row in (0, 3):  # two of the sentences: the reference reruns the models every step
        source = SOURCES[row]
        limit = len(symbol_ids(source)) + 1 + config.extra_length
        prefix = []
        while len(prefix) < limit:
            # Teacher forcing prefix + [any id]: the last position predicts the next token.
            per_model = [
                next_token_log_probs(model, symbol_ids(source), prefix + [EOS])[-1:]
                for model in models
            ]
            prefix.append(int(np.argmax(combined(per_model, weights, combination)[0])))
            if prefix[-1] == EOS:
                break
        assert hypothesis_ids(ids[row, 0]) == prefix


def test_exported_ensemble_equals_the_in_process_search(runs, inputs, tmp_path):
    combination = "mean_log_probability"
    trained = load_models(PROBLEM, "", ",".join(runs), None, None, "", combination, [2, 1])
    config = SearchConfig.for_problem(trained.problem, trained.hp, beam_size=2, beam_sizes=(2,))
    # The text SavedModel only: it has the ids signatures too (one save, not two).
    result = export_model(trained, "", str(tmp_path), "ens", config, ids_model_name="")
    metadata = json.load(open(os.path.join(result.text_dir, METADATA_FILE)))
    assert metadata["ensemble"]["combination"] == combination
    assert metadata["ensemble"]["weights"] == pytest.approx([2 / 3, 1 / 3])
    assert [m["hparams"]["hidden_size"] for m in metadata["ensemble"]["members"]] == [32, 48]
    ids, scores = search(trained.model, result.search, inputs)
    loaded = tf.saved_model.load(result.text_dir)
    out = loaded.signatures["translate_ids"](input_ids=tf.constant(inputs))
    np.testing.assert_array_equal(out["output_ids"].numpy(), ids[:, :, 1:])
    np.testing.assert_array_equal(out["scores"].numpy(), scores)
    text = loaded.signatures["serving_default"]
    translations = text(sentences=tf.constant(SOURCES))["translations"].numpy()
    encoder = trained.problem.encoders("")["targets"]
    expected = [encoder.decode(strip_ids(row[0])) for row in ids]
    assert [t.decode() for t in translations] == expected


def test_ctranslate2_refuses_an_ensemble_in_one_line(runs, tmp_path):
    trained = load_models(PROBLEM, "", ",".join(runs))
    for call in (
        lambda: export_ctranslate2_from_run(PROBLEM, "", ",".join(runs), str(tmp_path), "ct"),
        lambda: export_ctranslate2(trained, "", str(tmp_path), "ct"),
    ):
        with pytest.raises(ExportError, match="^CTranslate2 cannot run an ensemble") as error:
            call()
        assert "\n" not in str(error.value)


def test_bad_weights_and_checkpoint_lists_are_refused(runs):
    both = ",".join(runs)
    with pytest.raises(RestoreError, match="3 weights for 2 models"):
        load_models(PROBLEM, "", both, weights=[1, 2, 3])
    with pytest.raises(RestoreError, match="must all be positive"):
        load_models(PROBLEM, "", both, weights=[1, 0])
    with pytest.raises(RestoreError, match="3 checkpoints for 2 runs"):
        load_models(PROBLEM, "", both, checkpoint_path="a,b,c")
    with pytest.raises(RestoreError, match="ensemble_combination"):
        load_models(PROBLEM, "", both, combination="max")


def test_several_checkpoints_of_one_run_are_an_ensemble(runs, trained_a, reference, inputs):
    checkpoint = trained_a.checkpoint_path
    trained = load_models(PROBLEM, "", runs[0], f"{checkpoint},{checkpoint}")
    assert len(trained.members) == 2
    ids, _ = reference[0]["beam"]
    np.testing.assert_array_equal(search(trained.model, config_for(trained), inputs)[0], ids)


# Vocabularies: two data folders of one small translation problem, whose SentencePiece
# vocabularies (same size) are learnt from different captions.


class TinyEnDe(TranslateProblem):
    name = "tiny_ende"
    vocab_size = 400
    num_shards = {"train": 1}


def _raw_folder(root, shared_data, start: int):
    import gzip

    raw = root / "raw"
    raw.mkdir(parents=True)
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{language}.gz", "rt") as handle:
            lines = handle.read().split("\n")[start : start + 340]
        for split, part in (("train", lines[:300]), ("dev", lines[300:320]), ("test", lines[320:])):
            (raw / f"{split}.{language}").write_text("\n".join(part) + "\n", encoding="utf-8")
    return raw


def _untrained_run(output_dir, problem, data_dir) -> str:
    """A run folder as the trainer writes it, with an untrained model's checkpoint."""
    hp = hparams.override(hparams.get("transformer_tiny"), TINY)
    vocab_size, _ = problem.vocab_sizes(data_dir)
    model = build_transformer(hp, vocab_size)
    tf.train.Checkpoint(model=model).save(os.path.join(output_dir, "ckpt"))
    record = run_dir.vocabulary_record(problem, data_dir)
    run_dir.write_run_files(str(output_dir), hp, {"problem": problem.name, "vocabulary": record})
    return str(output_dir)


@pytest.fixture(scope="module")
def vocabulary_runs(tmp_path_factory, shared_data):
    """(data_dir A, run on A, run on A again, run on B): A and B have other vocabularies."""
    root = tmp_path_factory.mktemp("vocabularies")
    problem = TinyEnDe()
    folders = []
    for name, start in (("a", 0), ("b", 5000)):
        data_dir = str(root / name / "data")
        problem.generate_data(data_dir, str(_raw_folder(root / name, shared_data, start)))
        folders.append(data_dir)
    assert problem.vocab_sizes(folders[0]) == problem.vocab_sizes(folders[1])
    runs = [
        _untrained_run(root / "run_a", problem, folders[0]),
        _untrained_run(root / "run_a2", problem, folders[0]),
        _untrained_run(root / "run_b", problem, folders[1]),
    ]
    return folders[0], *runs


def test_runs_of_another_vocabulary_are_one_clear_error(vocabulary_runs):
    data_dir, run_a, run_a2, run_b = vocabulary_runs
    problem = f"{__name__}:TinyEnDe"
    same = load_models(problem, data_dir, f"{run_a},{run_a2}")
    assert len(same.members) == 2
    with pytest.raises(RestoreError) as error:
        load_models(problem, data_dir, f"{run_a},{run_b}")
    message = str(error.value)
    assert "\n" not in message
    assert run_a in message and run_b in message and "vocabulary" in message
    assert "sha256" in message
    # Both runs of B's vocabulary, decoded with A's data: the data folder is the odd one.
    with pytest.raises(RestoreError, match="--data_dir holds"):
        load_models(problem, data_dir, f"{run_b},{run_b}")


def test_decoder_command_names_both_runs_of_other_vocabularies(vocabulary_runs, tmp_path):
    data_dir, run_a, _, run_b = vocabulary_runs
    source = tmp_path / "in.txt"
    source.write_text("A dog runs.\n", encoding="utf-8")
    result = warm_python.run(
        [
            sys.executable, "-m", "t2t_lite.decoder", "--problem=test_ensemble:TinyEnDe",
            f"--data_dir={data_dir}", f"--output_dir={run_a},{run_b}",
            f"--decode_from_file={source}",
        ],
        capture_output=True, text=True, timeout=300,
        env=dict(ENV, PYTHONPATH=os.path.dirname(__file__)),
    )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("t2t_lite.decoder: ensemble: ")
    assert run_a in last and run_b in last and "vocabulary" in last
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_decoder_command_decodes_and_scores_with_an_ensemble(runs, tmp_path):
    """The command's n-best decodes and scores are the in-process ensemble's."""
    source, target = tmp_path / "in.txt", tmp_path / "target.txt"
    source.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    target.write_text("\n".join(TARGETS) + "\n", encoding="utf-8")
    common = [
        sys.executable, "-m", "t2t_lite.decoder", f"--problem={PROBLEM}", "--data_dir=",
        f"--output_dir={','.join(runs)}", "--ensemble_weights=2,1",
        "--ensemble_combination=mean_log_probability", f"--decode_from_file={source}",
    ]  # fmt: skip
    decodes, scores = tmp_path / "out.txt", tmp_path / "scores.jsonl"
    for extra in (
        ["--return_beams", "--beam_size=3", f"--decode_to_file={decodes}"],
        [f"--score_file={target}", f"--decode_to_file={scores}"],
    ):
        result = warm_python.run(
            common + extra, capture_output=True, text=True, timeout=600, env=ENV
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert "an ensemble of 2 models (mean_log_probability, weights 0.667, 0.333)" in (
            result.stdout + result.stderr
        )
    trained = load_models(
        PROBLEM, "", ",".join(runs), None, None, "", "mean_log_probability", [2, 1]
    )
    decoder = Decoder(trained, "", config_for(trained), printer=lambda line: None)
    expected = decoder.translate(SOURCES)
    lines = decodes.read_text(encoding="utf-8").splitlines()
    assert [line.split("\t") for line in lines] == expected.beams
    records = [json.loads(line) for line in scores.read_text(encoding="utf-8").splitlines()]
    pairs = Scorer(decoder).score(SOURCES, TARGETS).pairs
    for record, pair in zip(records, pairs):
        assert record["log_prob"] == pytest.approx(pair.log_prob, abs=1e-5)
