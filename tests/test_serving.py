"""The server as a client sees it: real server processes on 127.0.0.1, real HTTP requests.

Tests that need the servers are marked slow: they share one trained and exported model
and two server processes (about a minute on two busy cores).

Answers are checked against the same SavedModel called directly in this process. Server A
batches briefly (20 ms) and watches for new versions; server B waits for four sentences
before it runs a batch, which makes batching and graceful shutdown observable without
timing guesses.
"""

import base64
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
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

from t2t_lite.serving.batching import merge_inputs
from t2t_lite.serving.rest import PredictRequest, TensorInfo

MAX_BODY = 65_536
MAX_ROWS = 4  # examples per predict request on server A
# On server A: above the 16 clients of the concurrency tests; all from 127.0.0.1, so with
# no limit per client address (test_serving_hostile.py tests that one).
MAX_CONNECTIONS = 20
# Sentences of equal length: batched together, they pad to the same width as alone.
SAME_LENGTH = [f"{a} {b} {c} 5 1 8" for a in range(3) for b in range(3) for c in range(2)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return exported_model(tmp_path_factory)


@pytest.fixture(scope="module")
def servers(model_dir, tmp_path_factory):
    """Server A on a copy of the model folder (a version gets added) and server B."""
    served = tmp_path_factory.mktemp("served")
    watched = served / "rev"
    shutil.copytree(model_dir, watched)
    a = _start(
        watched, served / "a.log", "--poll_seconds=0.2", "--batch_wait_ms=20",
        f"--max_body_bytes={MAX_BODY}", f"--max_request_rows={MAX_ROWS}",
        f"--max_connections={MAX_CONNECTIONS}", "--max_connections_per_client=0",
    )  # fmt: skip
    b = _start(model_dir, served / "b.log", "--max_batch_size=4", "--batch_wait_ms=600000")
    try:
        url_a, url_b = _ready(*a), _ready(*b)
        idle_threads = call(url_a, "GET", "/healthz")[1]["threads"]
        yield {"a": (url_a, watched, *a), "b": (url_b, model_dir, *b), "idle": idle_threads}
    finally:
        _stop(a[0])
        _stop(b[0])


@pytest.fixture(scope="module")
def url(servers):
    return servers["a"][0]


@pytest.fixture(scope="module")
def direct(model_dir):
    """The SavedModel called in this process: sentences -> (translations, float32 scores)."""
    model = tf.saved_model.load(str(model_dir / "1"))

    def translate(sentences, signature="serving_default", **options):
        inputs = {k: tf.constant(v) for k, v in options.items()}
        outputs = model.signatures[signature](sentences=tf.constant(sentences), **inputs)
        return [t.decode() for t in outputs["translations"].numpy()], outputs["scores"].numpy()

    return translate


@pytest.mark.slow
def test_status_and_metadata(url):
    status, body = call(url, "GET", "/v1/models/rev")
    assert status == 200
    assert body == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    status, body = call(url, "GET", "/v1/models/rev/versions/1/metadata")
    assert status == 200 and body["model_spec"] == {
        "name": "rev",
        "signature_name": "",
        "version": "1",
    }
    signatures = body["metadata"]["signature_def"]["signature_def"]
    # Without /versions/V: the served version's metadata.
    assert call(url, "GET", "/v1/models/rev/metadata") == (200, body)
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["sentences"]["dtype"] == "DT_STRING"
    assert default["inputs"]["sentences"]["tensor_shape"] == {"dim": [{"size": "-1"}]}
    assert set(default["outputs"]) == {"translations", "scores"}
    assert signatures["translate_with_options"]["inputs"]["beam_size"]["tensor_shape"] == {}
    assert call(url, "GET", "/v1/models/rev/versions/7")[0] == 404
    assert call(url, "GET", "/v1/models/rev/versions/7/metadata")[0] == 404
    health = _health(url)
    assert health["status"] == "ok" and health["model"] == "rev" and health["version"] == 1


@pytest.mark.slow
def test_predict_rows_and_columns_equal_the_saved_model(url, direct):
    sentences = ["3 1 4 1 5", "9 2 6", "5 3 5 8 9 7 9 3"]
    translations, scores = direct(sentences)
    status, body = predict(url, {"instances": sentences})
    assert status == 200
    assert [p["translations"] for p in body["predictions"]] == translations
    np.testing.assert_array_equal(np.float32([p["scores"] for p in body["predictions"]]), scores)
    status, body = predict(url, {"signature_name": "serving_default", "inputs": sentences})
    assert status == 200 and body["outputs"]["translations"] == translations
    encoded = [{"b64": base64.b64encode(s.encode()).decode()} for s in sentences]
    assert (
        predict(url, {"instances": encoded})[1]["predictions"][0]["translations"] == translations[0]
    )


@pytest.mark.slow
def test_predict_with_options_and_ids(url, direct):
    sentences = ["3 1 4 1 5", "2 7"]
    translations, scores = direct(
        sentences, "translate_with_options", beam_size=np.int32(1), alpha=np.float32(0.0)
    )
    body = {"sentences": sentences, "beam_size": 1, "alpha": 0.0}
    status, answer = predict(url, {"signature_name": "translate_with_options", "inputs": body})
    assert status == 200 and answer["outputs"]["translations"] == translations
    np.testing.assert_array_equal(np.float32(answer["outputs"]["scores"]), scores)
    status, answer = predict(url, {"signature_name": "translate_ids", "instances": [[5, 3, 6, 1]]})
    assert status == 200
    (row,) = answer["predictions"]
    assert len(row["output_ids"]) == 2 and len(row["scores"]) == 2  # K = 2 beams
    assert len(row["output_ids"][0]) == 4 + 10  # L = S + extra_length


LONG = "7 " * 5000  # 10,000 characters: 5,000 symbols


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"\xff\xfe{}", 400, "not UTF-8"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b"[" * 60_000, 400, "too deeply"),
        ({"instance": ["1"]}, 400, "unknown field(s) ['instance']"),
        ({"instances": ["1"], "inputs": ["1"]}, 400, "exactly one of"),
        ({"instances": "1 2"}, 400, "must be a list"),
        ({"instances": []}, 400, "'instances' is empty"),
        ({"inputs": []}, 400, "has no rows"),
        ({"instances": [1, 2]}, 400, "expected strings, got int 1"),
        ({"instances": [["1 2"]]}, 400, "rank 1, got rank 2"),
        ({"instances": [{"b64": "%%%"}]}, 400, "invalid base64"),
        ({"signature_name": "nope", "instances": ["1"]}, 400, "not one of this model's signatures"),
        ({"signature_name": "translate_ids", "instances": [[3, 4, 1], [3, 1]]}, 400, "ragged"),
        ({"signature_name": "translate_ids", "instances": [[3, 4.5, 1]]}, 400, "expected integers"),
        ({"signature_name": "translate_ids", "instances": [[3, 2**40]]}, 400, "does not fit int32"),
        ({"signature_name": "translate_ids", "instances": [[3, 99, 1]]}, 400, "vocabulary size 12"),
        (
            {"signature_name": "translate_with_options", "instances": [{"sentences": "1"}]},
            400,
            "no batch dimension",
        ),
        (
            {
                "signature_name": "translate_with_options",
                "inputs": {"sentences": ["1 2"], "beam_size": 3, "alpha": 0.5},
            },
            400,
            "choose one of [1, 2]",
        ),
        ({"instances": ["1 x"]}, 400, "integers 0..9 separated by spaces"),
        ({"instances": [LONG]}, 400, "longer than this export's limit of 1014 ids"),
        (b"x" * (MAX_BODY + 1), 413, "the limit is 65,536 (the server's --max_body_bytes)"),
        ({"instances": ["1"] * (MAX_ROWS + 1)}, 413, "the limit is 4 per request"),
        ({"inputs": ["1"] * (MAX_ROWS + 1)}, 413, "a larger --max_request_rows"),
    ],
)
@pytest.mark.slow
def test_bad_requests_get_codes_and_messages(url, body, status, message):
    assert len(LONG) == 10_000
    got, answer = predict(url, body)
    assert (got, set(answer)) == (status, {"error"}), answer
    assert message in answer["error"]


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("POST", "/v1/models/other:predict", 404),
        ("GET", "/v1/models/other", 404),
        ("GET", "/v1/models/rev/versions/x", 400),
        ("POST", "/v1/models/rev/versions/9:predict", 404),
        ("GET", "/v1/models/rev:predict", 405),
        ("POST", "/v1/models/rev", 405),
        ("POST", "/v1/models/rev:classify", 400),
        ("GET", "/nothing/here", 404),
        ("DELETE", "/v1/models/rev", 405),
    ],
)
@pytest.mark.slow
def test_wrong_paths_and_methods(url, method, path, status):
    got, answer = call(url, method, path, b"{}" if method == "POST" else None)
    assert got == status and "error" in answer


