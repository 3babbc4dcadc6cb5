"""Faults met while training, each reproduced on real files and real short runs.

Data rebuilt with another vocabulary, dev sentences longer than the model's positions, a
full disk (a real size-limited tmpfs), killed saves, a truncated checkpoint, impossible
hparams, a diverging loss and a shard damaged in place.
"""

import glob
import gzip
import hashlib
import json
import logging
import os
import shutil
import subprocess

import pytest
import sentencepiece as spm
import tensorflow as tf

from t2t_lite import hparams, problems
from t2t_lite.problems import encoding
from t2t_lite.problems.corpus import DataError
from t2t_lite.problems.translate import TranslateProblem
from t2t_lite.runs import run_dir
from t2t_lite.search import length_batches
from t2t_lite.training import bleu_eval, resume, trainer

TINY = "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48"
MAX_POSITION = 64  # learned positions: the table has this many rows


class TinyTranslate(TranslateProblem):
    """Multi30k's first lines with a 500-piece vocabulary: datagen in seconds."""

    name = "tiny_translate"
    vocab_size = 500
    vocab_sample_size = 10_000
    num_shards = {"train": 2}
    extra_decode_length = 10


PROBLEM = f"{__name__}:TinyTranslate"


def _hp(extra=""):
    return hparams.override(hparams.get("transformer_tiny"), ",".join(filter(None, [TINY, extra])))


def _config(output_dir, **overrides):
    values = dict(
        problem="algorithmic_copy",
        output_dir=str(output_dir),
        train_steps=6,
        eval_steps=1,
        eval_every=100,
        save_every=2,
        log_every=2,
        keep_checkpoints=3,
        eval_bleu_sentences=0,
    )
    values.update(overrides)
    return trainer.RunConfig(**values)


def _lines(shared_data, name, start, stop):
    with gzip.open(shared_data / "multi30k" / name, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][start:stop]


