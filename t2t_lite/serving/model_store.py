"""The versions of one model folder: loading the newest and watching for new ones.

The folder follows TensorFlow Serving's layout, `MODEL_DIR/<version>/saved_model.pb` with
versions named by ASCII digits; a version may also be a CTranslate2 export
(`ctranslate2_version`), served with the same signatures; other entries (an exporter's temporary folders, a name
such as `²` that Python calls a digit) are ignored, a misleading one with a logged line.
The store serves the newest version. A watcher thread looks for newer versions every
`poll_seconds`, loads and warms one up beside the current one, then swaps it in: a request
holds the model it started with, so none is dropped or sees half a model. Each version is
loaded in a worker process of its own (`worker.WorkerModel`), which ends once the last
request holding it is answered, so swaps do not accumulate memory. One bad folder or one
failed load is logged; the watcher keeps polling.

Nothing of the model code is imported in the server's process. TensorFlow
Text is imported when installed so that SavedModels with its tokenizer ops load, as they
do in stock TensorFlow Serving, which links those ops.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2

from t2t_lite.serving import ctranslate2_version
from t2t_lite.serving.rest import TensorInfo, parse_predict
from t2t_lite.serving.worker import WorkerFailed, WorkerModel

try:  # Registers the tokenizer ops (SentencepieceOp, ...) that text SavedModels use.
    import tensorflow_text  # noqa: F401
except ImportError:  # pragma: no cover - then only SavedModels without them load.
    pass

WARMUP_FILE = os.path.join("assets.extra", "t2t_lite_warmup.json")


def _tensor_info(name: str, spec) -> TensorInfo:
    shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else ()
    return TensorInfo(name, spec.dtype.name, shape)


@dataclasses.dataclass(eq=False)
class LoadedModel:
    """One loaded version.

    Attributes:
        version: the integer version (its folder name).
        path: the version folder.
        module: the object `tf.saved_model.load` returned (keeps the variables alive).
        signatures: {name: {"function", "inputs": {name: TensorInfo}, "outputs": {...}}}.
        signature_defs: the SavedModel's SignatureDefMap as JSON (for the metadata API).
    """

    version: int
    path: str
    module: object
    signatures: dict
    signature_defs: dict

    def run(self, signature_name: str, inputs: dict) -> dict:
        """Calls a signature on {name: np.ndarray}; returns {output name: np.ndarray}."""
        signature = self.signatures[signature_name]
        tensors = {
            name: tf.constant(inputs[name], dtype=info.dtype)
            for name, info in signature["inputs"].items()
        }
        outputs = signature["function"](**tensors)
        # np.asarray: a scalar string's .numpy() is bytes, which has no shape to batch by.
        return {name: np.asarray(value.numpy()) for name, value in outputs.items()}


def load_version(path: str, version: int, calls: int = 1):
    """Loads the SavedModel (or CTranslate2 export) at `path`; describes its signatures.

    `calls`: how many calls may run at once (CTranslate2 sets its threads by it).
    """
    if ctranslate2_version.is_ctranslate2_version(path):
        return ctranslate2_version.CTranslate2Version(path, version, calls)
    module = tf.saved_model.load(path)
    signatures = {}
    for name, function in module.signatures.items():
        _, input_specs = function.structured_input_signature
        signatures[name] = {
            "function": function,
            "inputs": {k: _tensor_info(k, s) for k, s in sorted(input_specs.items())},
            "outputs": {
                k: _tensor_info(k, s) for k, s in sorted(function.structured_outputs.items())
            },
        }
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    signature_defs = {
        name: json_format.MessageToDict(definition, preserving_proto_field_name=True)
        for name, definition in proto.meta_graphs[0].signature_def.items()
    }
    return LoadedModel(version, path, module, signatures, signature_defs)


def warm_up(model) -> int:
    """Runs the predict bodies of the version's warm-up file, if any; returns how many.

    The first call of a signature optimises its graph (seconds for a beam search); doing
    it here keeps that out of the first real requests.
    """
    if isinstance(model, ctranslate2_version.CTranslate2Version):
        return model.warm_up()
    path = os.path.join(model.path, WARMUP_FILE)
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        bodies = json.load(f)
    for body in bodies:
        request = parse_predict(json.dumps(body).encode(), model.signatures)
        model.run(request.signature_name, request.inputs)
    return len(bodies)


class ModelStore:
    """The newest loaded version of the model in `model_dir`, kept up to date.

    Args:
        model_dir: EXPORT_DIR/MODEL_NAME, holding integer version folders.
        poll_seconds: how often to look for a newer version (0 = never).
        log: where progress lines go.
    """

    def __init__(self, model_dir: str, poll_seconds: float = 5.0, log=None, pipes: int = 1):
        self.pipes = pipes  # calls a version's worker runs at once
        self.model_dir = os.path.abspath(model_dir)
        self.name = os.path.basename(self.model_dir.rstrip(os.sep))
        self.poll_seconds = poll_seconds
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self._lock = threading.Lock()
        self._current: WorkerModel | None = None
        self._states: dict = {}  # version -> (state, error message)
        self._failed: dict = {}  # version -> folder fingerprint when its load failed
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._ignored: set = set()  # folder names already reported as not versions

    @property
    def current(self) -> WorkerModel | None:
        with self._lock:
            return self._current

    def versions_on_disk(self) -> list:
        """The integer versions with a saved_model.pb or a CTranslate2 model, ascending.

        Only names of ASCII digits are versions: `str.isdigit()` also accepts `²` or `٣`,
        which `int()` rejects or reads as a number whose folder has another name. Hidden
        folders are exports being written (the exporter's `.tmp-VERSION-PID`), passed over
        without a word.
        """
        if not os.path.isdir(self.model_dir):
            return []
        versions = []
        for name in os.listdir(self.model_dir):
            if name.startswith("."):
                continue
            folder = os.path.join(self.model_dir, name)
            if not os.path.isfile(os.path.join(folder, "saved_model.pb")):
                if not ctranslate2_version.is_ctranslate2_version(folder):
                    continue
            if name.isascii() and name.isdigit():
                versions.append(int(name))
            elif name not in self._ignored:
                self._ignored.add(name)
                self._log(
                    f"ignoring {os.path.join(self.model_dir, name)}: a version folder's name "
                    "must be ASCII digits (0-9); rename it to serve it"
                )
        return sorted(versions)

    def _fingerprint(self, version: int) -> tuple:
        """(path, size, mtime) of every file of a version folder: changes as files arrive."""
        folder = os.path.join(self.model_dir, str(version))
        found = []
        for root, _, files in os.walk(folder):
            for name in files:
                try:
                    stat = os.stat(os.path.join(root, name))
                except OSError:  # Removed while we looked.
                    continue
                found.append((os.path.join(root, name), stat.st_size, stat.st_mtime_ns))
        return tuple(sorted(found))

    def load_newest(self) -> WorkerModel | None:
        """Loads the newest version if it is newer than the current one; returns it.

        A version that fails to load or warm up is reported and leaves the current one in
        service; it is tried again once its files change (a copy still in progress, say).
        """
        with self._lock:
            current = self._current
            failed = dict(self._failed)
        versions = [
            v
            for v in self.versions_on_disk()
            if v not in failed or failed[v] != self._fingerprint(v)
        ]
        if not versions or (current is not None and versions[-1] <= current.version):
            return None
        version = versions[-1]
        fingerprint = self._fingerprint(version)
        self._set_state(version, "LOADING")
        started = time.monotonic()
        try:
            model = WorkerModel(os.path.join(self.model_dir, str(version)), version, self.pipes)
        except Exception as error:  # noqa: BLE001 - any broken version must not stop serving.
            message = str(error).strip().splitlines()[0][:500]
            if not isinstance(error, WorkerFailed):  # Its message names the error already.
                message = f"{type(error).__name__}: {message}"
            self._set_state(version, "FAILED", message)
            with self._lock:
                self._failed[version] = fingerprint
            self._log(f"version {version} of {self.name} failed to load: {message}")
            return None
        with self._lock:
            previous, self._current = self._current, model
            self._states[version] = ("AVAILABLE", "")
            if previous is not None:
                self._states[previous.version] = ("END", "")
        self._log(
            f"loaded {self.name} version {version} in {time.monotonic() - started:.1f}s "
            f"({model.warmed} warm-up requests)"
        )
        return model

    def _set_state(self, version: int, state: str, message: str = "") -> None:
        with self._lock:
            self._states[version] = (state, message)

    def status(self, version: int | None = None) -> list:
        """TF Serving's model_version_status entries, newest first."""
        entries = []
        with self._lock:
            states = sorted(self._states.items(), reverse=True)
        for number, (state, message) in states:
            if version is not None and number != version:
                continue
            code = "UNKNOWN" if state == "FAILED" else "OK"
            entries.append(
                {
                    "version": str(number),
                    "state": "END" if state == "FAILED" else state,
                    "status": {"error_code": code, "error_message": message},
                }
            )
        return entries

    def start_watching(self) -> None:
        """Starts the thread that loads newer versions every `poll_seconds`."""
        if self.poll_seconds <= 0 or self._watcher is not None:
            return
        self._watcher = threading.Thread(target=self._watch, name="version-watcher", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.load_newest()
            except Exception as error:  # noqa: BLE001 - the next poll may succeed.
                self._log(
                    f"looking for new versions of {self.name} failed, trying again in "
                    f"{self.poll_seconds:g}s: {type(error).__name__}: {error}"
                )

    def stop(self) -> None:
        """Stops the watcher and ends the current version's worker."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current.close()
