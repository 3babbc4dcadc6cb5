"""The HTTP request handler of `ModelServer`: TensorFlow Serving's REST paths over http.server."""

from __future__ import annotations

import http.server
import json
import socket
import sys
import time

from t2t_lite.serving.rest import RequestError

# After a 413, what the client still sends is read and dropped for at most this long (and
# at most _DISCARD_LIMIT bytes): closing a socket with unread data resets the connection,
# and a reset can make the client lose the answer before reading it.
_LINGER_SECONDS = 2.0
_DISCARD_LIMIT = 64 << 20


def make_handler(server):
    """The request handler class of `server` (a ModelServer)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = server.config.request_timeout_seconds
        server_version = "t2t_lite-serve"

        def do_GET(self):  # noqa: N802 - http.server's naming.
            self._answer(lambda: server.handle_get(self.path))

        def do_POST(self):  # noqa: N802
            self._answer(lambda: server.handle_post(self.path, self._read_body()))

        def _not_allowed(self):
            def refuse():
                raise RequestError(405, f"{self.command} is not supported; use GET or POST")

            self._answer(refuse)

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

        def _read_body(self) -> bytes:
            length = self.headers.get("Content-Length")
            if length is None:
                raise RequestError(411, "a Content-Length header is required")
            if not length.isdigit():
                raise RequestError(400, f"Content-Length {length!r} is not a number")
            length = int(length)
            limit = server.config.max_body_bytes
            if length > limit:
                self._linger = True
                raise RequestError(
                    413,
                    f"the body has {length:,} bytes; the limit is {limit:,} (the server's "
                    "--max_body_bytes)",
                )
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                raise RequestError(408, "timed out reading the body") from None
            if len(body) != length:
                raise RequestError(400, f"the body ended after {len(body)} of {length} bytes")
            return body

        def _drop_the_rest(self) -> None:
            """After the answer is sent: end writing, drop what the client still sends.

            Reads for at most _LINGER_SECONDS and _DISCARD_LIMIT bytes, then gives up;
            a client that stops sending on the answer (or closes) ends it at once.
            """
            try:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + _LINGER_SECONDS
                dropped = 0
                while dropped < _DISCARD_LIMIT:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.connection.settimeout(left)
                    chunk = self.connection.recv(1 << 16)
                    if not chunk:
                        return
                    dropped += len(chunk)
            except OSError:
                return

        _linger = False

        def _answer(self, compute) -> None:
            try:
                status, payload = compute()
            except RequestError as error:
                status, payload = error.status, {"error": error.message}
            except Exception as error:  # noqa: BLE001 - a request must never kill the server.
                status = 500
                payload = {"error": f"internal error: {type(error).__name__}: {error}"[:600]}
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")  # One response per connection.
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                return  # The client left; nothing to answer.
            if self._linger:
                self._drop_the_rest()

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature.
            if server.config.access_log:
                sys.stderr.write(f"{self.address_string()} {format % args}\n")

    return Handler
