"""--warm_start_from and --warm_start_vocab: what a new run takes from another run, and refusals.

One source run (algorithmic_reverse, 2 updates of a 1+1-layer model of width 32, keeping
its best) is shared by the tests. Expected values come from TensorFlow's own reading of
the checkpoint (`tf.train.load_checkpoint`, keys found through the optimizer's list of
the model's variables), from Keras's variable paths and from SentencePiece's pieces, not
from the code under test.
"""

import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import sentencepiece as spm
import tensorflow as tf
import warm_python

from t2t_lite import hparams, problems
from t2t_lite.models import build_transformer
from t2t_lite.problems.translate import TranslateProblem
from t2t_lite.problems.vocab import train_sentencepiece
from t2t_lite.runs import run_dir
from t2t_lite.training import saving, trainer, warm_start

TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=24,"
    "num_encoder_layers=1,num_decoder_layers=1,warmup_steps=1"
)
VOCAB = 12  # algorithmic_reverse: pad, EOS and 10 symbols
ATTRIBUTE = ".ATTRIBUTES/VARIABLE_VALUE"
EMBEDDING = "model/token_embedding/embeddings"


def _hp(**changes):
    extra = ",".join(f"{key}={value}" for key, value in changes.items())
    return hparams.override(hparams.get("transformer_tiny"), ",".join(filter(None, [TINY, extra])))


def _config(output_dir, **overrides):
    values = dict(
        problem="algorithmic_reverse",
        output_dir=str(output_dir),
        train_steps=2,
        eval_steps=1,
        eval_every=2,
        save_every=2,
        log_every=2,
        eval_bleu_sentences=0,
    )
    values.update(overrides)
    return trainer.RunConfig(**values)


def _model(hp, vocab_size=VOCAB, seed=1, target_vocab_size=None):
    keras.utils.set_random_seed(seed)
    return build_transformer(hp, vocab_size, target_vocab_size)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("warm_start") / "source"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(trainer, "_write_attention", lambda run: None)  # seconds, untested here
        trainer.train_and_evaluate(_config(output_dir, keep_best="loss"), _hp(), printer=print)
    return output_dir


def _saved_values(prefix, model) -> list:
    """The checkpoint's value of each of `model.trainable_variables`, read by TensorFlow.

    A trainer checkpoint saves a variable under the first object-graph path that reaches it:
    `optimizer/_trainable_variables/<i>` (Adam was built on the model's trainable
    variables, in order), or the shorter `model/<layer>/<weight>` of the token embedding.
    """
    reader = tf.train.load_checkpoint(str(prefix))
    values = []
    for index, variable in enumerate(model.trainable_variables):
        by_model = "model/" + variable.path.split("/", 1)[1]
        keys = [f"optimizer/_trainable_variables/{index}/{ATTRIBUTE}", f"{by_model}/{ATTRIBUTE}"]
        found = [key for key in keys if reader.has_tensor(key)]
        assert len(found) == 1, (variable.path, found)
        values.append(reader.get_tensor(found[0]))
    return values


def _replicas(variable) -> list:
    """Every copy of `variable`: one per replica under MirroredStrategy."""
    value = variable.value
    return list(value.values) if hasattr(value, "values") else [value]