def _write_raw(raw_dir, shared_data, train=(0, 400), long_dev_line=True, dev=(0, 12)):
    """Raw en/de files; the last dev pair joins 8 sentences: longer than MAX_POSITION."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    for language in ("en", "de"):
        train_lines = _lines(shared_data, f"train.{language}.gz", *train)
        dev_lines = _lines(shared_data, f"val.{language}.gz", *dev)
        if long_dev_line:
            dev_lines.append(" ".join(_lines(shared_data, f"val.{language}.gz", 100, 108)))
        (raw_dir / f"train.{language}").write_text("\n".join(train_lines) + "\n")
        (raw_dir / f"dev.{language}").write_text("\n".join(dev_lines) + "\n")
        (raw_dir / f"test.{language}").write_text("\n".join(dev_lines[:3]) + "\n")
    return raw_dir


def _datagen(data_dir, raw_dir):
    TinyTranslate().generate_data(str(data_dir), str(raw_dir))
    return data_dir / "tiny_translate"


def _sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _manifest(output_dir):
    return json.loads((output_dir / "manifest.json").read_text())


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def translate_run(tmp_path_factory, shared_data):
    """Data with one over-long dev pair, and a 2-step run that evaluated loss and BLEU."""
    root = tmp_path_factory.mktemp("translate")
    folder = _datagen(root / "data", _write_raw(root / "raw", shared_data))
    output_dir = root / "run"
    lines, records = [], _Records()
    logging.getLogger().addHandler(records)
    try:
        metrics = trainer.train_and_evaluate(
            _config(
                output_dir,
                problem=PROBLEM,
                data_dir=str(root / "data"),
                train_steps=2,
                eval_every=2,
                eval_steps=0,
                eval_bleu_sentences=20,
                eval_decode_method="greedy",
            ),
            _hp(f"position_encoding=learned,max_position={MAX_POSITION}"),
            printer=lines.append,
        )
    finally:
        logging.getLogger().removeHandler(records)
    return dict(root=root, data=root / "data", folder=folder, run=output_dir, lines=lines,
                warnings=records.messages, metrics=metrics)  # fmt: skip


@pytest.fixture(scope="module")
def algorithmic_run(tmp_path_factory):
    """A 6-step run of algorithmic_copy with checkpoints 2, 4 and 6."""
    output_dir = tmp_path_factory.mktemp("algorithmic") / "run"
    trainer.train_and_evaluate(_config(output_dir), _hp(), printer=lambda _: None)
    return output_dir


def _copy(source, target):
    shutil.copytree(source, target)
    return target


# Item 1: the vocabulary a run was trained on.


def test_resume_on_data_rebuilt_with_another_vocabulary_is_refused(
    translate_run, tmp_path, shared_data
):
    output_dir = _copy(translate_run["run"], tmp_path / "run")
    data = _copy(translate_run["data"], tmp_path / "data")
    old_vocab = data / "tiny_translate" / "vocab.model"
    old_hash, before = _sha256(old_vocab), _manifest(output_dir)
    recorded = translate_run["folder"] / "vocab.model"
    assert before["vocabulary"] == {"file": str(recorded), "sha256": old_hash}
    # Other training sentences: another vocabulary of the same size (same shapes).
    _datagen(data, _write_raw(tmp_path / "raw", shared_data, train=(400, 800)))
    assert _sha256(old_vocab) != old_hash
    assert TinyTranslate().vocab_sizes(str(data)) == TinyTranslate().vocab_sizes(
        str(translate_run["data"])
    )
    config = _config(output_dir, problem=PROBLEM, data_dir=str(data), train_steps=4)
    with pytest.raises(run_dir.RunDirError) as error:
        trainer.train_and_evaluate(
            config, _hp(f"position_encoding=learned,max_position={MAX_POSITION}")
        )
    message = str(error.value)
    assert f"trained with the vocabulary {recorded}" in message
    assert f"sha256 {old_hash[:12]}" in message and f"but the data_dir's {old_vocab}" in message
    assert "--data_dir" in message and "new --output_dir" in message
    assert _manifest(output_dir) == before  # nothing overwritten
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("ckpt-2")


def test_same_vocabulary_other_examples_and_runs_without_the_field_resume(
    translate_run, tmp_path, shared_data
):
    output_dir = _copy(translate_run["run"], tmp_path / "run")
    data = _copy(translate_run["data"], tmp_path / "data")
    manifest = _manifest(output_dir)
    old_fingerprint, vocabulary = manifest["data_fingerprint"], manifest.pop("vocabulary")
    (output_dir / "manifest.json").write_text(json.dumps(manifest))  # as older releases wrote
    # Only the dev split changes: the vocabulary is learned from train, so it stays.
    _datagen(data, _write_raw(tmp_path / "raw", shared_data, dev=(20, 30)))
    assert _sha256(data / "tiny_translate" / "vocab.model") == vocabulary["sha256"]
    lines = []
    trainer.train_and_evaluate(
        _config(output_dir, problem=PROBLEM, data_dir=str(data), train_steps=4),
        _hp(f"position_encoding=learned,max_position={MAX_POSITION}"),
        printer=lines.append,
    )
    assert any(line.startswith("resumed from") and "at step 2" in line for line in lines)
    after = _manifest(output_dir)
    assert after["vocabulary"]["sha256"] == vocabulary["sha256"]
    assert after["data_fingerprint"] != old_fingerprint
    assert after["earlier_data_fingerprints"] == [old_fingerprint]


# Item 6: dev sentences longer than the model's positions.


def _too_long(folder, dev_lines):
    """Dev pairs whose longer side, EOS included, exceeds MAX_POSITION: counted here."""
    processor = spm.SentencePieceProcessor(model_file=str(folder / "vocab.model"))
    return sum(
        max(len(processor.encode(source)), len(processor.encode(target))) + 1 > MAX_POSITION
        for source, target in dev_lines
    )


def test_evaluation_skips_and_counts_dev_examples_longer_than_the_positions(translate_run):
    raw = translate_run["root"] / "raw"
    pairs = list(zip((raw / "dev.en").read_text().splitlines(),
                     (raw / "dev.de").read_text().splitlines()))  # fmt: skip
    longer = _too_long(translate_run["folder"], pairs)
    assert longer >= 1
    expected = (
        f"split dev: evaluation skips {longer} of {len(pairs)} examples longer than "
        f"{MAX_POSITION} tokens"
    )
    assert any(expected in message for message in translate_run["warnings"])
    lines = translate_run["lines"]
    assert any(line.startswith("eval step 2: loss") for line in lines), lines
    assert any(line.startswith("eval step 2: BLEU") for line in lines), lines
    assert "bleu" in translate_run["metrics"]


def test_bleu_decodes_the_start_of_an_over_long_sentence(translate_run):
    problem, data = TinyTranslate(), str(translate_run["data"])
    hp = _hp(f"position_encoding=learned,max_position={MAX_POSITION}")
    model, _ = trainer.build_model_and_optimizer(hp, problem, data, tf.distribute.get_strategy())
    evaluator = bleu_eval.BleuEvaluator(model, problem, data, 20, method="greedy")
    keep = MAX_POSITION - problem.extra_decode_length - 1
    assert max(len(ids) for ids in evaluator.inputs) == keep  # the long one, cut
    result = evaluator.evaluate()
    assert len(result["hypotheses"]) == len(evaluator.references) == 13


def test_an_over_long_dev_sentence_is_searched_alone_and_costs_in_proportion(translate_run):
    problem, data = TinyTranslate(), str(translate_run["data"])
    # Sinusoid positions up to 1,024: the long dev pair (8 sentences joined) is not cut.
    model, _ = trainer.build_model_and_optimizer(_hp(), problem, data, tf.distribute.get_strategy())
    evaluator = bleu_eval.BleuEvaluator(model, problem, data, 20, method="greedy")
    extra = evaluator.config.extra_length
    lengths = [len(ids) for ids in evaluator.inputs]
    longest = lengths.index(max(lengths))
    assert max(lengths) + extra > 2 * (sorted(lengths)[-2] + extra), lengths
    batches = evaluator.batches()
    assert [longest] in batches
    assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
    # Every row of a batch computes for as many steps as the batch's longest, at its
    # width: so each row costs at most twice what it would alone.
    cost = sum(len(batch) * (lengths[batch[0]] + extra) for batch in batches)
    assert cost <= 2 * sum(length + extra for length in lengths)
    assert len(evaluator.evaluate()["hypotheses"]) == len(lengths) == 13


def test_length_batches_put_a_sentence_whose_search_is_twice_as_long_apart():
    lengths = [12, 900, 30, 29, 5, 31]
    assert length_batches(lengths, 32) == [[1, 5, 2, 3, 0, 4]]
    assert length_batches(lengths, 32, extra_length=50) == [[1], [5, 2, 3, 0, 4]]
    assert length_batches(lengths, 2, extra_length=50) == [[1], [5, 2], [3, 0], [4]]
    # (5 + 50) * 2 < 31 + 50 is false: short sentences stay with their batch.
    assert length_batches([31, 5], 32, extra_length=50) == [[0, 1]]
    assert length_batches([31, 5], 32, extra_length=0) == [[0], [1]]


# Item 7: a full disk, and what killed saves leave.


@pytest.fixture
def small_disk(tmp_path):
    """A real 4 MB tmpfs (needs root: mounting is the only honest full disk)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def test_full_disk_stops_cleanly_and_keeps_the_last_good_checkpoint(algorithmic_run, small_disk):
    output_dir = _copy(algorithmic_run, small_disk / "run")
    stat = os.statvfs(small_disk)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 40_000))  # room for manifest only
    with pytest.raises(run_dir.RunDirError) as error:
        trainer.train_and_evaluate(
            _config(output_dir, train_steps=8), _hp(), printer=lambda _: None
        )
    message = str(error.value)
    assert f"cannot write checkpoint {output_dir}/ckpt-8 in {output_dir}" in message
    assert "no space left on device" in message
    assert f"the last good checkpoint {output_dir}/ckpt-6 is intact" in message
    names = sorted(os.listdir(output_dir))
    assert not [n for n in names if n.endswith("_temp") or n.endswith(".tmp")], names
    assert not [n for n in names if n.startswith("ckpt-8")], names
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("ckpt-6")
    model, optimizer = trainer.build_model_and_optimizer(
        _hp(), problems.get("algorithmic_copy"), "", tf.distribute.get_strategy()
    )
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    assert resume.restore_latest(checkpoint, str(output_dir)).endswith("ckpt-6")
    assert int(optimizer.iterations.numpy()) == 6


