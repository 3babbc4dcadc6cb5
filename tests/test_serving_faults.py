"""Hostile and unlucky clients of a real server process: slow senders, odd bytes, huge
alphas, misnamed version folders, many version swaps, SIGTERM with a slow client.

One server (SLOTS connections, a TIMEOUT-second request deadline, watching its folder)
serves most tests; the SIGTERM test starts its own.
"""

import os
import shutil
import signal
import socket
import threading
import time
from urllib.parse import urlparse

import numpy as np
import pytest
import tensorflow as tf
from serving_support import (
    _health,
    _next_line,
    _raw_exchange,
    _ready,
    _start,
    _stop,
    _wait_for,
    exported_model,
    predict,
)

from t2t_lite.export.exporter import next_version
from t2t_lite.search.config import ALPHA_RANGE, SearchConfig, SearchConfigError
from t2t_lite.serving.rest import OPTION_RANGES

SLOTS = 4
TIMEOUT = 3.0  # seconds a client has to send its whole request
# Resident memory of the server and its workers may exceed what it was after the first
# load by at most this much, however many versions it swapped in. Before each version
# ran in a worker process, every swap kept 150-230 MiB of this small model for good.
MEMORY_BOUND = 100 << 20


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return exported_model(tmp_path_factory)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """(url, watched model folder, process, log path, RSS of the process tree once ready)."""
    root = tmp_path_factory.mktemp("faults")
    watched = root / "rev"
    shutil.copytree(model_dir, watched)
    log = root / "server.log"
    process, lines = _start(
        watched, log, "--poll_seconds=0.2", f"--max_connections={SLOTS}",
        f"--request_timeout={TIMEOUT}",
    )  # fmt: skip
    try:
        url = _ready(process, lines)
        assert predict(url, {"instances": ["1 2"]})[0] == 200
        yield url, watched, process, log, _tree_rss(process.pid)[0]
    finally:
        _stop(process)


