"""A hostile user's second round against real server processes on 127.0.0.1.

One SavedModel server (started as a user starts it, without TF_CPP_MIN_LOG_LEVEL) serves
most tests; a CTranslate2 server of the same trained run answers the same inputs. The
version swap test runs last: it changes the served version.
"""

import os
import shutil
import socket
import threading
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
    call,
    exported_model,
    predict,
)

from t2t_lite import cli
from t2t_lite.serving.server import tf_error_message

SLOTS, PER_CLIENT = 8, 2
TIMEOUT = 3.0  # seconds a client has to send its whole request
MAX_VERSION = 2**63 - 1
# After a swap the retired version's worker is gone: the tree's proportional memory may
# exceed what it was with the first version by at most this much (a worker is ~1 GB).
PSS_BOUND = 200 << 20


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return exported_model(tmp_path_factory)


def _user_environment() -> dict:
    """This environment without the settings that would quiet TensorFlow anyway."""
    hidden = (cli.LOG_LEVEL_VARIABLE, cli.QUIET_VARIABLE)
    return {k: v for k, v in os.environ.items() if k not in hidden}


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """{url, watched, process, log, refused_before_ready} of the SavedModel server."""
    root = tmp_path_factory.mktemp("hostile")
    watched = root / "rev"
    shutil.copytree(model_dir, watched)
    log = root / "server.log"
    process, lines = _start(
        watched, log, "--poll_seconds=0.2", f"--max_connections={SLOTS}",
        f"--max_connections_per_client={PER_CLIENT}", f"--request_timeout={TIMEOUT}",
        environ=_user_environment(),
    )  # fmt: skip
    try:
        first = _next_line(lines)
        assert first.startswith(f"loading rev from {watched}; http://127.0.0.1:"), first
        port = int(first.split("http://127.0.0.1:")[1].split()[0])
        # The loading line comes before the worker is even started: seconds before ready.
        try:
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
            refused = False
        except ConnectionRefusedError:
            refused = True
        url = f"http://127.0.0.1:{port}"
        ready = _next_line(lines)
        assert ready == f"rev version 1 AVAILABLE at {url}/v1/models/rev\n", ready
        yield {"url": url, "watched": watched, "process": process, "log": log,
               "refused_before_ready": refused}  # fmt: skip
    finally:
        _stop(process)


@pytest.mark.slow
def test_start_up_is_quiet_and_the_port_opens_when_the_model_answers(server):
    assert server["refused_before_ready"]
    # The first request after the ready line finds the version available.
    status, body = call(server["url"], "GET", "/v1/models/rev")
    assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
    assert predict(server["url"], {"instances": ["1 2"]})[0] == 200
    logged = server["log"].read_text().splitlines()
    noise = [line for line in logged if cli._NOISE.match(line) or "cuda" in line.lower()]
    assert noise == [], noise
    assert [line for line in logged if line.startswith("loaded rev version 1 in ")], logged


REFUSED = [
    ({"signature_name": "translate_ids", "instances": [[5, -1, 1]]}, "input ids must be >= 0"),
    (
        {"signature_name": "translate_ids", "instances": [[5, 500, 1]]},
        "input ids must be below the vocabulary size 12",
    ),
    (
        {"signature_name": "translate_ids", "inputs": [[4] * 1014 + [1]]},
        "an input is longer than this export's limit of 1014 ids (EOS included): split long "
        "sentences, or export with a larger max_input_length",
    ),
    (
        {
            "signature_name": "translate_with_options",
            "inputs": {"sentences": ["1 2"], "beam_size": 3, "alpha": 0.0},
        },
        "beam_size is not one this export offers; choose one of [1, 2]",
    ),  # fmt: skip
    (
        {"instances": ["1 2 x"]},
        "sentences must be integers 0..9 separated by spaces; found token x",
    ),
    ({"instances": ["1 13"]}, "symbols must be below 10"),
]
NO_EOS = "input row {} does not end with EOS (id 1): end each row with 1, then pad with 0"
# translate_ids inputs and what both engines must answer: a message (400) or None (200).
IDS_CASES = [
    ([[]], NO_EOS.format(0)),
    ([[0]], NO_EOS.format(0)),
    ([[5, 0, 0]], NO_EOS.format(0)),
    ([[5, 1, 0], [0, 0, 0]], NO_EOS.format(1)),
    ([[5, 1, 4]], NO_EOS.format(0)),
    ([[-1, 0]], "input ids must be >= 0"),  # the first failed check, in both
    ([[5, 12]], "input ids must be below the vocabulary size 12"),
    ([[5, 1]], None),
    ([[5, 7, 3, 1], [1, 0, 0, 0], [9, 1, 0, 0]], None),
]


