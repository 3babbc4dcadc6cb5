"""The versions of one model folder: loading the newest and watching for new ones.

The folder follows TensorFlow Serving's layout, `MODEL_DIR/<version>/saved_model.pb` with
versions named by ASCII digits that fit a signed 64-bit integer (as TensorFlow Serving's
versions must); a version may also be a CTranslate2 export (`ctranslate2_version`), served
with the same signatures; other entries (an exporter's temporary folders, a name such as
`²` that Python calls a digit, a number above 2^63 - 1) are ignored, a misleading one with
a logged line. The store serves the newest version, as TensorFlow Serving's default
version policy does: when a newer version appears it is loaded and warmed up beside the
current one, then swapped in; when the served version's folder is deleted, the newest
remaining version is loaded in its place. A request holds the model it started with
(`lease`), so none is dropped or sees half a model.

Each version is loaded in a worker process of its own (`worker.WorkerModel`). A retired
version's worker is closed as soon as its last lease ends, whatever else still refers to
the object (an error's traceback, say), so swaps do not accumulate memory. One bad folder
or one failed load is logged; the watcher keeps polling.

Nothing of the model code, and no SavedModel, is loaded in the server's process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from t2t_lite.serving import ctranslate2_version
from t2t_lite.serving.worker import WorkerFailed, WorkerModel

# The largest version TensorFlow Serving can hold (an int64).
MAX_VERSION = 2**63 - 1


class ModelStore:
    """The newest loaded version of the model in `model_dir`, kept up to date.

    Args:
        model_dir: EXPORT_DIR/MODEL_NAME, holding integer version folders.
        poll_seconds: how often to look for a newer version (0 = never).
        log: where progress lines go.
        pipes: calls a version's worker runs at once.
        worker_setup: what each version's worker calls first (`worker.WorkerModel`).
    """

    def __init__(
        self,
        model_dir: str,
        poll_seconds: float = 5.0,
        log=None,
        pipes: int = 1,
        worker_setup=None,
    ):
        self.pipes = pipes  # calls a version's worker runs at once
        self.worker_setup = worker_setup  # see worker.WorkerModel
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
        self._leases: dict = {}  # WorkerModel -> requests using it
        self._retired: set = set()  # replaced versions still leased: closed on the last release
        self._orphan_reported: int | None = None  # served version whose folder is gone

    @property
    def current(self) -> WorkerModel | None:
        with self._lock:
            return self._current

    def versions_on_disk(self) -> list:
        """The integer versions with a saved_model.pb or a CTranslate2 model, ascending.

        Only names of ASCII digits are versions: `str.isdigit()` also accepts `²` or `٣`,
        which `int()` rejects or reads as a number whose folder has another name. A number
        above MAX_VERSION is not one either: stock TensorFlow Serving cannot load it. Hidden
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
            if name.isascii() and name.isdigit() and int(name) <= MAX_VERSION:
                versions.append(int(name))
            elif name not in self._ignored:
                self._ignored.add(name)
                reason = (
                    f"a version number must be at most {MAX_VERSION} (a signed 64-bit "
                    "integer, as TensorFlow Serving's)"
                    if name.isascii() and name.isdigit()
                    else "a version folder's name must be ASCII digits (0-9)"
                )
                self._log(
                    f"ignoring {os.path.join(self.model_dir, name)}: {reason}; rename it to "
                    "serve it"
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
        """Loads the newest version unless it is served already; returns it.

        The newest is usually newer than the current one; when the current version's
        folder was deleted, it is the newest remaining one (an older version). A version
        that fails to load or warm up is reported and leaves the current one in service;
        it is tried again once its files change (a copy still in progress, say).
        """
        with self._lock:
            current = self._current
            failed = dict(self._failed)
        on_disk = self.versions_on_disk()
        versions = [v for v in on_disk if v not in failed or failed[v] != self._fingerprint(v)]
        removed = current is not None and current.version not in on_disk
        if removed and not versions and self._orphan_reported != current.version:
            self._orphan_reported = current.version
            self._log(
                f"the folder of {self.name} version {current.version} was removed and no "
                "other version can be loaded; still serving it from memory"
            )
        if not versions or (
            current is not None and not removed and versions[-1] <= current.version
        ):
            return None
        version = versions[-1]
        if removed:
            self._log(
                f"the folder of {self.name} version {current.version} was removed; "
                f"loading version {version}, the newest left"
            )
        return self._load(version)

    def _load(self, version: int) -> WorkerModel | None:
        """Loads `version` in a worker and swaps it in; None (logged) if it fails."""
        fingerprint = self._fingerprint(version)
        self._set_state(version, "LOADING")
        started = time.monotonic()
        try:
            model = WorkerModel(
                os.path.join(self.model_dir, str(version)), version, self.pipes, self.worker_setup
            )
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
        if previous is not None:
            self._retire(previous)
        self._log(
            f"loaded {self.name} version {version} in {time.monotonic() - started:.1f}s "
            f"({model.warmed} warm-up requests)"
        )
        return model

    @contextlib.contextmanager
    def lease(self):
        """Yields the current version (None before one loads), held until the block ends.

        A version replaced meanwhile keeps answering the block's calls; its worker is
        closed when the last lease on it ends.
        """
        with self._lock:
            model = self._current
            if model is not None:
                self._leases[model] = self._leases.get(model, 0) + 1
        try:
            yield model
        finally:
            if model is not None:
                self._release(model)

    def _release(self, model: WorkerModel) -> None:
        with self._lock:
            self._leases[model] -= 1
            if self._leases[model]:
                return
            del self._leases[model]
            if model not in self._retired:
                return
            self._retired.discard(model)
        model.close()

    def _retire(self, model: WorkerModel) -> None:
        """Closes a replaced version now, or when its last lease ends."""
        with self._lock:
            if self._leases.get(model):
                self._retired.add(model)
                return
        model.close()

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
