"""Restoring several trained runs as one ensemble (`t2t_lite.models.Ensemble`).

The commands name an ensemble by comma-separated lists: `--output_dir=RUN_A,RUN_B`
(each run's newest checkpoint), optionally with `--checkpoint_path=CKPT_A,CKPT_B` (one
per run), or one run with several checkpoints of it (`--output_dir=RUN
--checkpoint_path=RUN/ckpt-100,RUN/ckpt-200`). One run and at most one checkpoint is
a single model, restored as before.

The models must share the problem's vocabulary: ids index it, so with another
vocabulary a model's ids mean other pieces. Before any weight is read, the runs'
manifests are compared: the problem each was trained on, and the sha256 of its
vocabulary file (recorded by the trainer) with each other's and with the vocabulary
file of --data_dir. A difference is one `RestoreError` line naming both runs and what
differs. Restoring then checks each checkpoint against a model of the problem's
vocabulary size, as for a single model.
"""

from __future__ import annotations

import dataclasses

from t2t_lite import problems as problems_lib
from t2t_lite.models import COMBINATIONS, Ensemble, EnsembleError
from t2t_lite.runs import run_dir
from t2t_lite.runs.restore import RestoreError, TrainedModel, load_trained_model


def split_list(value: str | None) -> list:
    """The comma-separated parts of `value`, stripped; [] for None or ""."""
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def ensemble_members(output_dir: str | None, checkpoint_path: str | None) -> list:
    """[(output_dir, checkpoint_path or None)] of each model the flags name.

    Raises:
        RestoreError: as many checkpoints as runs is needed, unless there is one run.
    """
    runs = split_list(output_dir) or [output_dir or ""]
    checkpoints = split_list(checkpoint_path)
    if not checkpoints:
        return [(run, None) for run in runs]
    if len(runs) == 1:
        return [(runs[0], checkpoint) for checkpoint in checkpoints]
    if len(checkpoints) != len(runs):
        raise RestoreError(
            f"--checkpoint_path names {len(checkpoints)} checkpoints for {len(runs)} runs in "
            "--output_dir; give one checkpoint per run, in the same order, or none (each "
            "run's newest)"
        )
    return list(zip(runs, checkpoints))


def is_ensemble(output_dir: str | None, checkpoint_path: str | None) -> bool:
    """True when the flags name more than one model."""
    return len(split_list(output_dir)) > 1 or len(split_list(checkpoint_path)) > 1


def check_shared_vocabulary(problem, data_dir: str, runs: list) -> None:
    """Refuses runs trained on other problems or vocabularies (see the module docstring).

    Raises:
        RestoreError: one line naming both runs (or the run and --data_dir's vocabulary
            file) and what differs.
    """
    manifests = [(run, run_dir.load_manifest(run) if run else {}) for run in runs]
    first_run, first = manifests[0]
    for run, manifest in manifests[1:]:
        mine, theirs = first.get("problem"), manifest.get("problem")
        if mine and theirs and mine != theirs:
            raise RestoreError(
                f"ensemble: {first_run} was trained on problem {mine} but {run} on {theirs}; "
                "an ensemble's models must share the problem's vocabulary"
            )
        mine, theirs = first.get("vocabulary"), manifest.get("vocabulary")
        if mine and theirs and mine["sha256"] != theirs["sha256"]:
            raise RestoreError(
                f"ensemble: {first_run} was trained with the vocabulary {mine['file']} (sha256 "
                f"{mine['sha256'][:12]}) but {run} with {theirs['file']} (sha256 "
                f"{theirs['sha256'][:12]}), so their ids mean other pieces; ensemble runs "
                "trained on the same vocabulary"
            )
    current = run_dir.vocabulary_record(problem, data_dir)
    for run, manifest in manifests:
        recorded = manifest.get("vocabulary")
        if current and recorded and recorded["sha256"] != current["sha256"]:
            raise RestoreError(
                f"ensemble: {run} was trained with the vocabulary {recorded['file']} (sha256 "
                f"{recorded['sha256'][:12]}) but --data_dir holds {current['file']} (sha256 "
                f"{current['sha256'][:12]}); point --data_dir at the data the runs were "
                "trained on"
            )


def load_models(
    problem_name: str,
    data_dir: str,
    output_dir: str,
    checkpoint_path: str | None = None,
    hparams_set: str | None = None,
    overrides: str = "",
    combination: str = "mean_probability",
    weights=None,
) -> TrainedModel:
    """The model the flags name: one run's, or an ensemble of several (module docstring).

    An ensemble's TrainedModel has `model` an `Ensemble`, `members` the TrainedModel of
    each model, `hp` the first member's with the smallest `max_position` of all (the
    positions every model knows), and `checkpoint_path` the members' paths joined by ",".
    `hparams_set` and `overrides` apply to every member.

    Raises:
        RestoreError: as `load_trained_model`, and for runs that do not share the
            problem's vocabulary, checkpoints that do not pair with runs, or bad weights.
    """
    members = ensemble_members(output_dir, checkpoint_path)
    if combination not in COMBINATIONS:
        raise RestoreError(
            f"--ensemble_combination must be one of {list(COMBINATIONS)}, got {combination!r}"
        )
    if len(members) == 1:
        if weights and len(weights) != 1:
            raise RestoreError(
                f"--ensemble_weights has {len(weights)} weights for 1 model; give one weight "
                "per model, in the order of the runs"
            )
        run, checkpoint = members[0]
        return load_trained_model(problem_name, data_dir, run, checkpoint, hparams_set, overrides)
    problem = problems_lib.get(problem_name)
    check_shared_vocabulary(problem, data_dir, [run for run, _ in members])
    trained = [
        load_trained_model(problem_name, data_dir, run, checkpoint, hparams_set, overrides)
        for run, checkpoint in members
    ]
    try:
        model = Ensemble(
            [each.model for each in trained],
            weights,
            combination,
            names=[each.checkpoint_path for each in trained],
        )
    except EnsembleError as error:
        raise RestoreError(str(error)) from None
    hp = dataclasses.replace(trained[0].hp, max_position=model.max_position)
    return TrainedModel(
        model=model,
        hp=hp,
        problem=trained[0].problem,
        checkpoint_path=",".join(each.checkpoint_path for each in trained),
        members=tuple(trained),
    )


def describe(trained: TrainedModel) -> str:
    """The checkpoint restored, or an ensemble's combination, weights and checkpoints."""
    if not trained.members:
        return trained.checkpoint_path
    model = trained.model
    weights = ", ".join(f"{weight:.3g}" for weight in model.weights)
    paths = ", ".join(member.checkpoint_path for member in trained.members)
    return (
        f"an ensemble of {len(trained.members)} models ({model.combination}, weights "
        f"{weights}): {paths}"
    )