def test_a_new_run_starts_from_the_source_weights_with_a_fresh_optimizer(source, tmp_path):
    latest = tf.train.latest_checkpoint(str(source))
    config = _config(
        tmp_path / "new", warm_start_from=str(source), strategy="mirrored", cpu_replicas=2
    )
    lines = []
    run = trainer._set_up(config, _hp(), lines.append)

    expected = _saved_values(latest, run.model)
    fresh = _model(_hp())  # what the run's seed gives without warm start
    assert not all(
        np.array_equal(f.numpy(), e) for f, e in zip(fresh.trainable_variables, expected)
    )  # so equality below is not the seed's doing
    for variable, value in zip(run.model.trainable_variables, expected, strict=True):
        copies = _replicas(variable)
        assert len(copies) == 2
        for copy in copies:
            np.testing.assert_array_equal(copy.numpy(), value, err_msg=variable.path)
    assert run.step == 0 and int(run.optimizer.iterations.numpy()) == 0
    assert all(not np.any(v.numpy()) for v in run.optimizer.variables)  # step and moments
    total = len(run.model.weights)
    assert (
        f"warm start from {latest}: {total} of {total} model variables restored; the "
        "optimizer starts fresh at step 0"
    ) in lines
    record = json.loads((tmp_path / "new" / "manifest.json").read_text())["warm_start"]
    assert record == {
        "checkpoint": latest,
        "variables": total,
        "restored": total,
        "not_restored": {},
        "vocabulary": None,
    }

    # Rerun with checkpoints in place: the run resumes from its own, whatever the flag
    # says, and keeps the record of how it started.
    saving.save_checkpoint(run.manager, 0)
    again = _config(tmp_path / "new", warm_start_from=str(tmp_path / "not_there"))
    lines = []
    trainer._set_up(again, _hp(), lines.append)
    own = str(tmp_path / "new" / "ckpt-0")
    assert (
        f"--warm_start_from ignored: {tmp_path / 'new'} resumes from its own checkpoint {own}"
    ) in lines
    assert not any(line.startswith("warm start from") for line in lines)
    assert run_dir.load_manifest(str(tmp_path / "new"))["warm_start"] == record


def test_a_run_folder_gives_its_newest_checkpoint_and_run_best_its_best(source, monkeypatch):
    latest = tf.train.latest_checkpoint(str(source))
    best_state = tf.train.get_checkpoint_state(str(source / "best"))
    assert warm_start.resolve_checkpoint(str(source)) == latest
    assert warm_start.resolve_checkpoint(str(source / "best")) == os.path.join(
        source / "best", os.path.basename(best_state.model_checkpoint_path)
    )
    assert warm_start.resolve_checkpoint(latest) == latest
    monkeypatch.chdir(source.parent)  # a relative path is made absolute
    assert warm_start.resolve_checkpoint(os.path.join("source", "ckpt-2")) == latest


def test_another_width_leaves_the_variables_whose_shape_differs_fresh(source):
    latest = tf.train.latest_checkpoint(str(source))
    wider = _model(_hp(hidden_size=48))
    before = {v.path: v.numpy().copy() for v in wider.weights}
    lines = []
    record = warm_start.warm_start(wider, warm_start.Source(latest), {}, printer=lines.append)

    # Keras's own paths and shapes say which variables the two models share.
    narrow = _model(_hp())
    saved = dict(zip([v.path for v in narrow.trainable_variables], _saved_values(latest, narrow)))
    same = [v for v in wider.weights if saved[v.path].shape == tuple(v.shape)]
    assert 0 < len(same) < len(wider.weights)  # the filter biases [64] only
    assert record["restored"] == len(same)
    assert sorted(record["not_restored"].values()) == sorted(
        f"shape differs (checkpoint {list(saved[v.path].shape)}, model {list(v.shape)})"
        for v in wider.weights
        if not any(v is kept for kept in same)
    )
    for variable in wider.weights:
        kept = any(variable is v for v in same)
        expected = saved[variable.path] if kept else before[variable.path]
        np.testing.assert_array_equal(variable.numpy(), expected, err_msg=variable.path)
    shown = [line for line in lines if line.startswith("  not restored (fresh): ")]
    assert len(shown) == warm_start.SHOWN_NOT_RESTORED
    assert lines[-1].startswith(f"  and {len(record['not_restored']) - len(shown)} more")


def test_another_vocabulary_size_without_warm_start_vocab_leaves_the_embedding_fresh(source):
    latest = tf.train.latest_checkpoint(str(source))
    model = _model(_hp(), vocab_size=20)
    fresh = model.token_embedding.embeddings.numpy().copy()
    record = warm_start.warm_start(model, warm_start.Source(latest), {}, printer=print)
    assert record["restored"] == len(model.weights) - 1
    assert record["not_restored"] == {
        EMBEDDING: "vocabulary size differs (checkpoint 12 rows, model 20); pass "
        "--warm_start_vocab=OLD_VOCAB.model to carry its rows by piece"
    }
    np.testing.assert_array_equal(model.token_embedding.embeddings.numpy(), fresh)


class _Stub(tf.Module):
    def __init__(self):
        super().__init__()
        self.weight = tf.Variable(np.zeros([32, 32], np.float32))


