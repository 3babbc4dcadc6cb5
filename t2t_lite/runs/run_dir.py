"""The files of an output_dir that describe a run: hparams.json and manifest.json.

A rerun into the same output_dir resumes; it is refused when the model hparams or the
problem differ from what the directory was trained with.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile

from t2t_lite import __version__
from t2t_lite.hparams import HParams

HPARAMS_FILE = "hparams.json"
MANIFEST_FILE = "manifest.json"


class RunDirError(ValueError):
    """The run cannot start as configured (a flag's value, output_dir, strategy).

    The message says why and what to do.
    """


def prepare(output_dir: str) -> None:
    """Creates `output_dir` and checks that it is writable."""
    try:
        os.makedirs(output_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output_dir):
            pass
    except OSError as error:
        raise RunDirError(
            f"--output_dir {output_dir} cannot be created or written ({error.strerror}); "
            "choose a writable folder"
        ) from None


def write_atomic(path: str, text: str) -> None:
    """Writes `text` to `path` through a temporary file and a rename."""
    directory = os.path.dirname(path) or "."
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as handle:
        handle.write(text)
        temporary = handle.name
    os.replace(temporary, path)


def load_hparams(output_dir: str) -> HParams | None:
    path = os.path.join(output_dir, HPARAMS_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return HParams.from_json(handle.read())


def check_resume(output_dir: str, hp: HParams, problem_name: str) -> None:
    """Refuses to continue a run in `output_dir` with another model or problem."""
    saved = load_hparams(output_dir)
    if saved is not None:
        before, now = saved.model_fields(), hp.model_fields()
        changed = [f"{key}: {before[key]} -> {now[key]}" for key in now if before[key] != now[key]]
        if changed:
            raise RunDirError(
                f"{output_dir} holds a model with other hparams ({'; '.join(changed)}); "
                "resume with the same --hparams_set/--hparams or use a new --output_dir"
            )
    manifest_path = os.path.join(output_dir, MANIFEST_FILE)
    if os.path.exists(manifest_path):
        with open(manifest_path) as handle:
            previous = json.load(handle).get("problem")
        if previous and previous != problem_name:
            raise RunDirError(
                f"{output_dir} was trained on problem {previous}, not {problem_name}; "
                "use a new --output_dir"
            )


def write_run_files(output_dir: str, hp: HParams, manifest: dict) -> None:
    """Writes hparams.json and manifest.json (problem, hparams, versions, command line)."""
    import tensorflow as tf

    write_atomic(os.path.join(output_dir, HPARAMS_FILE), hp.to_json() + "\n")
    full = {
        "t2t_lite_version": __version__,
        "tensorflow_version": tf.__version__,
        "python_version": platform.python_version(),
        "command_line": " ".join(sys.argv),
        **manifest,
        "hparams": json.loads(hp.to_json()),
    }
    write_atomic(os.path.join(output_dir, MANIFEST_FILE), json.dumps(full, indent=2) + "\n")
