"""A training run's folder and what is in it, for training and inference alike.

`run_dir` writes and checks the run's files (hparams.json, manifest.json), `checkpoints`
compares a checkpoint with a model before restoring it, `restore` rebuilds a trained
model from a run, `ensemble` several runs as one ensemble, and `progress` prints the
progress lines of long work. Training, inference and export all use these; nothing here
imports any of them.
"""

from t2t_lite.runs.ensemble import is_ensemble, load_models
from t2t_lite.runs.restore import (
    DECODE_DTYPES,
    RestoreError,
    TrainedModel,
    in_decode_dtype,
    load_trained_model,
)

__all__ = [
    "DECODE_DTYPES",
    "RestoreError",
    "TrainedModel",
    "in_decode_dtype",
    "is_ensemble",
    "load_models",
    "load_trained_model",
]