@pytest.mark.slow
def test_body_without_length_is_refused(url):
    parsed = urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    connection.putrequest("POST", "/v1/models/rev:predict")
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 411 and "Content-Length" in json.loads(response.read())["error"]
    connection.close()


@pytest.mark.slow
def test_an_oversized_body_is_refused_before_it_is_read(url):
    """The 413 comes from the Content-Length alone: 1 GiB announced, 1 KiB sent."""
    head = (
        "POST /v1/models/rev:predict HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/json\r\nContent-Length: {1 << 30}\r\n\r\n"
    )
    status, headers, body = _raw_exchange(url, head.encode() + b"[" * 1024)
    assert status == 413 and headers["Connection"] == "close"
    assert body == {
        "error": "the body has 1,073,741,824 bytes; the limit is 65,536 (the server's "
        "--max_body_bytes)"
    }


@pytest.mark.slow
def test_connections_over_the_limit_are_refused_without_a_thread(url):
    parsed = urlparse(url)
    # Connections that send nothing hold a handler thread each, as slow clients do.
    held = [
        socket.create_connection((parsed.hostname, parsed.port), timeout=60)
        for _ in range(MAX_CONNECTIONS)
    ]
    try:
        status, headers, body = _raw_exchange(url, b"GET /healthz HTTP/1.0\r\n\r\n")
        assert status == 503 and headers["Connection"] == "close"
        assert body == {
            "error": f"the server is serving its limit of {MAX_CONNECTIONS} connections; retry "
            "shortly, or start it with a larger --max_connections"
        }
        post = b'POST /v1/models/rev:predict HTTP/1.0\r\nContent-Length: 22\r\n\r\n{"instances": ["1 2"]}'
        assert _raw_exchange(url, post)[0] == 503
    finally:
        for connection in held:
            connection.close()
    # Closed connections end their threads and free their places.
    _wait_for(lambda: call(url, "GET", "/healthz")[0] == 200, "a free connection")
    assert predict(url, {"instances": ["1 2"]})[0] == 200


