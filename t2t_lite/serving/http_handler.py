"""The HTTP request handler of `ModelServer`: TensorFlow Serving's REST paths over http.server."""

from __future__ import annotations

import http.server
import io
import json
import socket
import sys
import time

from t2t_lite.serving import web_page
from t2t_lite.serving.rest import RequestError

# After a 413, what the client still sends is read and dropped for at most this long (and
# at most _DISCARD_LIMIT bytes): closing a socket with unread data resets the connection,
# and a reset can make the client lose the answer before reading it.
_LINGER_SECONDS = 2.0
_DISCARD_LIMIT = 64 << 20


def raw_answer(status: int, reason: str, message: str) -> bytes:
    """A complete HTTP/1.0 answer with a JSON `{"error": message}` body."""
    data = json.dumps({"error": message}).encode("utf-8")
    head = (
        f"HTTP/1.0 {status} {reason}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + data


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes, each read given only the time left until `deadline`.

    A timeout per read alone lets a client that sends a byte every few seconds hold its
    connection (and its slot) for ever; a deadline for the whole request does not.
    """

    def __init__(self, sock, deadline: float):
        self._sock = sock
        self._deadline = deadline
        self.timed_out = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError("the request took too long to arrive")
            self._sock.settimeout(left)
            return self._sock.recv_into(buffer)
        except TimeoutError:
            self.timed_out = True
            raise


def make_handler(server):
    """The request handler class of `server` (a ModelServer)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = server.config.request_timeout_seconds
        server_version = "t2t_lite-serve"
        _answered = False

        def setup(self):
            super().setup()
            self.rfile.close()  # Replaced by a reader with a deadline for the whole request.
            deadline = time.monotonic() + server.config.request_timeout_seconds
            self._reader = _DeadlineReader(self.connection, deadline)
            self.rfile = io.BufferedReader(self._reader)
            self.server.begin_reading(self.connection)

        def handle(self):
            super().handle()
            if self._reader.timed_out and not self._answered:  # Timed out in the headers.
                seconds = server.config.request_timeout_seconds
                try:
                    self.connection.settimeout(1.0)
                    self.connection.sendall(
                        raw_answer(408, "Request Timeout", _too_slow(seconds, "headers"))
                    )
                except OSError:
                    pass

        def finish(self):
            self.server.end_reading(self.connection)
            super().finish()

        def _request_arrived(self) -> bool:
            """Ends the reading phase; False when the shutdown dropped the connection."""
            self.connection.settimeout(server.config.request_timeout_seconds)  # for writes
            return self.server.end_reading(self.connection)

        def do_GET(self):  # noqa: N802 - http.server's naming.
            if self._request_arrived() and not web_page.answer(self, server):
                self._answer(lambda: server.handle_get(self.path))

        def do_POST(self):  # noqa: N802
            try:
                body = self._read_body()
            except RequestError as error:
                body = error
            if not self._request_arrived():
                return

            def compute():
                if isinstance(body, RequestError):
                    raise body
                return server.handle_post(self.path, body)

            self._answer(compute)

        def _not_allowed(self):
            def refuse():
                raise RequestError(405, f"{self.command} is not supported; use GET or POST")

            if self._request_arrived():
                self._answer(refuse)

        do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815

        def _read_body(self) -> bytes:
            length = self.headers.get("Content-Length")
            if length is None:
                raise RequestError(411, "a Content-Length header is required")
            if not (length.isascii() and length.isdigit()):  # int() rejects '²'
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
                seconds = server.config.request_timeout_seconds
                raise RequestError(408, _too_slow(seconds, "body")) from None
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
            # backslashreplace: a lone surrogate echoed from the request becomes a JSON escape.
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8", "backslashreplace")
            self._answered = True
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


def _too_slow(seconds: float, part: str) -> str:
    return (
        f"the request's {part} did not arrive within {seconds:g} s (the server's "
        "--request_timeout); send the whole request at once"
    )
