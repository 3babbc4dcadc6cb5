"""Warm start (tensor2tensor's `--warm_start_from`): a new run begins from another run's weights.

A new run (no checkpoint in its output_dir yet) copies every model variable that the source
checkpoint holds with the same shape, found through the checkpoint's object graph as
resuming and restoring find them (`runs.checkpoints.variable_keys`). The other variables
keep the fresh initialisation of the run's seed. The optimizer is not read: Adam's moments
and the step start at zero, so the learning rate warms up again, as in tensor2tensor, whose
warm start restores model variables only.

Ids index a vocabulary, so a row of an embedding ([V, D]: the shared one, or the source and
the target ones; each also gives the pre-softmax projection) stands for one piece. With
`--warm_start_vocab=OLD.model`, the source run's SentencePiece model, the rows are carried
over by piece: row i of the new matrix becomes the old row of the new vocabulary's piece i
when the old vocabulary has that piece, and the other rows stay fresh. Without it, an
embedding is left fresh when its vocabulary size differs, or when the source run's manifest
records another vocabulary than this run's (same size, other pieces).

A run that resumes ignores `--warm_start_from` and says so, as tensor2tensor does: its own
checkpoint holds the warm-started weights and every update since. The manifest's
`warm_start` record names the source, the counts and the vocabulary carried, and is kept
across resumes.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import tensorflow as tf

from t2t_lite.problems.problem import Problem
from t2t_lite.problems.vocab import SentencePieceEncoder
from t2t_lite.runs import checkpoints, run_dir
from t2t_lite.runs.restore import RestoreError, find_checkpoint
from t2t_lite.runs.run_dir import RunDirError
from t2t_lite.training.run_config import RunConfig

MANIFEST_KEY = "warm_start"
# The embedding layers of the model and the vocabulary (problem encoder) their rows index.
EMBEDDINGS = {
    "token_embedding": "inputs",
    "source_embedding": "inputs",
    "target_embedding": "targets",
}
# The report names this many variables left fresh (a deeper model leaves whole layers);
# the manifest lists them all.
SHOWN_NOT_RESTORED = 12
_FROM = "--warm_start_from"
_VOCAB = "--warm_start_vocab"


@dataclasses.dataclass(frozen=True)
class Source:
    """A checked warm-start source.

    Attributes:
        checkpoint: absolute checkpoint prefix.
        vocab_file: the `--warm_start_vocab` file (absolute), or None.
        old_pieces: its pieces in id order, or None.
        recorded_vocabulary: the source run's manifest `vocabulary` record, or None.
    """

    checkpoint: str
    vocab_file: str | None = None
    old_pieces: list | None = None
    recorded_vocabulary: dict | None = None


def find_source(config: RunConfig) -> Source | None:
    """The source of a new run started with `--warm_start_from`; None when it resumes.

    Checked before the run creates its folder, so a wrong path leaves nothing behind.

    Raises:
        RunDirError: a source that does not exist or holds no checkpoint, or a
            `--warm_start_vocab` that is not a SentencePiece model or not the one the
            source run's manifest records.
    """
    if not config.warm_start_from or _has_checkpoints(config.output_dir):
        return None
    checkpoint = resolve_checkpoint(config.warm_start_from)
    vocab_file = config.warm_start_vocab
    recorded = _recorded_vocabulary(checkpoint)
    old_pieces = read_pieces(vocab_file) if vocab_file else None
    if vocab_file:
        _check_recorded(vocab_file, recorded, checkpoint)
    return Source(
        checkpoint=checkpoint,
        vocab_file=vocab_file,
        old_pieces=old_pieces,
        recorded_vocabulary=recorded,
    )


def _check_recorded(vocab_file: str, recorded: dict | None, checkpoint: str) -> None:
    """Refuses a `--warm_start_vocab` other than the one the source run's manifest records.

    A vocabulary of the right size but other pieces would map every row to the wrong
    piece without any error, so the file's sha256 must be the recorded one.
    """
    if not recorded or not recorded.get("sha256"):
        return  # a source run without a record (no vocabulary file, or an older run)
    given = run_dir.file_sha256(vocab_file)
    if given == recorded["sha256"]:
        return
    raise RunDirError(
        f"{_VOCAB}={vocab_file} (sha256 {given[:12]}) is not the vocabulary of the source "
        f"{checkpoint}: its run's manifest.json records {recorded.get('file')} (sha256 "
        f"{recorded['sha256'][:12]}); pass that file, or a copy of it"
    )


def _has_checkpoints(output_dir: str) -> bool:
    # What resume.restore_latest restores from (or refuses, when none can be read).
    state = tf.train.get_checkpoint_state(output_dir) if os.path.isdir(output_dir) else None
    return bool(state and state.model_checkpoint_path)


def resolve_checkpoint(path: str) -> str:
    """The checkpoint of `path` as the decoder resolves `--checkpoint_path`, absolute.

    A folder (a run, RUN/best, RUN/averaged) gives its newest checkpoint; a prefix itself.
    """
    path = os.path.abspath(os.path.expanduser(path))
    try:
        return find_checkpoint("", path)
    except RestoreError as error:
        raise RunDirError(
            f"{_FROM}: {error}; give a run folder that holds checkpoints or a "
            "checkpoint prefix (RUN/ckpt-STEP), or drop the flag to train from scratch"
        ) from None


def read_pieces(vocab_file: str) -> list:
    """The pieces of SentencePiece model `vocab_file`, in id order."""
    if not os.path.isfile(vocab_file):
        raise RunDirError(
            f"{_VOCAB}={vocab_file}: no such file; pass the vocab.model of the data the "
            "source run was trained on (its manifest.json names it under vocabulary.file)"
        )
    try:
        return SentencePieceEncoder(vocab_file).pieces()
    except ValueError as error:
        raise RunDirError(f"{_VOCAB}={vocab_file}: {error}") from None


def _recorded_vocabulary(checkpoint: str) -> dict | None:
    """The vocabulary record of the run that wrote `checkpoint` (RUN/ckpt-N or RUN/best/...)."""
    folder = os.path.dirname(checkpoint)
    for candidate in (folder, os.path.dirname(folder)):
        manifest = run_dir.load_manifest(candidate)
        if manifest:
            return manifest.get("vocabulary")
    return None


def piece_rows(old_pieces: list, new_pieces: list) -> tuple[np.ndarray, np.ndarray]:
    """(new ids, old ids) of the pieces both vocabularies hold, in new-id order."""
    old_ids = {piece: index for index, piece in enumerate(old_pieces)}
    pairs = [(index, old_ids[p]) for index, p in enumerate(new_pieces) if p in old_ids]
    new, old = zip(*pairs) if pairs else ((), ())
    return np.array(new, np.int64), np.array(old, np.int64)


def for_run(
    model,
    source: Source | None,
    config: RunConfig,
    problem: Problem,
    resumed_from: str | None,
    printer=print,
) -> dict | None:
    """Warm-starts a new run's `model`; returns the manifest's `warm_start` record.

    A resumed run ignores `--warm_start_from` (one line says so) and keeps the record of
    its start.
    """
    if resumed_from:
        if config.warm_start_from:
            printer(
                f"{_FROM} ignored: {config.output_dir} resumes from its own checkpoint "
                f"{resumed_from}"
            )
        return run_dir.load_manifest(config.output_dir).get(MANIFEST_KEY)
    if source is None:
        return None
    new_pieces = {}
    if source.old_pieces is not None:
        encoders = problem.encoders(config.data_dir)
        new_pieces = {side: _pieces(encoders[side], problem.name) for side in encoders}
    differs = _vocabulary_differs(source, run_dir.vocabulary_record(problem, config.data_dir))
    return warm_start(model, source, new_pieces, differs, printer)


def _pieces(encoder, problem_name: str) -> list:
    if not hasattr(encoder, "pieces"):
        raise RunDirError(
            f"{_VOCAB}: problem {problem_name} has no SentencePiece vocabulary, so its rows "
            "cannot be matched by piece; drop the flag"
        )
    return encoder.pieces()


def _vocabulary_differs(source: Source, new: dict | None) -> bool:
    recorded = source.recorded_vocabulary
    return bool(recorded and new and recorded.get("sha256") != new["sha256"])


def warm_start(
    model,
    source: Source,
    new_pieces: dict[str, list],
    vocabulary_differs: bool = False,
    printer=print,
) -> dict:
    """Copies into `model` what fits of `source`; prints the report; returns its record.

    Assignments happen outside any replica context, so mirrored variables (under a
    tf.distribute strategy) take the value on every replica.

    Args:
        model: the built model of the new run, freshly initialised.
        source: from `find_source` (or `Source(checkpoint)`).
        new_pieces: {"inputs": pieces, "targets": pieces} of the new vocabularies, needed
            with `source.old_pieces`.
        vocabulary_differs: the source run recorded another vocabulary than this run's.

    Returns:
        {"checkpoint", "variables", "restored", "not_restored": {name: reason},
        "vocabulary": {"file", "rows_carried": {name: count}, "rows": {name: V}} or None}.

    Raises:
        RunDirError: the checkpoint cannot be read, shares no variable with the model, or
            does not fit `--warm_start_vocab`.
    """
    try:
        keys = checkpoints.variable_keys(model, source.checkpoint)
        reader = tf.train.load_checkpoint(source.checkpoint)
    except checkpoints.CheckpointError as error:
        raise RunDirError(f"{_FROM}: {error}") from None
    shapes = reader.get_variable_to_shape_map()
    restored, skipped, carried, rows = [], {}, {}, {}
    for name, variable, key in keys:
        saved = shapes.get(key) if key else None
        side = _embedding_side(name)
        reason = _unfit(variable, saved, side, source, vocabulary_differs)
        if reason:
            skipped[name] = reason
            continue
        value = _read(reader, key, source.checkpoint)
        if side and source.old_pieces is not None:
            _check_rows(source, name, value)
            value, carried[name] = _carry_rows(variable, value, source.old_pieces, new_pieces[side])
            rows[name] = int(variable.shape[0])
        variable.assign(value)
        restored.append(name)
    if not restored:
        example = next(iter(skipped.items()), ("-", "the model has no variables"))
        raise RunDirError(
            f"{_FROM}={source.checkpoint}: no variable of it fits this model (none of the "
            f"{len(keys)} has the same name and shape, e.g. {example[0]}: {example[1]}); "
            "warm-start from a run of the same --hparams_set/--hparams, or drop the flag"
        )
    vocabulary = None
    if source.vocab_file:
        vocabulary = {"file": source.vocab_file, "rows_carried": carried, "rows": rows}
    record = {
        "checkpoint": source.checkpoint,
        "variables": len(keys),
        "restored": len(restored),
        "not_restored": skipped,
        "vocabulary": vocabulary,
    }
    report(record, printer)
    return record


def _embedding_side(name: str) -> str | None:
    """The vocabulary side of embedding matrix "model/<layer>/embeddings"; None for others."""
    parts = name.split("/")
    if len(parts) == 3 and parts[2] == "embeddings":
        return EMBEDDINGS.get(parts[1])
    return None


def _unfit(
    variable, saved, side: str | None, source: Source, vocabulary_differs: bool
) -> str | None:
    """Why `variable` is left fresh, or None when it is taken from the checkpoint."""
    if saved is None:
        return "missing from the checkpoint"
    model_shape, saved = list(variable.shape), list(saved)
    if side is None or model_shape[1:] != saved[1:]:
        if model_shape == saved:
            return None
        return f"shape differs (checkpoint {saved}, model {model_shape})"
    if source.old_pieces is not None:
        return None
    recorded = (source.recorded_vocabulary or {}).get("file")
    hint = f"pass {_VOCAB}={recorded or 'OLD_VOCAB.model'} to carry its rows by piece"
    if model_shape[0] != saved[0]:
        return (
            f"vocabulary size differs (checkpoint {saved[0]} rows, model {model_shape[0]}); {hint}"
        )
    if vocabulary_differs:
        return f"the source run's vocabulary {recorded} is another one (same size); {hint}"
    return None


def _read(reader, key: str, checkpoint: str) -> np.ndarray:
    try:
        return reader.get_tensor(key)
    except tf.errors.OpError as error:
        raise RunDirError(
            f"{_FROM}={checkpoint}: cannot read {key} ({str(error).splitlines()[0][:200]}); "
            "its .data files may be incomplete: copy them again or pick another checkpoint"
        ) from None


def _check_rows(source: Source, name: str, value: np.ndarray) -> None:
    if value.shape[0] != len(source.old_pieces):
        raise RunDirError(
            f"{_VOCAB}={source.vocab_file} has {len(source.old_pieces)} pieces but {name} of "
            f"{source.checkpoint} has {value.shape[0]} rows: pass the vocabulary of the data "
            "the source run was trained on"
        )


def _carry_rows(variable, old: np.ndarray, old_pieces: list, new_pieces: list):
    """(the new matrix, rows carried): the fresh rows, with the shared pieces' old rows."""
    new_ids, old_ids = piece_rows(old_pieces, new_pieces)
    value = np.array(variable.numpy())  # the fresh initialisation
    value[new_ids] = old[old_ids]
    return value, len(new_ids)


def report(record: dict, printer=print) -> None:
    """Prints what a warm start took: counts, rows carried by piece, what stays fresh and why."""
    printer(
        f"warm start from {record['checkpoint']}: {record['restored']} of "
        f"{record['variables']} model variables restored; the optimizer starts fresh at step 0"
    )
    vocabulary = record["vocabulary"] or {"rows_carried": {}}
    for name, count in vocabulary["rows_carried"].items():
        printer(
            f"  {name}: {count} of {vocabulary['rows'][name]} rows carried by piece from "
            f"{vocabulary['file']}; the rows of the other pieces are fresh"
        )
    skipped = list(record["not_restored"].items())
    for name, reason in skipped[:SHOWN_NOT_RESTORED]:
        printer(f"  not restored (fresh): {name}: {reason}")
    if len(skipped) > SHOWN_NOT_RESTORED:
        printer(
            f"  and {len(skipped) - SHOWN_NOT_RESTORED} more not restored, each listed with "
            f"its reason in the run's manifest.json under {MANIFEST_KEY}.not_restored"
        )