@pytest.mark.slow
def test_blank_sentences_translate_to_blank_lines(url):
    status, body = predict(url, {"instances": ["", "   "]})
    assert status == 200
    assert body["predictions"] == [{"translations": "", "scores": 0.0}] * 2


def _concurrently(url, bodies, workers=16) -> list:
    """Sends `bodies` from `workers` threads at once; returns the answers in order."""
    answers = [None] * len(bodies)
    start = threading.Barrier(min(workers, len(bodies)))

    def work(indices):
        start.wait(timeout=60)
        for index in indices:
            answers[index] = predict(url, bodies[index])

    threads = [
        threading.Thread(target=work, args=(range(w, len(bodies), workers),))
        for w in range(min(workers, len(bodies)))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert all(answer is not None for answer in answers), "a client got no answer"
    return answers


@pytest.mark.slow
def test_many_concurrent_clients_get_their_own_answers(url, direct):
    before = _health(url)
    bodies = [{"instances": [s]} for s in SAME_LENGTH] * 3
    answers = _concurrently(url, bodies, workers=16)
    expected, scores = direct(SAME_LENGTH)
    for index, (status, body) in enumerate(answers):
        assert status == 200
        assert body["predictions"][0]["translations"] == expected[index % len(SAME_LENGTH)]
        assert body["predictions"][0]["scores"] == pytest.approx(
            scores[index % len(SAME_LENGTH)], rel=1e-5
        )
    after = _health(url)
    batches = after["batching"]["batches"] - before["batching"]["batches"]
    assert after["batching"]["requests"] - before["batching"]["requests"] == len(bodies)
    # 16 clients at once, each request waiting 20 ms for company: requests shared calls.
    assert batches < len(bodies) and after["batching"]["largest_batch"] <= 8


@pytest.mark.slow
def test_no_thread_or_memory_growth(url, servers):
    idle = servers["idle"]  # threads counted by a health request to the fresh server
    bodies = [{"instances": SAME_LENGTH[:4]}, {"instances": [LONG]}, b"{bad", {"instances": []}]
    _concurrently(url, bodies * 10)  # Warm every path once.
    _wait_for(lambda: _health(url)["threads"] == idle, "request threads to end")
    baseline = _health(url)
    _concurrently(url, bodies * 25)
    _wait_for(lambda: _health(url)["threads"] == idle, "request threads to end")
    growth = _health(url)["resident_bytes"] - baseline["resident_bytes"]
    assert growth < 32 << 20, f"resident memory grew by {growth / 2**20:.1f} MiB over 100 requests"


@pytest.mark.slow
def test_batching_waits_for_a_full_batch(servers, direct):
    url_b = servers["b"][0]
    before = _health(url_b)["batching"]
    answers = _concurrently(url_b, [{"instances": [s]} for s in SAME_LENGTH[:4]], workers=4)
    assert [status for status, _ in answers] == [200] * 4
    after = _health(url_b)["batching"]
    assert (after["batches"] - before["batches"], after["requests"] - before["requests"]) == (1, 4)
    assert after["largest_batch"] == 4
    expected, _ = direct(SAME_LENGTH[:4])
    assert [body["predictions"][0]["translations"] for _, body in answers] == expected


@pytest.mark.slow
def test_a_bad_request_batched_with_good_ones_fails_alone(servers, direct):
    url_b = servers["b"][0]
    before = _health(url_b)["batching"]
    sentences = [*SAME_LENGTH[:3], "1 x 2 3 4 5"]
    answers = _concurrently(url_b, [{"instances": [s]} for s in sentences], workers=4)
    assert _health(url_b)["batching"]["batches"] - before["batches"] == 1  # one batch of four
    assert [status for status, _ in answers] == [200, 200, 200, 400]
    assert "integers 0..9 separated by spaces" in answers[3][1]["error"]
    expected, _ = direct(SAME_LENGTH[:3])
    assert [body["predictions"][0]["translations"] for _, body in answers[:3]] == expected


@pytest.mark.slow
def test_sigterm_answers_requests_in_flight_then_exits(servers, direct):
    url_b, _, process, lines = servers["b"]
    queued_before = _health(url_b)["batching"]["requests"]
    answers = []
    clients = [
        threading.Thread(target=lambda s=s: answers.append(predict(url_b, {"instances": [s]})))
        for s in SAME_LENGTH[4:6]
    ]
    for client in clients:
        client.start()
    # Two requests wait in the batcher for company that will not come.
    _wait_for(lambda: _health(url_b)["batching"]["queued"] == 2, "two queued requests")
    assert _health(url_b)["batching"]["requests"] == queued_before
    process.send_signal(signal.SIGTERM)
    for client in clients:
        client.join(timeout=120)
    expected, _ = direct(SAME_LENGTH[4:6])
    assert sorted(status for status, _ in answers) == [200, 200]
    assert sorted(b["predictions"][0]["translations"] for _, b in answers) == sorted(expected)
    assert process.wait(timeout=120) == 0
    assert (
        _next_line(lines, 10).startswith("shutting down") and _next_line(lines, 10) == "stopped\n"
    )


@pytest.mark.slow
def test_a_new_version_is_picked_up_without_dropping_requests(servers):
    url_a, watched, _, _ = servers["a"]
    statuses, stop = [], threading.Event()

    def client():
        while not stop.is_set():
            statuses.append(predict(url_a, {"instances": ["4 4 2"]})[0])

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        shutil.copytree(watched / "1", watched / ".tmp-2")
        os.rename(watched / ".tmp-2", watched / "2")
        _wait_for(lambda: _health(url_a)["version"] == 2, "version 2 to be served")
        served = len(statuses)
        _wait_for(lambda: len(statuses) >= served + 8, "requests after the switch")
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=120)
    assert statuses and set(statuses) == {200}
    states = call(url_a, "GET", "/v1/models/rev")[1]["model_version_status"]
    assert [(s["version"], s["state"]) for s in states] == [("2", "AVAILABLE"), ("1", "END")]
    old = call(url_a, "GET", "/v1/models/rev/versions/1")[1]["model_version_status"]
    assert [(s["version"], s["state"]) for s in old] == [("1", "END")]
    assert call(url_a, "POST", "/v1/models/rev/versions/2:predict", {"instances": ["1"]})[0] == 200
    assert call(url_a, "POST", "/v1/models/rev/versions/1:predict", {"instances": ["1"]})[0] == 404