@pytest.mark.slow
def test_graph_refusals_are_one_sentence(server):
    for body, message in REFUSED:
        status, answer = predict(server["url"], body)
        assert (status, answer["error"]) == (400, message), body


def test_old_exports_assertion_dumps_become_one_sentence():
    """Exports made before their assertions carried one sentence still get one."""
    dumps = {
        "assertion failed: [input ids must be >= 0.  ] [Condition x >= 0 did not hold "
        "element-wise:] [x (input_ids:0) = ] [[5 -1]]\n\t [[{{node Assert}}]]": (
            "input ids must be >= 0"
        ),
        "assertion failed: [beam_size is not one this export offers; choose one of [1, 2]] "
        "[Condition x == y did not hold element-wise:] [x (Any:0) = ] [0] [y (y:0) = ] [1]": (
            "beam_size is not one this export offers; choose one of [1, 2]"
        ),
        "assertion failed: [sentences must be integers 0..9 separated by spaces; found "
        "token] [x]\n\t [[{{node Assert/Assert}}]] [Op:__inference_signature_wrapper_9877]": (
            "sentences must be integers 0..9 separated by spaces; found token x"
        ),
        "Graph execution error:\n\nassertion failed: [symbols must be below 10]": (
            "symbols must be below 10"
        ),
    }
    for dump, sentence in dumps.items():
        assert tf_error_message(tf.errors.InvalidArgumentError(None, None, dump)) == sentence