def test_start_removes_only_the_leftovers_of_killed_saves(algorithmic_run, tmp_path):
    output_dir = _copy(algorithmic_run, tmp_path / "run")
    # What a killed save leaves, and look-alikes that are not a save's (kept).
    leftovers = ["ckpt-8_temp/part-00000-of-00001", "tmpa1b2c3.tmp", "checkpoint.tmp" + "0a" * 16]
    bystanders = ["notes_temp/a", "my.tmp", "tmp-notes.txt", "train/ckpt-3_temp/a"]
    for name in leftovers + bystanders:
        (output_dir / name).parent.mkdir(exist_ok=True)
        (output_dir / name).write_text("x")
    lines = []
    trainer.train_and_evaluate(_config(output_dir), _hp(), printer=lines.append)  # at step 6
    for name in ["ckpt-8_temp", *leftovers[1:]]:
        assert not (output_dir / name).exists(), name
    for name in bystanders:
        assert (output_dir / name).exists(), name
    assert any("removed 3 leftover(s) of interrupted saves" in line for line in lines), lines


# Item 8: a truncated newest checkpoint.


def _truncate(path):
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)


def test_truncated_newest_checkpoint_falls_back_to_the_newest_readable(algorithmic_run, tmp_path):
    output_dir = _copy(algorithmic_run, tmp_path / "run")
    _truncate(output_dir / "ckpt-6.data-00000-of-00001")
    lines = []
    trainer.train_and_evaluate(_config(output_dir, train_steps=8), _hp(), printer=lines.append)
    warnings = [line for line in lines if line.startswith("warning: skipping unreadable")]
    assert len(warnings) == 1 and f"{output_dir}/ckpt-6 (" in warnings[0], lines
    assert f"resuming from {output_dir}/ckpt-4" in warnings[0]
    assert any(line.startswith(f"resumed from {output_dir}/ckpt-4 at step 4") for line in lines)
    # Kept, not deleted, and out of the state file: never restored by anything.
    aside = output_dir / "unreadable" / "ckpt-6.data-00000-of-00001"
    assert aside.stat().st_size == os.path.getsize(algorithmic_run / aside.name) // 2
    state = tf.train.get_checkpoint_state(str(output_dir))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "ckpt-4", "ckpt-6", "ckpt-8"
    ]  # fmt: skip
    reader = tf.train.load_checkpoint(str(output_dir / "ckpt-6"))  # written anew, readable
    assert reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == 6


