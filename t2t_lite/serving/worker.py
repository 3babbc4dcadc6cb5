"""Each served version runs in its own worker process, so that retiring it returns its memory.

TensorFlow keeps what `tf.saved_model.load` creates (the functions' graphs, registered in
the process's eager context) after every Python reference to the loaded object is gone:
loading a version in the server's own process grew it by 150-230 MB per new version, for
good. A process can be ended, so a version is loaded by a worker started for it (spawned:
a fresh interpreter, not a fork of a process running threads). The worker loads and warms
the version up (`loading.py`), describes its signatures, and runs predict calls sent over
pipes, one pipe per batcher thread so that batches still run side by side. The server
holds a `WorkerModel` per version and closes it once the version is retired and no
request uses it (`model_store.ModelStore.lease`); its pipes close and the worker exits.

This module imports TensorFlow only inside functions: the worker process imports it after
the `setup` function it was given (the serve command's `cli.quiet_worker`) has quieted
TensorFlow's start-up noise, as every command does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import sys
import threading
import weakref

# How long a worker may take to exit after its pipes are closed before it is killed.
_EXIT_SECONDS = 10.0


class WorkerFailed(RuntimeError):
    """The worker of a version could not load it, or stopped; the message says why."""


def _worker_main(path: str, version: int, connections: list, setup=None) -> None:
    """The worker process: load, warm up, answer `(signature, inputs)` on every pipe.

    `setup()`, called before TensorFlow is imported, returns a context manager for the
    load and warm-up (the serve command's `cli.quiet_worker`, which hides start-up noise).
    """
    guard = setup() if setup is not None else contextlib.nullcontext()
    import tensorflow as tf

    from t2t_lite.serving.loading import load_version, warm_up

    try:
        with guard:
            model = load_version(path, version, calls=len(connections))
            warmed = warm_up(model)
    except Exception as error:  # noqa: BLE001 - reported to the server, which goes on.
        message = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:500]}"
        connections[0].send(("failed", message))
        return
    described = {
        name: {"inputs": entry["inputs"], "outputs": entry["outputs"]}
        for name, entry in model.signatures.items()
    }
    connections[0].send(("ready", described, model.signature_defs, warmed))

    def answer(connection) -> None:
        while True:
            try:
                signature, inputs = connection.recv()
            except (EOFError, OSError):  # The server let this version go.
                return
            try:
                reply = ("ok", model.run(signature, inputs))
            except tf.errors.OpError as error:
                reply = ("op_error", type(error).__name__, error.message)
            except Exception as error:  # noqa: BLE001 - the server answers 500 with it.
                reply = ("error", type(error).__name__, str(error)[:600])
            connection.send(reply)

    threads = [threading.Thread(target=answer, args=(c,), daemon=True) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Nothing is left to save, and TensorFlow's orderly teardown takes seconds that would
    # keep the retired version's memory taken.
    sys.stderr.flush()
    os._exit(0)


def _rebuilt_error(kind: str, name: str, message: str) -> Exception:
    """The worker's error as the server's code expects it (a tf.errors class for op errors)."""
    import tensorflow as tf

    if kind == "op_error":
        error_class = getattr(tf.errors, name, None)
        if isinstance(error_class, type) and issubclass(error_class, tf.errors.OpError):
            if error_class is not tf.errors.OpError:
                return error_class(None, None, message)
        return tf.errors.UnknownError(None, None, message)
    return RuntimeError(f"{name}: {message}")


def _stop(process, connections: list) -> None:
    """Closes the pipes (the worker then exits) and reaps the process without blocking."""
    for connection in connections:
        connection.close()

    def reap():
        process.join(_EXIT_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()

    threading.Thread(target=reap, name="worker-reaper", daemon=True).start()


class WorkerModel:
    """One version, loaded in a worker process; used like `loading.LoadedModel`.

    Args:
        path: the version folder.
        version: its integer version.
        pipes: how many calls may run at once (the batcher's threads).
        setup: a picklable function the worker calls first (see `_worker_main`), or None.

    Raises:
        WorkerFailed: the version could not be loaded or warmed up (the message says why).
    """

    def __init__(self, path: str, version: int, pipes: int = 1, setup=None):
        self.version = version
        self.path = path
        context = multiprocessing.get_context("spawn")
        ends = [context.Pipe() for _ in range(max(1, pipes))]
        self._process = context.Process(
            target=_worker_main,
            args=(path, version, [child for _, child in ends], setup),
            name=f"version-{version}",
            daemon=True,
        )
        self._process.start()
        for _, child in ends:
            child.close()  # Only the worker holds these now: its exit shows as EOF here.
        connections = [parent for parent, _ in ends]
        self._idle: queue.Queue = queue.Queue()
        for connection in connections:
            self._idle.put(connection)
        self._closer = weakref.finalize(self, _stop, self._process, connections)
        try:
            reply = connections[0].recv()
        except (EOFError, OSError):
            reply = ("failed", f"its worker process exited with code {self._process.exitcode}")
        if reply[0] != "ready":
            self.close()
            raise WorkerFailed(reply[1])
        _, self.signatures, self.signature_defs, self.warmed = reply

    @property
    def pid(self) -> int:
        return self._process.pid

    def resident_bytes(self) -> int:
        """The worker's resident memory (-1 if it cannot be read)."""
        try:
            with open(f"/proc/{self._process.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return -1

    def run(self, signature_name: str, inputs: dict) -> dict:
        """Calls a signature in the worker on {name: np.ndarray}; returns its outputs."""
        connection = self._idle.get()
        try:
            connection.send((signature_name, inputs))
            reply = connection.recv()
        except (EOFError, OSError, ValueError):
            raise WorkerFailed(
                f"the worker of version {self.version} stopped (exit code "
                f"{self._process.exitcode}); see the server's log"
            ) from None
        finally:
            self._idle.put(connection)
        if reply[0] == "ok":
            return reply[1]
        raise _rebuilt_error(*reply)

    def close(self) -> None:
        """Ends the worker now (also done when the last reference goes)."""
        self._closer()