@pytest.mark.slow
def test_a_version_copied_in_pieces_is_loaded_once_complete(servers):
    url_a, watched, _, _ = servers["a"]
    (watched / "3").mkdir()
    shutil.copy(watched / "1" / "saved_model.pb", watched / "3")  # no variables yet

    def state_of_3():
        status, body = call(url_a, "GET", "/v1/models/rev/versions/3")
        return body["model_version_status"][0] if status == 200 else {}

    _wait_for(lambda: state_of_3().get("status", {}).get("error_code") == "UNKNOWN", "a failure")
    assert _health(url_a)["version"] == 2, "the broken version must not replace the served one"
    for name in ("variables", "assets", "assets.extra"):
        shutil.copytree(watched / "1" / name, watched / "3" / name)
    _wait_for(lambda: state_of_3().get("state") == "AVAILABLE", "version 3 to load")
    assert predict(url_a, {"instances": ["4 4 2"]})[0] == 200


def test_the_server_imports_no_model_code():
    """Like TF Serving, the server knows SavedModels only (DESIGN.md's layering)."""
    code = (
        "import json, sys, t2t_lite.serve, t2t_lite.serving\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('t2t_lite'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    # t2t_lite.cli: the commands' shared flag helpers, no model code.
    others = [m for m in loaded if m not in ("t2t_lite", "t2t_lite.serve", "t2t_lite.cli")]
    assert others and all(
        m.startswith("t2t_lite.serving.") for m in others if m != "t2t_lite.serving"
    )


def test_merge_pads_variable_length_inputs_and_keeps_unbatched_ones():
    infos = {
        "input_ids": TensorInfo("input_ids", "int32", (None, None)),
        "alpha": TensorInfo("alpha", "float32", ()),
    }
    requests = [
        PredictRequest(
            "s", {"input_ids": np.array([[3, 4, 1]]), "alpha": np.float32(0.5)}, False, 1
        ),
        PredictRequest(
            "s", {"input_ids": np.array([[5, 1], [6, 1]]), "alpha": np.float32(0.5)}, False, 2
        ),
    ]
    merged = merge_inputs(requests, infos)
    np.testing.assert_array_equal(merged["input_ids"], [[3, 4, 1], [5, 1, 0], [6, 1, 0]])
    assert merged["alpha"] == np.float32(0.5)
    strings = {"sentences": TensorInfo("sentences", "string", (None,))}
    texts = [PredictRequest("s", {"sentences": np.array([b"a b"], object)}, True, 1)] * 2
    assert merge_inputs(texts, strings)["sentences"].tolist() == [b"a b", b"a b"]


def test_a_folder_without_versions_is_a_clear_error(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "t2t_lite.serve", f"--model_dir={tmp_path / 'none'}", "--port=0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "holds no loadable version" in result.stderr
    assert "python -m t2t_lite.exporter" in result.stderr and "Traceback" not in result.stderr