def test_no_readable_checkpoint_is_one_clear_error(algorithmic_run, tmp_path):
    output_dir = _copy(algorithmic_run, tmp_path / "run")
    _truncate(output_dir / "ckpt-6.index")
    for step in (2, 4):
        _truncate(output_dir / f"ckpt-{step}.data-00000-of-00001")
    with pytest.raises(run_dir.RunDirError) as error:
        trainer.train_and_evaluate(_config(output_dir, train_steps=8), _hp())
    message = str(error.value)
    assert f"no checkpoint of {output_dir} can be read" in message
    for step in (6, 4, 2):
        assert f"{output_dir}/ckpt-{step} (" in message
    assert "new --output_dir" in message
    assert not (output_dir / "unreadable").exists()  # nothing moved when nothing is kept


# Item 9: impossible hparams, and a loss that diverges.


@pytest.mark.parametrize(
    "spec, message",
    [
        ("num_heads=0", "hparam num_heads=0: must be a finite number >= 1"),
        ("warmup_steps=0", "hparam warmup_steps=0: must be a finite number >= 1"),
        ("length_bucket_step=1.0", "hparam length_bucket_step=1.0: must be a finite number > 1"),
        ("learning_rate=nan", "hparam learning_rate=nan: must be a finite number > 0"),
        ("learning_rate=-1", "hparam learning_rate=-1.0: must be a finite number > 0"),
        ("hidden_size=0", "hparam hidden_size=0: must be a finite number >= 1"),
        ("batch_size=0", "hparam batch_size=0: must be a finite number >= 1"),
        ("max_length=0", "hparam max_length=0: must be a finite number >= 1"),
        ("adam_beta2=1.0", "hparam adam_beta2=1.0: must be in [0, 1)"),
        ("clip_grad_norm=inf", "hparam clip_grad_norm=inf: must be a finite number >= 0"),
        ("hidden_size=33,num_heads=1", "hparam hidden_size=33: must be even with sinusoid"),
    ],
)
def test_impossible_hparams_are_refused_naming_the_hparam_value_and_rule(spec, message):
    with pytest.raises(ValueError) as error:
        hparams.override(hparams.get("transformer_tiny"), spec)
    assert str(error.value).startswith(message)
    assert len(str(error.value).splitlines()) == 1


def test_diverging_loss_stops_the_run_without_saving_nan_weights(algorithmic_run, tmp_path):
    output_dir = _copy(algorithmic_run, tmp_path / "run")
    before = sorted(os.listdir(output_dir))
    # A finite but absurd rate: update 7 sends the weights to ~1e30, the loss to NaN.
    with pytest.raises(run_dir.RunDirError, match=r"training diverged at step 8: loss (nan|inf)"):
        trainer.train_and_evaluate(
            _config(output_dir, train_steps=12, save_every=2, log_every=4),
            _hp("learning_rate=1e35"),
            printer=lambda _: None,
        )
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("ckpt-6")
    assert not glob.glob(str(output_dir / "ckpt-8*"))
    assert [n for n in sorted(os.listdir(output_dir)) if n.startswith("ckpt")] == [
        n for n in before if n.startswith("ckpt")
    ]