@pytest.mark.parametrize(
    "objects, message",
    [
        (
            lambda: {"model": _Stub()},
            "--warm_start_from={prefix}: no variable of it fits this model",
        ),
        (
            lambda: {"other": _Stub()},
            "--warm_start_from: checkpoint {prefix} saves no object named",
        ),
    ],
    ids=["no_variable_in_common", "no_model_object"],
)
def test_a_checkpoint_that_shares_nothing_is_one_line_naming_it(tmp_path, objects, message):
    prefix = tf.train.Checkpoint(**objects()).write(str(tmp_path / "ckpt"))
    with pytest.raises(run_dir.RunDirError) as error:
        warm_start.warm_start(_model(_hp()), warm_start.Source(prefix), {})
    assert str(error.value).startswith(message.format(prefix=prefix))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "name, message",
    [
        ("missing", "--warm_start_from: checkpoint {path} does not exist (no .index file); give"),
        ("empty_folder", "--warm_start_from: no checkpoint in folder {path}; give a run folder"),
        ("stub", "--warm_start_from={path}: no variable of it fits this model"),
    ],
)
def test_a_source_that_is_not_there_or_does_not_fit_leaves_nothing_behind(tmp_path, name, message):
    path = tmp_path / name
    if name == "empty_folder":
        path.mkdir()
    if name == "stub":  # a checkpoint that shares no variable with the model
        path = tf.train.Checkpoint(model=_Stub()).write(str(path))
    config = _config(tmp_path / "new", warm_start_from=str(path))
    with pytest.raises(run_dir.RunDirError) as error:
        trainer.train_and_evaluate(config, _hp())
    assert str(error.value).startswith(message.format(path=path))
    assert not (tmp_path / "new").exists()
    with pytest.raises(run_dir.RunDirError, match=r"^--warm_start_vocab=.*: needs --warm_start"):
        _config(tmp_path / "new", warm_start_vocab=str(path))