def _tree_rss(pid: int) -> tuple:
    """(resident bytes of `pid` and all its descendants, their number), from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, todo, count = 0, [pid], 0
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            with open(f"/proc/{current}/status") as f:
                rss = next(line for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        total += int(rss.split()[1]) * 1024
        count += 1
    return total, count


def _add_version(watched, version: int) -> None:
    """Copies version 1 in as `version`, atomically (as the exporter does)."""
    shutil.copytree(watched / "1", watched / f".tmp-{version}")
    os.rename(watched / f".tmp-{version}", watched / str(version))


def _raw_status(url, data: bytes) -> tuple:
    status, _, body = _raw_exchange(url, data)
    return status, body["error"]


@pytest.mark.slow
def test_a_lone_surrogate_and_a_non_ascii_path_get_400(server):
    url = server[0]
    body = b'{"instances": ["\\ud800"]}'
    head = f"POST /v1/models/rev:predict HTTP/1.0\r\nContent-Length: {len(body)}\r\n\r\n"
    status, error = _raw_status(url, head.encode() + body)
    assert status == 400, error
    assert "instances (sentences)" in error and "lone UTF-16 surrogate \\ud800" in error
    status, error = _raw_status(url, b"GET /v1/models/rev/versions/\xb2 HTTP/1.0\r\n\r\n")
    assert status == 400 and "non-ASCII byte 0xb2" in error and "percent-encode" in error
    # A Content-Length of a non-ASCII digit ("²" is str.isdigit() but not int()).
    head = b"POST /v1/models/rev:predict HTTP/1.0\r\nContent-Length: \xb2\r\n\r\n"
    status, error = _raw_status(url, head + body)
    assert status == 400 and "is not a number" in error


@pytest.mark.parametrize("alpha", [1e30, 1e300, 10.5, -0.5])
@pytest.mark.slow
def test_alpha_out_of_range_gets_400_naming_the_range(server, alpha):
    inputs = {"sentences": ["1 2 3"], "beam_size": 1, "alpha": alpha}
    status, body = predict(
        server[0], {"signature_name": "translate_with_options", "inputs": inputs}
    )
    assert status == 400
    assert body["error"] == (f"inputs.alpha (alpha): {alpha:g} is out of range; choose 0 to 10")


@pytest.mark.slow
def test_the_largest_alpha_allowed_is_served(server):
    inputs = {"sentences": ["1 2 3"], "beam_size": 1, "alpha": ALPHA_RANGE[1]}
    status, body = predict(
        server[0], {"signature_name": "translate_with_options", "inputs": inputs}
    )
    assert status == 200 and body["outputs"]["scores"][0] < 0


def test_the_server_and_the_search_share_the_alpha_range():
    assert OPTION_RANGES["alpha"] == ALPHA_RANGE == (0.0, 10.0)
    with pytest.raises(SearchConfigError, match="--alpha must be <= 10, got 11"):
        SearchConfig(alpha=11.0)


@pytest.mark.slow
def test_the_saved_model_itself_refuses_a_huge_alpha(model_dir):
    """A client calling the SavedModel outside the server is protected the same way."""
    signature = tf.saved_model.load(str(model_dir / "1")).signatures["translate_with_options"]
    options = dict(sentences=tf.constant(["1 2 3"]), beam_size=tf.constant(1))
    with pytest.raises(tf.errors.InvalidArgumentError, match="alpha must be <= 10"):
        signature(**options, alpha=tf.constant(1e30))
    scores = signature(**options, alpha=tf.constant(10.0))["scores"].numpy()
    assert np.isfinite(scores).all() and scores[0] < 0


class _Dribbler(threading.Thread):
    """A client that sends one byte of a request every `pause` seconds, forever."""

    def __init__(self, url, pause: float):
        super().__init__(daemon=True)
        parsed = urlparse(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=60)
        self.pause = pause
        self.stop = threading.Event()
        self.answer = b""

    def run(self):
        request = (
            b"POST /v1/models/rev:predict HTTP/1.0\r\nContent-Length: 400\r\n\r\n" + b"{" * 400
        )
        try:
            for byte in request:
                self.sock.sendall(bytes([byte]))
                if self.stop.wait(self.pause):
                    return
        except OSError:  # The server ended the connection: read what it answered.
            pass

    def finish(self) -> bytes:
        """Stops sending; returns what the server answered (b"" if it just closed)."""
        self.stop.set()
        self.join(timeout=30)
        chunks = []
        try:
            self.sock.settimeout(5)
            while chunk := self.sock.recv(1 << 16):
                chunks.append(chunk)
        except OSError:  # A reset: nothing (more) to read.
            pass
        self.sock.close()
        return b"".join(chunks)


@pytest.mark.slow
def test_slow_clients_are_dropped_and_free_their_slots(server):
    url = server[0]
    # Twice as many as there are slots, each byte well within the timeout of the last.
    slow = [_Dribbler(url, pause=TIMEOUT / 6) for _ in range(2 * SLOTS)]
    for client in slow:
        client.start()
    try:
        started = time.monotonic()
        statuses = []
        while not statuses or statuses[-1] != 200:
            assert time.monotonic() - started < 5 * TIMEOUT, f"no 200 in time: {statuses}"
            try:
                statuses.append(predict(url, {"instances": ["1 2"]})[0])
            except ConnectionError:  # Refused (503) and closed while the body was sent.
                statuses.append(503)
            time.sleep(0.05)  # A retry pace, as a client's; not waiting for an event.
        assert set(statuses) <= {200, 503}
    finally:
        answers = [client.finish() for client in slow]
    timed_out = [a for a in answers if a.startswith(b"HTTP/1.0 408")]
    assert timed_out, [a[:40] for a in answers]
    assert b"did not arrive within 3 s (the server's --request_timeout)" in timed_out[0]


@pytest.mark.slow
def test_memory_stays_bounded_across_version_swaps(server):
    url, watched, process, _, start_rss = server
    _, processes = _tree_rss(process.pid)
    figures = []
    for _ in range(2):
        version = _health(url)["version"] + 1
        _add_version(watched, version)
        _wait_for(lambda v=version: _health(url)["version"] == v, f"version {version}")
        assert predict(url, {"instances": ["1 2"]})[0] == 200
        # The retired version's worker (if any) ends once no request holds it.
        _wait_for(lambda: _tree_rss(process.pid)[1] <= processes, "the old worker to end", 60)
        figures.append(_tree_rss(process.pid)[0])
    growth = [(rss - start_rss) / 2**20 for rss in figures]
    assert max(figures) <= start_rss + MEMORY_BOUND, (
        f"resident memory at start {start_rss / 2**20:.0f} MiB grew by {growth} MiB"
    )


@pytest.mark.slow
def test_a_misnamed_version_folder_is_ignored_and_later_versions_load(server):
    url, watched, _, log, _ = server
    shutil.copytree(watched / "1", watched / "\u00b2")  # str.isdigit() says yes, int() no
    version = _health(url)["version"] + 1
    _add_version(watched, version)
    _wait_for(lambda: _health(url)["version"] == version, f"version {version}")
    # The exporter numbers its next version past the good ones, not past "²".
    assert next_version(str(watched)) == version + 1
    ignored = [line for line in log.read_text().splitlines() if "ignoring" in line]
    assert ignored == [
        f"ignoring {watched / chr(0xB2)}: a version folder's name must be ASCII digits "
        "(0-9); rename it to serve it"
    ]
    assert _health(url)["status"] == "ok"


@pytest.mark.slow
def test_sigterm_finishes_with_a_slow_client_connected(model_dir, tmp_path):
    """In-flight requests are answered, the slow client is dropped, the process exits."""
    process, lines = _start(
        model_dir, tmp_path / "log", "--max_batch_size=2", "--batch_wait_ms=600000",
        "--request_timeout=600",
    )  # fmt: skip
    try:
        url = _ready(process, lines)
        slow = _Dribbler(url, pause=1.0)
        slow.start()
        answers = []
        client = threading.Thread(
            target=lambda: answers.append(predict(url, {"instances": ["3 1 2"]}))
        )
        client.start()
        # The request waits in the batcher for company that will not come.
        _wait_for(lambda: _health(url)["batching"]["queued"] == 1, "a queued request")
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        client.join(timeout=60)
        assert [status for status, _ in answers] == [200]
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - started < 30  # far below the 600 s request timeout
        assert slow.finish() == b""  # dropped without an answer
        assert _next_line(lines, 10).startswith("shutting down")
    finally:
        _stop(process)
