"""Batching of concurrent predict requests: more sentences per model call, more throughput.

Requests wait in one queue. A worker thread (`num_threads` of them run batches side by
side) takes the oldest request and gathers the requests queued after it that can share
its model call: same model version, same signature, same values of the inputs without a
batch dimension (a beam size, say). It
runs them as one call once they hold `max_batch_size` examples, or once the oldest has
waited `max_wait_seconds`, whichever comes first; a request larger than the limit runs
alone. Variable-length inputs are padded with zeros (ids) or empty strings to the longest
of the batch, as TensorFlow Serving's `pad_variable_length_inputs` does; each request gets
its own rows of every output back.

Batching changes what a row is computed with, not what is computed: outputs equal those
of the request alone, except that float sums may round differently for other batch
shapes. Padding does not lengthen a sentence's search: the exported search gives each
row its own limit of its length + extra_length tokens, whatever the batch's width. (With
early stopping only the best hypothesis is exact; the others are the best found until
then, and a longer batch may search further for them.)

When a batched call fails on its input (InvalidArgumentError), each request is rerun
alone, so that a bad request fails by itself. `flush()` makes the worker run what is
queued at once, and `close()` also stops it: the server's graceful shutdown uses both.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import tensorflow as tf


class ShuttingDown(RuntimeError):
    """The batcher is closed and takes no more requests."""


@dataclasses.dataclass(eq=False)
class _Item:
    model: object  # LoadedModel
    request: object  # rest.PredictRequest
    key: tuple
    rows: int
    arrival: float
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    outputs: dict | None = None
    error: BaseException | None = None


def _batch_key(model, request) -> tuple:
    signature = model.signatures[request.signature_name]
    fixed = tuple(
        (name, request.inputs[name].tobytes(), str(request.inputs[name].dtype))
        for name, info in signature["inputs"].items()
        if not info.batched
    )
    return (id(model), request.signature_name, fixed)


def merge_inputs(requests: list, infos: dict) -> dict:
    """Concatenates the batched inputs of `requests` along axis 0, padding other axes.

    Args:
        requests: PredictRequests of one signature with equal unbatched inputs.
        infos: {name: TensorInfo} of the signature's inputs.

    Returns:
        {name: np.ndarray}: [sum of rows, ...] for batched inputs, the first request's
        value for the others.
    """
    merged = {}
    for name, info in infos.items():
        arrays = [r.inputs[name] for r in requests]
        if not info.batched:
            merged[name] = arrays[0]
            continue
        trailing = np.max([a.shape[1:] for a in arrays], axis=0) if arrays[0].ndim > 1 else []
        padded = []
        for array in arrays:
            widths = [(0, 0)] + [(0, int(t) - s) for t, s in zip(trailing, array.shape[1:])]
            fill = b"" if array.dtype == object else 0
            padded.append(np.pad(array, widths, constant_values=fill) if array.ndim > 1 else array)
        merged[name] = np.concatenate(padded, axis=0)
    return merged


class Batcher:
    """Runs predict requests, batching concurrent ones.

    Args:
        max_batch_size: examples per model call; 1 or less turns batching off (each request
            runs at once in its own thread).
        max_wait_seconds: longest time the oldest queued request waits for company.
        num_threads: batches run at the same time (TF Serving's num_batch_threads).
    """

    def __init__(
        self, max_batch_size: int = 8, max_wait_seconds: float = 0.005, num_threads: int = 1
    ):
        self.max_batch_size = max_batch_size
        self.max_wait_seconds = max_wait_seconds
        self.enabled = max_batch_size > 1
        self._queue: list = []
        self._condition = threading.Condition()
        self._closing = False
        self._flushing = False
        self._stats = {"requests": 0, "batches": 0, "rows": 0, "largest_batch": 0}
        self._workers = []
        if self.enabled:
            for index in range(max(1, num_threads)):
                worker = threading.Thread(target=self._work, name=f"batcher-{index}", daemon=True)
                worker.start()
                self._workers.append(worker)

    def run(self, model, request) -> dict:
        """Runs `request` on `model` (a LoadedModel) and returns its outputs; blocks.

        Raises:
            Whatever the model call raised for this request.
        """
        if not self.enabled:
            self._count([request.rows])
            return model.run(request.signature_name, request.inputs)
        item = _Item(model, request, _batch_key(model, request), request.rows, time.monotonic())
        with self._condition:
            if self._closing:
                raise ShuttingDown("the server is shutting down; retry on another replica")
            self._queue.append(item)
            self._condition.notify_all()
        item.done.wait()
        error, outputs = item.error, item.outputs
        item = None
        if error is None:
            return outputs
        try:
            raise error
        finally:
            # The traceback holds this frame: a reference to the error from it would make
            # a cycle that keeps the error, and what its frames hold, until a full collection.
            error = None

    def stats(self) -> dict:
        """Counts since start: requests, model calls (batches), rows, largest batch (rows)."""
        with self._condition:
            return dict(self._stats, queued=len(self._queue), enabled=self.enabled)

    def flush(self) -> None:
        """From now on, runs queued requests at once instead of waiting for company."""
        with self._condition:
            self._flushing = True
            self._condition.notify_all()

    def close(self) -> None:
        """Runs everything queued without waiting for company, then stops the worker."""
        with self._condition:
            self._closing = self._flushing = True
            self._condition.notify_all()
        for worker in self._workers:
            worker.join()

    def _count(self, rows: list) -> None:
        with self._condition:
            self._stats["requests"] += len(rows)
            self._stats["batches"] += 1
            self._stats["rows"] += sum(rows)
            self._stats["largest_batch"] = max(self._stats["largest_batch"], sum(rows))

    def _work(self) -> None:
        while True:
            with self._condition:
                batch = self._next_batch()
            if batch is None:
                return
            if batch:  # Empty when another worker took the requests first.
                self._run_batch(batch)
            # Let go of the batch's model while waiting: a retired version's worker ends
            # once the last request holding it is answered.
            batch = None

    def _next_batch(self) -> list | None:
        """Waits for a full batch or the oldest request's deadline (called holding the lock)."""
        while not self._queue:
            if self._closing:
                return None
            self._condition.wait()
        first = self._queue[0]
        deadline = first.arrival + self.max_wait_seconds
        while not self._flushing and first in self._queue:
            queued = sum(item.rows for item in self._queue if item.key == first.key)
            remaining = deadline - time.monotonic()
            if queued >= self.max_batch_size or remaining <= 0:
                break
            self._condition.wait(remaining)
        batch, rows = [], 0
        if first not in self._queue:
            return batch
        for item in list(self._queue):
            if item.key == first.key and (not batch or rows + item.rows <= self.max_batch_size):
                batch.append(item)
                rows += item.rows
                self._queue.remove(item)
        return batch

    def _run_batch(self, batch: list) -> None:
        model, name = batch[0].model, batch[0].request.signature_name
        infos = model.signatures[name]["inputs"]
        self._count([item.rows for item in batch])
        try:
            outputs = model.run(name, merge_inputs([item.request for item in batch], infos))
        except tf.errors.InvalidArgumentError as error:
            if len(batch) == 1:
                batch[0].error = error.with_traceback(None)  # Its frames hold the batch.
                batch[0].done.set()
                return
            for item in batch:  # Find out whose input it was.
                self._run_alone(item)
            return
        except Exception as error:  # noqa: BLE001 - handed to every waiting request.
            error = error.with_traceback(None)
            for item in batch:
                item.error = error
                item.done.set()
            return
        total, start = sum(item.rows for item in batch), 0
        for item in batch:
            item.outputs = {
                k: v[start : start + item.rows] if v.ndim and len(v) == total else v
                for k, v in outputs.items()
            }
            start += item.rows
            item.done.set()

    def _run_alone(self, item: _Item) -> None:
        try:
            item.outputs = item.model.run(item.request.signature_name, item.request.inputs)
        except Exception as error:  # noqa: BLE001 - handed to the waiting request.
            item.error = error.with_traceback(None)
        item.done.set()
