"""The files of an output_dir that describe a run: hparams.json and manifest.json.

A rerun into the same output_dir resumes; it is refused when the model hparams or the
problem differ from what the directory was trained with.
"""

from __future__ import annotations

import hashlib
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
    """Writes `text` to `path` through a temporary file and a rename.

    Raises:
        RunDirError: when the file cannot be written (a full disk); the temporary file
            is removed and `path` keeps its previous content.
    """
    directory = os.path.dirname(path) or "."
    temporary = None
    try:
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as handle:
            temporary = handle.name
            handle.write(text)
        os.replace(temporary, path)
    except OSError as error:
        if temporary and os.path.exists(temporary):
            os.remove(temporary)
        raise RunDirError(
            f"cannot write {path}: {(error.strerror or str(error)).lower()}; it keeps its "
            "previous content. Free space (or fix the folder) and rerun"
        ) from None


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
        changed = [f"{key}: {before} -> {now}" for key, before, now in saved.model_changes(hp)]
        if changed:
            raise RunDirError(
                f"{output_dir} holds a model with other hparams ({'; '.join(changed)}); "
                "resume with the same --hparams_set/--hparams or use a new --output_dir"
            )
    previous = load_manifest(output_dir).get("problem")
    if previous and previous != problem_name:
        raise RunDirError(
            f"{output_dir} was trained on problem {previous}, not {problem_name}; "
            "use a new --output_dir"
        )


def vocabulary_record(problem, data_dir: str) -> dict | None:
    """{"file", "sha256"} of the problem's vocabulary file under `data_dir`.

    None when the problem has no vocabulary file (its ids are fixed by its code) or the
    file is not there yet (the problem itself reports missing data).
    """
    path = problem.vocab_file(data_dir)
    if not path or not os.path.isfile(path):
        return None
    return {"file": os.path.abspath(path), "sha256": file_sha256(path)}


def file_sha256(path: str) -> str:
    """The hex sha256 of the file at `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_vocabulary(output_dir: str, vocabulary: dict | None) -> None:
    """Refuses to continue a run on data whose vocabulary is not the one it trained on.

    Ids index the vocabulary: with another one most ids mean other pieces, so resuming
    would train the model on scrambled text. A run recorded before vocabularies were
    recorded (no field) is accepted, and gets the field.
    """
    previous = load_manifest(output_dir).get("vocabulary")
    if not previous or not vocabulary or previous["sha256"] == vocabulary["sha256"]:
        return
    raise RunDirError(
        f"{output_dir} was trained with the vocabulary {previous['file']} (sha256 "
        f"{previous['sha256'][:12]}, recorded in its {MANIFEST_FILE}), but the data_dir's "
        f"{vocabulary['file']} is another one (sha256 {vocabulary['sha256'][:12]}), so its "
        "ids mean other pieces: point --data_dir at the data the run was trained on, or "
        "train into a new --output_dir"
    )


def load_manifest(output_dir: str) -> dict:
    """manifest.json of `output_dir`, {} when there is none."""
    path = os.path.join(output_dir, MANIFEST_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


def update_manifest(output_dir: str, fields: dict) -> None:
    """Sets `fields` in manifest.json, keeping the rest (what a run records while it trains).

    Raises:
        RunDirError: when the file cannot be written; it keeps its previous content.
    """
    manifest = dict(load_manifest(output_dir), **fields)
    write_atomic(os.path.join(output_dir, MANIFEST_FILE), json.dumps(manifest, indent=2) + "\n")


def write_run_files(output_dir: str, hp: HParams, manifest: dict) -> None:
    """Writes hparams.json and manifest.json (problem, hparams, versions, command line).

    A resumed run keeps the fingerprints of the data it trained on before, under
    `earlier_data_fingerprints`, when its data changed since.

    Raises:
        RunDirError: when `manifest["vocabulary"]` is not the vocabulary the run was
            trained on (`check_vocabulary`), or a file cannot be written.
    """
    import tensorflow as tf

    check_vocabulary(output_dir, manifest.get("vocabulary"))
    previous = load_manifest(output_dir)
    earlier = list(previous.get("earlier_data_fingerprints", []))
    if previous.get("data_fingerprint") not in (None, manifest.get("data_fingerprint")):
        earlier.append(previous["data_fingerprint"])
    write_atomic(os.path.join(output_dir, HPARAMS_FILE), hp.to_json() + "\n")
    full = {
        "t2t_lite_version": __version__,
        "tensorflow_version": tf.__version__,
        "python_version": platform.python_version(),
        "command_line": " ".join(sys.argv),
        **manifest,
        **({"earlier_data_fingerprints": earlier} if earlier else {}),
        "hparams": json.loads(hp.to_json()),
    }
    write_atomic(os.path.join(output_dir, MANIFEST_FILE), json.dumps(full, indent=2) + "\n")