# Vocabularies.
def _captions(shared_data, language: str, start: int, count: int) -> list:
    with gzip.open(shared_data / "multi30k" / f"train.{language}.gz", "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(start + count), f)]
    return lines[start:]


@pytest.fixture(scope="module")
def vocabularies(shared_data, tmp_path_factory):
    """Three SentencePiece models of Multi30k captions, {name: (path, pieces by SentencePiece)}."""
    folder = tmp_path_factory.mktemp("vocabularies")
    texts = {
        "old": (_captions(shared_data, "en", 0, 400), 400),
        "new": (_captions(shared_data, "en", 400, 400) + _captions(shared_data, "de", 0, 200), 440),
        "german": (_captions(shared_data, "de", 200, 400), 400),
    }
    found = {}
    for name, (lines, size) in texts.items():
        path = train_sentencepiece(lines, str(folder / f"{name}.model"), size, num_threads=1)
        processor = spm.SentencePieceProcessor(model_file=path)
        found[name] = (path, [processor.id_to_piece(i) for i in range(processor.get_piece_size())])
    return found


def _old_checkpoint(folder, pieces: int, shared: bool, seed=2) -> str:
    """A checkpoint of a model of the old vocabulary (model only, as averaging writes)."""
    model = _model(_hp(shared_embedding=shared), pieces, seed, None if shared else pieces)
    return tf.train.Checkpoint(model=model).write(str(folder / "ckpt-1"))


@pytest.mark.parametrize("shared", [True, False], ids=["shared_embedding", "separate_embeddings"])
def test_embedding_rows_are_carried_by_piece(vocabularies, tmp_path, shared):
    old_path, old_pieces = vocabularies["old"]
    _, new_pieces = vocabularies["new"]
    # Separate embeddings: the target side gets another vocabulary, to keep the sides apart.
    target_pieces = new_pieces if shared else vocabularies["german"][1]
    prefix = _old_checkpoint(tmp_path, len(old_pieces), shared)
    old = tf.train.load_checkpoint(prefix)
    hp = _hp(shared_embedding=shared)
    target_size = None if shared else len(target_pieces)
    model = _model(hp, len(new_pieces), 3, target_size)
    twin = _model(hp, len(new_pieces), 3, target_size)  # a fresh model of the same seed
    source = warm_start.Source(prefix, old_path, warm_start.read_pieces(old_path))
    sides = {"inputs": new_pieces, "targets": target_pieces}
    record = warm_start.warm_start(model, source, sides, printer=print)

    layers = ["token_embedding"] if shared else ["source_embedding", "target_embedding"]
    old_ids = {piece: index for index, piece in enumerate(old_pieces)}
    for layer in layers:
        pieces = target_pieces if layer == "target_embedding" else new_pieces
        rows = old.get_tensor(f"model/{layer}/embeddings/{ATTRIBUTE}")
        value = getattr(model, layer).embeddings.numpy()
        fresh = getattr(twin, layer).embeddings.numpy()
        both = [i for i, piece in enumerate(pieces) if piece in old_ids]
        assert 259 < len(both) < len(pieces)  # bytes, reserved and some learned pieces shared
        for index, piece in enumerate(pieces):
            expected = rows[old_ids[piece]] if piece in old_ids else fresh[index]
            np.testing.assert_array_equal(value[index], expected, err_msg=f"{layer} {piece}")
        assert not np.array_equal(value[both], fresh[both])
        name = f"model/{layer}/embeddings"
        assert record["vocabulary"]["rows_carried"][name] == len(both)
        assert record["vocabulary"]["rows"][name] == len(pieces)
    assert record["restored"] == len(model.weights) and record["not_restored"] == {}
    assert record["vocabulary"]["file"] == old_path


def test_a_vocabulary_that_is_not_the_checkpoints_is_refused(vocabularies, tmp_path):
    new_path, new_pieces = vocabularies["new"]
    prefix = _old_checkpoint(tmp_path, len(vocabularies["old"][1]), shared=True)
    source = warm_start.Source(prefix, new_path, new_pieces)  # the new one given as the old
    model = _model(_hp(), len(new_pieces))
    with pytest.raises(run_dir.RunDirError) as error:
        warm_start.warm_start(model, source, {"inputs": new_pieces, "targets": new_pieces})
    assert str(error.value).startswith(
        f"--warm_start_vocab={new_path} has 440 pieces but {EMBEDDING} of {prefix} has 400 rows"
    )


class _CaptionsEnDe(TranslateProblem):
    name = "warm_start_captions"
    vocab_size = 400  # the old vocabulary's size


def test_the_trainer_carries_rows_to_the_problems_vocabulary(
    vocabularies, shared_data, tmp_path, monkeypatch
):
    # The source run recorded a vocabulary of the same size as the new problem's but
    # other pieces: copying its rows by id would scramble them.
    raw = tmp_path / "raw"
    raw.mkdir()
    for language in ("en", "de"):
        lines = _captions(shared_data, language, 1000, 240)
        for split, part in (("train", lines[:200]), ("dev", lines[200:220]), ("test", lines[220:])):
            (raw / f"{split}.{language}").write_text("\n".join(part) + "\n", encoding="utf-8")
    monkeypatch.setattr(problems, "_REGISTRY", dict(problems._REGISTRY))
    problems.register(_CaptionsEnDe)
    data_dir = str(tmp_path / "data")
    _CaptionsEnDe().generate_data(data_dir, str(raw), workers=1)
    old_path, old_pieces = vocabularies["old"]
    source_run = tmp_path / "old_run"
    source_run.mkdir()
    prefix = _old_checkpoint(source_run, len(old_pieces), shared=True)
    tf.compat.v1.train.update_checkpoint_state(str(source_run), prefix)  # a run's state file
    sha256 = hashlib.sha256(Path(old_path).read_bytes()).hexdigest()
    run_dir.update_manifest(str(source_run), {"vocabulary": {"file": old_path, "sha256": sha256}})
    new_pieces = spm.SentencePieceProcessor(
        model_file=os.path.join(data_dir, _CaptionsEnDe.name, "vocab.model")
    ).id_to_piece(list(range(400)))
    common = dict(problem=_CaptionsEnDe.name, data_dir=data_dir, warm_start_from=str(source_run))

    lines = []
    trainer._set_up(_config(tmp_path / "by_id", **common), _hp(), lines.append)
    reason = (
        f"the source run's vocabulary {old_path} is another one (same size); pass "
        f"--warm_start_vocab={old_path} to carry its rows by piece"
    )
    assert f"  not restored (fresh): {EMBEDDING}: {reason}" in lines

    lines = []
    config = _config(tmp_path / "by_piece", warm_start_vocab=old_path, **common)
    run = trainer._set_up(config, _hp(), lines.append)
    carried = len(set(new_pieces) & set(old_pieces))
    assert f"  {EMBEDDING}: {carried} of 400 rows carried by piece from {old_path}; the rows " in (
        " ".join(lines)
    )
    record = run_dir.load_manifest(str(tmp_path / "by_piece"))["warm_start"]
    assert record["vocabulary"] == {
        "file": old_path,
        "rows_carried": {EMBEDDING: carried},
        "rows": {EMBEDDING: 400},
    }
    assert record["restored"] == len(run.model.weights) and record["not_restored"] == {}


def test_the_trainer_command_names_a_missing_source(tmp_path):
    missing = tmp_path / "no_such_run"
    result = warm_python.run(
        [sys.executable, "-m", "t2t_lite.trainer", f"--output_dir={tmp_path / 'run'}",
         "--problem=algorithmic_reverse", f"--warm_start_from={missing}"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"t2t_lite.trainer: --warm_start_from: checkpoint {missing} does not exist (no .index "
        "file); give a run folder that holds checkpoints or a checkpoint prefix "
        "(RUN/ckpt-STEP), or drop the flag to train from scratch"
    )
    assert not (tmp_path / "run").exists()


def _source_run_recording(folder, vocab_path: str, pieces: int) -> Path:
    """A run folder with one checkpoint whose manifest records `vocab_path` and its sha256."""
    folder.mkdir()
    prefix = _old_checkpoint(folder, pieces, shared=True)
    tf.compat.v1.train.update_checkpoint_state(str(folder), prefix)
    sha256 = hashlib.sha256(Path(vocab_path).read_bytes()).hexdigest()
    run_dir.update_manifest(str(folder), {"vocabulary": {"file": vocab_path, "sha256": sha256}})
    return folder


def test_an_empty_warm_start_vocab_is_one_line_naming_it(tmp_path):
    empty = tmp_path / "empty.model"
    empty.write_bytes(b"")
    source_run = tmp_path / "source"
    source_run.mkdir()
    prefix = _old_checkpoint(source_run, VOCAB, shared=True)
    config = _config(tmp_path / "new", warm_start_from=prefix, warm_start_vocab=str(empty))
    with pytest.raises(run_dir.RunDirError) as error:
        warm_start.find_source(config)
    assert str(error.value) == (
        f"--warm_start_vocab={empty}: {empty} is not a SentencePiece model: it has 0 pieces "
        "(0 bytes); rebuild it with `python -m t2t_lite.datagen`"
    )


def test_a_warm_start_vocab_other_than_the_source_runs_record_is_refused(vocabularies, tmp_path):
    old_path, old_pieces = vocabularies["old"]
    german_path, _ = vocabularies["german"]  # a valid vocabulary of the same size
    source_run = _source_run_recording(tmp_path / "source", old_path, len(old_pieces))
    config = _config(
        tmp_path / "new", warm_start_from=str(source_run), warm_start_vocab=german_path
    )
    with pytest.raises(run_dir.RunDirError) as error:
        warm_start.find_source(config)
    german = hashlib.sha256(Path(german_path).read_bytes()).hexdigest()
    old = hashlib.sha256(Path(old_path).read_bytes()).hexdigest()
    prefix = tf.train.latest_checkpoint(str(source_run))
    assert str(error.value) == (
        f"--warm_start_vocab={german_path} (sha256 {german[:12]}) is not the vocabulary of "
        f"the source {prefix}: its run's manifest.json records {old_path} (sha256 "
        f"{old[:12]}); pass that file, or a copy of it"
    )
    # The recorded vocabulary itself, and a copy of it elsewhere, are accepted.
    copy = tmp_path / "copy.model"
    copy.write_bytes(Path(old_path).read_bytes())
    for path in (old_path, str(copy)):
        config = _config(tmp_path / "new", warm_start_from=str(source_run), warm_start_vocab=path)
        assert warm_start.find_source(config).old_pieces == old_pieces
