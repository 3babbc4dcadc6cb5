"""Serves exported models over TF Serving's REST API: `python -m t2t_lite.serve --model_dir=...`.

Loads the newest version in MODEL_DIR (= EXPORT_DIR/MODEL_NAME), a SavedModel or a
CTranslate2 export (`--format=ctranslate2`), picks up newer ones as they appear, and stops gracefully on SIGTERM. See t2t_lite/serving/server.py for the API.
"""

import sys

from absl import app, flags, logging

from t2t_lite import cli

FLAGS = flags.FLAGS
cli.define_folder("model_dir", None, "EXPORT_DIR/MODEL_NAME, holding integer version folders.")
flags.DEFINE_string("host", "127.0.0.1", "Address to listen on (0.0.0.0 for every interface).")
flags.DEFINE_integer("port", 8501, "Port to listen on; 0 = any free port (printed when ready).")
flags.DEFINE_integer("max_batch_size", 8, "Sentences per model call; 1 turns batching off.")
flags.DEFINE_float("batch_wait_ms", 5.0, "Longest wait of a request for others to batch with.")
flags.DEFINE_integer("batch_threads", 1, "Batches run side by side (one per core helps on CPU).")
flags.DEFINE_integer("max_body_bytes", 4 << 20, "Larger request bodies are refused (413).")
flags.DEFINE_integer(
    "max_request_rows", 256, "Predict requests with more examples are refused (413)."
)
flags.DEFINE_integer(
    "max_connections", 64, "Connections served at once (a thread each); more are refused (503)."
)
flags.DEFINE_integer(
    "max_connections_per_client",
    16,
    "Of those, connections one client address may hold at once; more are refused (503). "
    "0 = no limit (clients behind one proxy share an address).",
)
flags.DEFINE_float("poll_seconds", 5.0, "Look for a new version this often; 0 = never.")
flags.DEFINE_float(
    "request_timeout",
    20.0,
    "Seconds a client has to send its whole request (headers and body); "
    "slower or idle ones get 408 and free their connection.",
)
flags.DEFINE_bool("access_log", False, "Log every request to stderr.")
flags.mark_flag_as_required("model_dir")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    cli.quiet_tensorflow(FLAGS["verbosity"].present)
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from t2t_lite.serving import ServerConfig, serve

    config = ServerConfig(
        host=FLAGS.host,
        port=FLAGS.port,
        max_batch_size=FLAGS.max_batch_size,
        batch_wait_ms=FLAGS.batch_wait_ms,
        batch_threads=FLAGS.batch_threads,
        max_body_bytes=FLAGS.max_body_bytes,
        max_request_rows=FLAGS.max_request_rows,
        max_connections=FLAGS.max_connections,
        max_connections_per_client=FLAGS.max_connections_per_client,
        poll_seconds=FLAGS.poll_seconds,
        request_timeout_seconds=FLAGS.request_timeout,
        access_log=FLAGS.access_log,
    )
    # Each version's worker process hides TensorFlow's start-up noise as this command does.
    sys.exit(serve(FLAGS.model_dir, config, worker_setup=cli.quiet_worker))


def run():
    cli.run(main, __name__)


if __name__ == "__main__":
    run()