@pytest.mark.slow
def test_malformed_versions_and_repeated_lengths_get_400(server):
    url = server["url"]
    for version in ("%B2", "x", str(MAX_VERSION + 1)):
        status, body = call(url, "GET", f"/v1/models/rev/versions/{version}")
        assert status == 400 and f"version {version!r} in the path" in body["error"]
    assert call(url, "GET", f"/v1/models/rev/versions/{MAX_VERSION}")[0] == 404  # valid, absent
    body = b'{"instances": ["1 2"]}'
    head = (
        f"POST /v1/models/rev:predict HTTP/1.0\r\nContent-Length: {len(body)}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    status, _, answer = _raw_exchange(url, head.encode() + body)
    assert (status, answer["error"]) == (400, "the request has 2 Content-Length headers; send one")


@pytest.fixture(scope="module")
def ctranslate2_url(model_dir, tmp_path_factory):
    """A server of a CTranslate2 export of the run the SavedModel was exported from."""
    pytest.importorskip("ctranslate2")
    from t2t_lite.export.ctranslate2_export import export_ctranslate2_from_run

    root = tmp_path_factory.mktemp("ct2")
    run = model_dir.parent.parent / "run"
    export_ctranslate2_from_run("algorithmic_reverse", "", str(run), str(root), "rev", beam_size=2)
    process, lines = _start(root / "rev", root / "server.log", "--poll_seconds=0")
    try:
        yield _ready(process, lines)
    finally:
        _stop(process)


@pytest.mark.slow
def test_both_engines_answer_and_refuse_ids_alike(server, ctranslate2_url):
    for rows, message in IDS_CASES:
        answers = []
        for url in (server["url"], ctranslate2_url):
            for body in (
                {"signature_name": "translate_ids", "inputs": {"input_ids": rows}},
                {"signature_name": "translate_ids_with_options",
                 "inputs": {"input_ids": rows, "beam_size": 1, "alpha": 0.0}},
            ):  # fmt: skip
                answers.append(predict(url, body))
        if message is not None:
            assert all(a == (400, {"error": message}) for a in answers), (rows, answers)
            continue
        assert all(status == 200 for status, _ in answers), (rows, answers)
        # Greedy (beam 1, no length penalty): the same ids from both engines.
        saved_model, ctranslate2 = answers[1][1]["outputs"], answers[3][1]["outputs"]
        assert saved_model["output_ids"] == ctranslate2["output_ids"], rows
        np.testing.assert_allclose(saved_model["scores"], ctranslate2["scores"], atol=1e-3)
        # Default beam: same shape of answer.
        assert len(answers[0][1]["outputs"]["output_ids"][0]) == 2
        assert len(answers[2][1]["outputs"]["output_ids"][0]) == 2


class _Hog(threading.Thread):
    """Opens a connection from `source`, starts a request and never finishes it; on the
    server's answer (408 when the deadline passes, 503 when refused) it opens another."""

    def __init__(self, url, source: str, stop: threading.Event, answers: list):
        super().__init__(daemon=True)
        parsed = urlparse(url)
        self.address, self.source = (parsed.hostname, parsed.port), source
        self.stop, self.answers = stop, answers

    def run(self):
        while not self.stop.is_set():
            try:
                with socket.create_connection(
                    self.address, timeout=4 * TIMEOUT, source_address=(self.source, 0)
                ) as sock:
                    sock.sendall(b"POST /v1/models/rev:predict HTTP/1.0\r\n")
                    answer = sock.makefile("rb").read()
            except OSError:  # Reset or refused: the server is busy, as a 503 says.
                answer = b""
            self.answers.append(answer)
            if not answer.startswith(b"HTTP/1.0 408"):
                self.stop.wait(0.05)  # A retry pace, as a client's; not waiting for an event.


@pytest.mark.slow
def test_one_client_address_cannot_hold_every_connection(server):
    url = server["url"]
    stop, answers = threading.Event(), []
    hogs = [_Hog(url, "127.0.0.2", stop, answers) for _ in range(2 * SLOTS)]
    for hog in hogs:
        hog.start()
    try:
        # The hogs' address is at its limit once one of them has been refused.
        _wait_for(lambda: any(a.startswith(b"HTTP/1.0 503") for a in answers), "a refusal")
        statuses = [predict(url, {"instances": ["1 2"]})[0] for _ in range(10)]
    finally:
        stop.set()
        for hog in hogs:
            hog.join(timeout=6 * TIMEOUT)
    assert statuses == [200] * 10
    refusals = [a for a in answers if a.startswith(b"HTTP/1.0 503")]
    assert b"the server's limit per client address (--max_connections_per_client)" in refusals[0]
    assert not any(hog.is_alive() for hog in hogs)


def _descendants(pid: int) -> list:
    """The live (not zombie) processes below `pid`, from /proc."""
    children, states = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        states[int(entry)] = fields[0]
    found, todo = [], list(children.get(pid, []))
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        if states.get(current) != "Z":
            found.append(current)
    return found


def _workers(pid: int) -> set:
    """The version workers below the server `pid` (spawned interpreters)."""
    found = set()
    for child in _descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    found.add(child)
        except OSError:
            continue
    return found


def _tree_pss(pid: int) -> int:
    """Proportional resident memory of `pid` and its live descendants, in bytes."""
    total = 0
    for current in [pid, *_descendants(pid)]:
        try:
            with open(f"/proc/{current}/smaps_rollup") as f:
                total += next(int(x.split()[1]) for x in f if x.startswith("Pss:")) * 1024
        except (OSError, StopIteration):
            continue
    return total


def _copy_version(watched, name: str) -> None:
    """Copies version 1 in as `name`, atomically (as the exporter does)."""
    shutil.copytree(watched / "1", watched / f".tmp-{name}")
    os.rename(watched / f".tmp-{name}", watched / name)


@pytest.mark.slow
def test_a_retired_version_ends_after_refused_requests_and_deletion_falls_back(server):
    url, watched, process = server["url"], server["watched"], server["process"]
    assert _health(url)["version"] == 1
    (first_worker,) = _workers(process.pid)
    start_pss = _tree_pss(process.pid)
    for body, _ in REFUSED:  # each refused inside the exported graph
        assert predict(url, body)[0] == 400
    _copy_version(watched, str(MAX_VERSION + 1))  # stock TF Serving cannot load it
    _copy_version(watched, "2")
    _wait_for(lambda: _health(url)["version"] == 2, "version 2")
    _wait_for(lambda: first_worker not in _workers(process.pid), "version 1's worker to end", 60)
    assert len(_workers(process.pid)) == 1
    pss = _tree_pss(process.pid)
    assert pss <= start_pss + PSS_BOUND, (start_pss >> 20, pss >> 20)
    ignored = [line for line in server["log"].read_text().splitlines() if "ignoring" in line]
    assert ignored == [
        f"ignoring {watched / str(MAX_VERSION + 1)}: a version number must be at most "
        f"{MAX_VERSION} (a signed 64-bit integer, as TensorFlow Serving's); rename it to serve it"
    ]
    # Deleting the served version's folder brings back the newest version left.
    shutil.rmtree(watched / "2")
    _wait_for(lambda: _health(url)["version"] == 1, "the fall-back to version 1")
    states = {e["version"]: e["state"] for e in call(url, "GET", "/v1/models/rev")[1][
        "model_version_status"]}  # fmt: skip
    assert states == {"2": "END", "1": "AVAILABLE"}
    status, body = predict(url, {"instances": ["3 1 2"]})
    assert status == 200 and body["predictions"][0]["translations"]
    _wait_for(lambda: len(_workers(process.pid)) == 1, "version 2's worker to end", 60)