# Item 12: a shard damaged in place.


def _damage(path):
    """Flips 16 bytes in the middle of `path`: same size, record checksums now wrong."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "split, bleu_sentences",
    [("train", 0), ("dev", 20), ("dev", 0)],
    ids=["train", "dev-bleu-set-up", "dev-evaluation"],
)
def test_a_damaged_shard_is_named_with_what_to_do(translate_run, tmp_path, split, bleu_sentences):
    data = _copy(translate_run["data"], tmp_path / "data")
    shard = sorted((data / "tiny_translate").glob(f"{split}-00000-of-*.tfrecord"))[0]
    size = shard.stat().st_size
    _damage(shard)
    assert shard.stat().st_size == size
    # dev: a finished run resumed, so that only the BLEU set-up and the evaluation read.
    if split == "dev":
        output_dir = _copy(translate_run["run"], tmp_path / "run")
    else:
        output_dir = tmp_path / "run"
    config = _config(output_dir, problem=PROBLEM, data_dir=str(data), train_steps=2,
                     eval_bleu_sentences=bleu_sentences)  # fmt: skip
    with pytest.raises(DataError) as error:
        trainer.train_and_evaluate(
            config, _hp(f"position_encoding=learned,max_position={MAX_POSITION}"),
            printer=lambda _: None,
        )  # fmt: skip
    message = str(error.value)
    # Found at the start, by the shard's sha256 (its bytes are not datagen's).
    assert message.startswith(f"{shard}: shard damaged: same size but not the bytes datagen")
    assert "python -m t2t_lite.datagen --problem=tiny_translate" in message


def test_a_shard_rewritten_with_valid_checksums_is_refused_at_the_start(translate_run, tmp_path):
    data = _copy(translate_run["data"], tmp_path / "data")
    shard = sorted((data / "tiny_translate").glob("train-00000-of-*.tfrecord"))[0]
    size = shard.stat().st_size
    records = []
    for record in tf.data.TFRecordDataset(str(shard)).as_numpy_iterator():
        example = tf.train.Example.FromString(record)
        inputs = list(example.features.feature["inputs"].int64_list.value)
        targets = list(example.features.feature["targets"].int64_list.value)
        records.append(encoding.serialize(inputs, targets[-2::-1] + targets[-1:]))  # EOS last
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for record in records:
            writer.write(record)
    assert shard.stat().st_size == size
    assert sum(1 for _ in tf.data.TFRecordDataset(str(shard))) == len(records)  # CRCs valid
    output_dir = tmp_path / "run"
    config = _config(output_dir, problem=PROBLEM, data_dir=str(data), train_steps=2)
    with pytest.raises(DataError) as error:
        trainer.train_and_evaluate(
            config, _hp(f"position_encoding=learned,max_position={MAX_POSITION}"),
            printer=lambda _: None,
        )  # fmt: skip
    metadata = json.loads((data / "tiny_translate" / "metadata.json").read_text())
    recorded = metadata["splits"]["train"]["shards"][0]["sha256"]
    assert str(error.value) == (
        f"{shard}: shard damaged: same size but not the bytes datagen wrote (sha256 differs "
        f"from {recorded[:12]}... in metadata.json); rerun `python -m t2t_lite.datagen "
        f"--problem=tiny_translate --data_dir={data}`"
    )
    assert not output_dir.exists()


def test_a_resume_that_diverges_leaves_the_runs_settings_as_they_were(algorithmic_run, tmp_path):
    output_dir = _copy(algorithmic_run, tmp_path / "run")
    files = {name: (output_dir / name).read_text() for name in ("hparams.json", "manifest.json")}
    assert json.loads(files["hparams.json"])["learning_rate"] != 1e35
    with pytest.raises(run_dir.RunDirError, match=r"training diverged at step 8"):
        trainer.train_and_evaluate(
            _config(output_dir, train_steps=12, save_every=2, log_every=4),
            _hp("learning_rate=1e35"),
            printer=lambda _: None,
        )
    for name, text in files.items():
        assert (output_dir / name).read_text() == text, name
    # A resume that saves a checkpoint records the settings it trained it with.
    trainer.train_and_evaluate(
        _config(output_dir, train_steps=8), _hp("learning_rate=0.5"), printer=lambda _: None
    )
    assert tf.train.latest_checkpoint(str(output_dir)).endswith("ckpt-8")
    assert json.loads((output_dir / "hparams.json").read_text())["learning_rate"] == 0.5
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert manifest["hparams"]["learning_rate"] == 0.5
