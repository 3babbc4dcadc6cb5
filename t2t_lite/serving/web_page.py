"""The server's web page: what the model does, for a person with a browser.

`GET /` answers the page, `GET /page/<file>` its script and style sheet: plain HTML, CSS
and JavaScript shipped in the package (`t2t_lite/serving/page/`), with no build step and
nothing fetched from elsewhere, so it works offline. `GET /page/server.json` tells the page
the model's name and the server's request limits, so that it checks what it sends as the
API does. Everything else the page shows comes from the model's own signatures
(`translate_nbest`, `attention`, `model_info`: `t2t_lite.export.inspection`), called
through the REST API's `:predict` like any client: same batching, same limits, same
checks. The page writes model text only as text nodes (never parsed as HTML), and the
Content-Security-Policy below lets it run only its own script and talk only to this server.
"""

from __future__ import annotations

import functools
import importlib.resources
import json

_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/page/page.css": ("page.css", "text/css; charset=utf-8"),
    "/page/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/page/draw.js": ("draw.js", "text/javascript; charset=utf-8"),
}
SERVER_JSON = "/page/server.json"
_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
}


@functools.cache
def _read(name: str) -> bytes:
    return importlib.resources.files("t2t_lite.serving").joinpath("page", name).read_bytes()


def page_file(path: str, server) -> tuple | None:
    """(content type, bytes) of the page's file at `path`, or None if `path` is not one.

    Args:
        path: the request's path (a query string is ignored).
        server: the ModelServer (its name and limits go to `server.json`).
    """
    path = path.split("?", 1)[0]
    if path == SERVER_JSON:
        config = server.config
        limits = {
            "model": server.name,
            "max_request_rows": config.max_request_rows,
            "max_body_bytes": config.max_body_bytes,
        }
        return "application/json; charset=utf-8", json.dumps(limits).encode("utf-8")
    if path not in _FILES:
        return None
    name, content_type = _FILES[path]
    return content_type, _read(name)


def answer(handler, server) -> bool:
    """Answers `handler`'s GET if it asks for the page; False (nothing sent) otherwise."""
    found = page_file(handler.path, server)
    if found is None:
        return False
    content_type, data = found
    handler._answered = True
    try:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in _HEADERS.items():
            handler.send_header(name, value)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
    except OSError:
        pass  # The browser left; nothing to answer.
    return True
