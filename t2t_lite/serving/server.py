"""An HTTP server speaking TensorFlow Serving's REST API for the exported models of one folder.

Routes (NAME is the model folder's name; `/versions/V` may follow `/v1/models/NAME`):

    GET  /v1/models/NAME            {"model_version_status": [...]}
    GET  /v1/models/NAME/metadata   {"model_spec": ..., "metadata": {"signature_def": ...}}
    POST /v1/models/NAME:predict    {"instances": [...]} or {"inputs": ...}
                                    -> {"predictions": [...]} or {"outputs": ...}
    GET  /healthz                   200 when a version is serving, else 503, with counters
                                    (batches, threads, resident memory)

Errors are `{"error": "..."}` with TF Serving's codes: 400 bad request (a version in the
path that is not an int64 among them), 404 unknown model, version or path, 405 wrong
method, 408 request timeout, 411 no Content-Length, 413 body or rows over the limit, 500
model failure, 503 shutting down or too many connections.

The port is bound at start but listens only once the first version is loaded: before,
connections are refused. Each connection is served by its own thread and closed after
one response (HTTP/1.0), so no thread outlives its request. A client has
`request_timeout_seconds` in all to send its request line, headers and body (a deadline,
not a pause between bytes, so that one byte every few seconds does not hold a slot): past
it the server answers 408 and closes. Resources are bounded: at most `max_connections`
connections are served at once, and at most `max_connections_per_client` of them from
one client address, so that one address reconnecting slow clients cannot hold them all
(one more is answered 503 by the accepting thread, which starts no thread for it); a
predict request holds at most `max_request_rows` examples; a body over `max_body_bytes`
is answered 413 from its Content-Length, before any of it is read, with `Connection:
close`, and the connection is closed (the server then drops what the client still sends
for at most a few seconds (`http_handler._LINGER_SECONDS`), so that the client gets to
read the answer). `shutdown()` (SIGTERM in `serve`) stops accepting connections, drops
the connections still sending their request (slow or idle clients), lets queued requests
run without waiting for batch company, waits for every request in flight to be answered,
then stops. Each version runs in a worker process (see `worker.py`); `batch_threads` of
its calls run at once.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import threading

import tensorflow as tf

from t2t_lite.serving.batching import Batcher, ShuttingDown
from t2t_lite.serving.http_handler import LimitedHTTPServer, make_handler
from t2t_lite.serving.model_store import MAX_VERSION, ModelStore
from t2t_lite.serving.rest import RequestError, encode_response, parse_predict

_MODEL_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?"
    r"(?P<action>/metadata|:[A-Za-z]+)?$"
)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Where to listen and how to batch and bound requests."""

    host: str = "127.0.0.1"
    port: int = 8501  # 0 = any free port
    max_batch_size: int = 8  # <= 1 turns batching off
    batch_wait_ms: float = 5.0
    batch_threads: int = 1  # batches run side by side
    max_body_bytes: int = 4 << 20
    max_request_rows: int = 256  # examples in one predict request
    max_connections: int = 64  # connections served at once; more are answered 503
    max_connections_per_client: int = 16  # of those, from one client address (0 = no limit)
    poll_seconds: float = 5.0  # 0 = never look for new versions
    request_timeout_seconds: float = 20.0  # to send the whole request (headers and body)
    access_log: bool = False


def tf_error_message(error: tf.errors.OpError) -> str:
    """The useful sentence of a TensorFlow error: the failed assertion's, else the first line.

    A graph assertion's message is "assertion failed: [text] [Condition x >= 0 did not
    hold element-wise:] [x (input_ids:0) = ] [[5 -1]]" (tf.debugging.assert_*), or its
    data items in brackets (tf.debugging.Assert): the client gets the text alone, or the
    items joined, without the tensor dump.
    """
    text = error.message.replace("\\'", "'")
    found = re.search(r"assertion failed: (.*)", text)
    if not found:
        return text.strip().splitlines()[0][:600]
    dump = found.group(1).strip()
    condition = dump.find("] [Condition ")
    if dump.startswith("[") and condition > 0:
        dump = dump[1:condition]
    elif dump.startswith("[") and dump.endswith("]"):
        dump = " ".join(dump[1:-1].split("] ["))
    return dump.strip().removesuffix(".").strip()[:600]


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return -1


