"""The TensorFlow Datasets route of the WMT14 problems, run for real but offline.

TFDS's own download manager fetches the WMT archives over HTTP with `requests`, which
honours HTTP_PROXY. A proxy on 127.0.0.1 that refuses every request stands in for a
dead link or a machine without network: the real builder is imported and its real
preparation path runs up to the download (so a module it imports that is not installed
fails here too), and nothing leaves this machine.
"""

import http.server
import os
import sys
import threading

import pytest
import warm_python


class _RefusingProxy(http.server.BaseHTTPRequestHandler):
    """A forward proxy that answers 404 to every URL."""

    requested: list = []

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self.requested.append(self.path)
        self.send_error(404, "no such file on this mirror")

    do_HEAD = do_GET

    def do_CONNECT(self):  # noqa: N802
        self.requested.append(self.path)
        self.send_error(502, "no tunnels here")

    def log_message(self, *args):
        pass


@pytest.fixture
def proxy():
    def start():
        handler = type("Handler", (_RefusingProxy,), {"requested": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, handler.requested

    servers = []
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _offline_env(tmp_path, proxy_address) -> dict:
    url = f"http://{proxy_address[0]}:{proxy_address[1]}"
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env.update(
        HTTP_PROXY=url, HTTPS_PROXY=url, http_proxy=url, https_proxy=url,
        HOME=str(tmp_path / "home"), TFDS_DATA_DIR=str(tmp_path / "tfds"),
        TF_CPP_MIN_LOG_LEVEL="3",
    )  # fmt: skip
    return env


def _assert_one_clear_line(result, *fragments):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    for fragment in fragments:
        assert fragment in last, last


def test_a_failed_tfds_download_is_one_line_naming_the_url_and_leaves_nothing(tmp_path, proxy):
    # A dead link (404). A dropped connection ends the same way, after TFDS's own
    # retries with backoff (minutes), so it is not repeated here.
    server, requested = proxy()
    data_dir = tmp_path / "data"
    command = [
        sys.executable, "-m", "t2t_lite.datagen", "--problem=wmt14_ende", "--source=tfds",
        f"--data_dir={data_dir}", f"--tfds_data_dir={tmp_path / 'tfds'}",
    ]  # fmt: skip
    result = warm_python.run(
        command, capture_output=True, text=True, timeout=600,
        env=_offline_env(tmp_path, server.server_address),
    )  # fmt: skip
    # The real downloader asked for a real WMT archive, through this machine only.
    assert any("statmt.org" in path for path in requested), requested
    _assert_one_clear_line(
        result, "t2t_lite.datagen: TensorFlow Datasets could not prepare wmt14_translate/de-en",
        "http://www.statmt.org/", "--raw_dir=DIR",
    )  # fmt: skip
    assert not (data_dir / "wmt14_ende").exists()
    assert not (tmp_path / "tfds").exists(), sorted(map(str, (tmp_path / "tfds").rglob("*")))


def test_the_headline_command_stops_with_one_line_when_the_corpus_cannot_be_fetched(
    tmp_path, proxy
):
    server, requested = proxy()
    data_dir = tmp_path / "data"
    command = [
        sys.executable, "-m", "t2t_lite.trainer", "--problem=wmt14_ende",
        "--hparams_set=transformer_big", "--generate_data", f"--data_dir={data_dir}",
        f"--output_dir={tmp_path / 'run'}",
    ]  # fmt: skip
    result = warm_python.run(
        command, capture_output=True, text=True, timeout=600,
        env=_offline_env(tmp_path, server.server_address),
    )  # fmt: skip
    assert requested
    _assert_one_clear_line(
        result, "t2t_lite.trainer: TensorFlow Datasets", "http://www.statmt.org/"
    )
    assert not (data_dir / "wmt14_ende").exists() and not (tmp_path / "run").exists()
    assert not (tmp_path / "tfds").exists()


def test_a_module_the_tfds_builder_needs_but_cannot_import_is_named(tmp_path, proxy):
    """As on a machine where TFDS's undeclared dependency importlib_resources is missing."""
    server, _ = proxy()
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'importlib_resources':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _Missing())\n"
    )
    env = _offline_env(tmp_path, server.server_address)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(blocker), env.get("PYTHONPATH")]))
    command = [
        sys.executable, "-m", "t2t_lite.datagen", "--problem=wmt14_ende", "--source=tfds",
        f"--data_dir={tmp_path / 'data'}", f"--tfds_data_dir={tmp_path / 'tfds'}",
    ]  # fmt: skip
    result = warm_python.run(command, capture_output=True, text=True, timeout=600, env=env)
    _assert_one_clear_line(
        result, "needs the Python module 'importlib_resources'", "pip install importlib_resources"
    )
    assert not (tmp_path / "data" / "wmt14_ende").exists() and not (tmp_path / "tfds").exists()
