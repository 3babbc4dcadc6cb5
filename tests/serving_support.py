"""What the serving tests share: one exported tiny model, server processes, raw HTTP.

The model is trained (10 steps) and exported once per test session, whatever number of
files or test workers use it (`conftest.shared_run_folder`); tests that change a model
folder copy it first.
"""

import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from urllib.parse import urlparse

import pytest
from conftest import shared_run_folder

from t2t_lite import hparams
from t2t_lite.export import export_from_run
from t2t_lite.training import trainer

TINY = "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48,warmup_steps=50"


def exported_model(tmp_path_factory):
    """EXPORT_DIR/rev holding version 1 of a tiny algorithmic_reverse model (beams 1 and 2)."""
    with shared_run_folder(tmp_path_factory, "serving_model") as root:
        model_dir = root / "export" / "rev"
        if not (model_dir / "1" / "saved_model.pb").exists():
            hp = hparams.override(hparams.get("transformer_tiny"), TINY)
            config = trainer.RunConfig(
                problem="algorithmic_reverse", output_dir=str(root / "run"), train_steps=10,
                eval_steps=1, eval_every=10, save_every=10, log_every=10,
            )  # fmt: skip
            trainer.train_and_evaluate(config, hp, printer=lambda line: None)
            export_from_run(
                "algorithmic_reverse", "", str(root / "run"), str(root / "export"), "rev",
                beam_size=2, ids_model_name="",
            )  # fmt: skip
        return model_dir


def _start(model_dir, log, *flags, environ=None):
    """Starts `python -m t2t_lite.serve` (stderr to `log`); returns (process, line queue).

    `environ`: the environment (default: this one with TF_CPP_MIN_LOG_LEVEL=2).
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "t2t_lite.serve", f"--model_dir={model_dir}", "--port=0", *flags],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),
        text=True,
        env=environ or dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in process.stdout], daemon=True).start()
    return process, lines


def _next_line(lines, timeout=180.0) -> str:
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        pytest.fail(f"the server printed nothing for {timeout} s")


def _ready(process, lines, name="rev", version=1) -> str:
    """Waits for the ready line and returns the server's base URL."""
    line = _next_line(lines)
    assert line.startswith(f"loading {name} from "), line
    line = _next_line(lines)
    prefix = f"{name} version {version} AVAILABLE at http://127.0.0.1:"
    assert line.startswith(prefix) and line.rstrip().endswith(f"/v1/models/{name}"), line
    return line.split(" at ")[1].strip().removesuffix(f"/v1/models/{name}")


def _stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def call(url, method, path, body=None, headers=None, timeout=120):
    """One HTTP request; returns (status, decoded JSON)."""
    parsed = urlparse(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def predict(url, body, model="rev"):
    return call(url, "POST", f"/v1/models/{model}:predict", body)


def _health(url) -> dict:
    return call(url, "GET", "/healthz")[1]


def _wait_for(condition, what, timeout=120.0):
    """Polls `condition()` until true; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _raw_exchange(url, data: bytes, timeout=30.0) -> tuple:
    """Sends raw bytes, reads until the server closes: (status, headers, JSON body)."""
    parsed = urlparse(url)
    with socket.create_connection((parsed.hostname, parsed.port), timeout=timeout) as sock:
        sock.sendall(data)
        received = sock.makefile("rb").read()
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)