class ModelServer:
    """Serves the newest SavedModel of `model_dir` over HTTP.

    Args:
        model_dir: EXPORT_DIR/MODEL_NAME with integer version folders.
        config: the ServerConfig.
        log: where progress lines go (stderr by default).
        worker_setup: what each version's worker process calls first (`worker.WorkerModel`).
    """

    def __init__(
        self, model_dir: str, config: ServerConfig = ServerConfig(), log=None, worker_setup=None
    ):
        self.config = config
        self._log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        # Calls a version's worker runs side by side: one per batch thread, or, with batching
        # off, one per connection, since each request then calls the model from its own thread.
        batching = config.max_batch_size > 1
        pipes = max(1, config.batch_threads if batching else config.max_connections)
        self.store = ModelStore(model_dir, config.poll_seconds, self._log, pipes, worker_setup)
        self.batcher = Batcher(
            config.max_batch_size, config.batch_wait_ms / 1000.0, config.batch_threads
        )
        if config.max_connections < 1 or config.max_request_rows < 1:
            raise ValueError(
                "max_connections and max_request_rows must be >= 1, got "
                f"{config.max_connections} and {config.max_request_rows}"
            )
        if config.max_connections_per_client < 0:
            raise ValueError(
                "max_connections_per_client must be >= 0 (0 = no limit), got "
                f"{config.max_connections_per_client}"
            )
        self._httpd = LimitedHTTPServer(
            (config.host, config.port),
            make_handler(self),
            config.max_connections,
            config.max_connections_per_client,
        )
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http", daemon=True)
        self._stopping = False

    @property
    def name(self) -> str:
        return self.store.name

    @property
    def address(self) -> tuple:
        """(host, port) actually bound."""
        return self._httpd.server_address[:2]

    def start(self) -> int:
        """Loads the newest version, then starts listening; returns the version.

        The port is bound from the start (so that a port in use fails at once), but
        connections are refused until a version is loaded: a client never meets a server
        that is up but cannot answer.

        Raises:
            FileNotFoundError: when `model_dir` holds no loadable version.
        """
        model = self.store.load_newest()
        if model is None:
            self.shutdown()
            raise FileNotFoundError(
                f"{self.store.model_dir} holds no loadable version (integer folders with "
                "saved_model.pb, or model.bin of a CTranslate2 export); export one with "
                "`python -m t2t_lite.exporter`"
            )
        self._httpd.activate()
        self._thread.start()
        self.store.start_watching()
        return model.version

    def shutdown(self) -> None:
        """Stops accepting, drops clients still sending, answers requests in flight, stops."""
        self._stopping = True
        if self._thread.is_alive():  # shutdown() waits for serve_forever to return.
            self._httpd.shutdown()
        self._httpd.drop_readers()
        self.batcher.flush()
        self._httpd.server_close()  # Joins the request threads.
        self.batcher.close()
        self.store.stop()

    def health(self) -> tuple:
        current = self.store.current
        status = "shutting_down" if self._stopping else "ok" if current else "loading"
        payload = {
            "status": status,
            "model": self.name,
            "version": current.version if current else None,
            "batching": self.batcher.stats(),
            "threads": threading.active_count(),
            # The server's and the served version's worker's.
            "resident_bytes": _resident_bytes() + (current.resident_bytes() if current else 0),
        }
        return (200 if status == "ok" else 503), payload

    def handle_get(self, path: str) -> tuple:
        if path.split("?", 1)[0] == "/healthz":
            return self.health()
        name, version, action = self._route(path)
        if action not in ("", "/metadata"):
            raise RequestError(405, f"{action} needs POST")
        if action == "/metadata":
            with self.store.lease() as model:
                model = self._check(model, name, version)
            return 200, {
                "model_spec": {"name": name, "signature_name": "", "version": str(model.version)},
                "metadata": {"signature_def": {"signature_def": model.signature_defs}},
            }
        entries = self.store.status(version)
        if not entries:
            raise RequestError(404, f"model {name} has no version {version}")
        return 200, {"model_version_status": entries}

    def handle_post(self, path: str, body: bytes) -> tuple:
        name, version, action = self._route(path)
        if action != ":predict":
            if action in (":classify", ":regress"):
                raise RequestError(
                    400, f"{action[1:]} is not supported: the model has predict signatures"
                )
            raise RequestError(
                405 if action in ("", "/metadata") else 404, f"cannot POST to {path}"
            )
        with self.store.lease() as model:
            return self._predict(self._check(model, name, version), body)

    def _predict(self, model, body: bytes) -> tuple:
        request = parse_predict(body, model.signatures)
        limit = self.config.max_request_rows
        if request.rows > limit:
            raise RequestError(
                413,
                f"the request has {request.rows:,} examples; the limit is {limit:,} per "
                "request: split it, or start the server with a larger --max_request_rows",
            )
        try:
            outputs = self.batcher.run(model, request)
        except tf.errors.InvalidArgumentError as error:
            raise RequestError(400, tf_error_message(error)) from None
        except tf.errors.OpError as error:
            raise RequestError(500, f"{type(error).__name__}: {tf_error_message(error)}") from None
        except ShuttingDown as error:
            raise RequestError(503, str(error)) from None
        return 200, encode_response(outputs, request.row_format)

    def _route(self, path: str) -> tuple:
        path = path.split("?", 1)[0]
        if not path.isascii():
            # http.server decodes the request line as Latin-1: one char per raw byte.
            byte = next(ord(c) for c in path if ord(c) > 127)
            raise RequestError(
                400,
                f"the request path {path!r} has the non-ASCII byte 0x{byte:02x}; "
                "percent-encode it (a version is ASCII digits)",
            )
        match = _MODEL_PATH.match(path)
        if not match:
            raise RequestError(404, f"no such path {path!r}; see /v1/models/{self.name}")
        name, version = match.group("name"), match.group("version")
        if name != self.name:
            raise RequestError(
                404,
                f"Servable not found for request: model {name!r} (this server has {self.name!r})",
            )
        if version is not None and not (
            version.isdigit() and int(version) <= MAX_VERSION
        ):  # TF Serving's answer to a version it cannot parse as an int64.
            raise RequestError(
                400,
                f"version {version!r} in the path is not a version number: give ASCII digits "
                f"(at most {MAX_VERSION}), or leave /versions/V out for the newest",
            )
        return name, int(version) if version else None, match.group("action") or ""

    def _check(self, model, name: str, version: int | None):
        """`model` (the leased current version) if it is the one asked for."""
        if model is None:
            raise RequestError(503, f"model {name} has no version loaded yet")
        if version is not None and version != model.version:
            raise RequestError(
                404,
                f"version {version} of model {name} is not available; "
                f"serving version {model.version}",
            )
        return model


def _say(line: str) -> None:
    print(line, flush=True)


def serve(model_dir: str, config: ServerConfig = ServerConfig(), worker_setup=None) -> int:
    """Serves until SIGTERM or SIGINT, then shuts down gracefully; returns the exit code.

    `worker_setup`: what each version's worker process calls first (`worker.WorkerModel`).

    Prints `loading NAME from MODEL_DIR; http://HOST:PORT opens once a version is loaded`,
    then `NAME version V AVAILABLE at http://HOST:PORT/v1/models/NAME` once it answers.
    """
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = ModelServer(model_dir, config, worker_setup=worker_setup)
        host, port = server.address
        _say(
            f"loading {server.name} from {server.store.model_dir}; http://{host}:{port} "
            "opens once a version is loaded"
        )
        version = server.start()
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    _say(
        f"{server.name} version {version} AVAILABLE at http://{host}:{port}/v1/models/{server.name}"
    )
    while not stop.wait(1.0):
        pass
    _say("shutting down: finishing the requests in flight")
    server.shutdown()
    _say("stopped")
    return 0
