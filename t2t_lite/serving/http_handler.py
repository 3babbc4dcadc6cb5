"""The HTTP side of `ModelServer`: the connection-bounded server and the request handler.

The handler answers TensorFlow Serving's REST paths over http.server.
"""

from __future__ import annotations

import http.server
import io
import json
import socket
import sys
import threading
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


class LimitedHTTPServer(http.server.ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them at once, and at most
    `per_client` (0 = any number) from one client address.

    A connection over either cap is answered 503 by the accepting thread itself, which
    writes the answer, reads what the client already sent without waiting for more, and
    closes: no thread is started for it. The socket is bound at once but listens only
    when `activate()` is called: until then a client's connection is refused.
    """

    daemon_threads = False  # server_close() waits for requests in flight
    block_on_close = True
    request_queue_size = 256  # connections the kernel holds until accepted (default 5)

    def __init__(self, address, handler, max_connections: int, per_client: int = 0):
        self.max_connections = max_connections
        self.per_client = per_client
        self._slots = threading.BoundedSemaphore(max_connections)
        self._clients: dict = {}  # client address -> connections it holds
        self._clients_lock = threading.Lock()
        self._reading: set = set()  # sockets whose request is still arriving
        self._reading_lock = threading.Lock()
        self._dropping = False
        super().__init__(address, handler, bind_and_activate=False)
        try:
            self.server_bind()
        except BaseException:
            self.server_close()
            raise

    def activate(self) -> None:
        """Starts listening: from now on connections are accepted."""
        self.server_activate()

    def begin_reading(self, sock) -> None:
        with self._reading_lock:
            if self._dropping:  # Accepted just as the shutdown began.
                sock.shutdown(socket.SHUT_RDWR)
            self._reading.add(sock)

    def end_reading(self, sock) -> bool:
        """The request has arrived; False if the shutdown dropped the connection first."""
        with self._reading_lock:
            self._reading.discard(sock)
            return not self._dropping

    def drop_readers(self) -> None:
        """Ends every connection still sending its request: its read sees end-of-file."""
        with self._reading_lock:
            self._dropping = True
            for sock in self._reading:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # Already gone.
                    pass

    def process_request(self, request, client_address):
        refusal = self._admit(client_address[0])
        if refusal:
            self._refuse(request, refusal)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._leave(client_address[0])
            raise

    def process_request_thread(self, request, client_address):
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            # The slot is given back before the socket closes: a client that sees the
            # close and connects again at once must find it free.
            self._leave(client_address[0])
            self.shutdown_request(request)

    def _admit(self, host: str) -> str:
        """Takes a slot for a connection from `host`; the refusal message if there is none."""
        with self._clients_lock:
            held = self._clients.get(host, 0)
            if self.per_client and held >= self.per_client:
                return (
                    f"your address {host} has {held} connections open, the server's limit "
                    "per client address (--max_connections_per_client); finish or close "
                    "one, then retry"
                )
            if not self._slots.acquire(blocking=False):
                return (
                    f"the server is serving its limit of {self.max_connections} connections; "
                    "retry shortly, or start it with a larger --max_connections"
                )
            self._clients[host] = held + 1
        return ""

    def _leave(self, host: str) -> None:
        with self._clients_lock:
            self._clients[host] -= 1
            if not self._clients[host]:
                del self._clients[host]
            self._slots.release()

    def _refuse(self, request, message: str) -> None:
        try:
            request.settimeout(1.0)
            request.sendall(raw_answer(503, "Service Unavailable", message))
            request.shutdown(socket.SHUT_WR)
            request.setblocking(False)
            for _ in range(16):  # What already arrived, so that closing sends no reset.
                if not request.recv(1 << 16):
                    break
        except OSError:
            pass
        finally:
            request.close()


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
            lengths = self.headers.get_all("Content-Length") or []
            if not lengths:
                raise RequestError(411, "a Content-Length header is required")
            if len(lengths) > 1:  # Which one frames the body is ambiguous: request smuggling.
                self._linger = True
                raise RequestError(
                    400, f"the request has {len(lengths)} Content-Length headers; send one"
                )
            length = lengths[0]
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
