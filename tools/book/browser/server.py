"""The built site, served on localhost in a thread, with pages replaced or hidden on purpose."""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class SiteServer:
    """Serve a built site on a free localhost port, in a thread, under the URL path ``base``.

    ``overrides`` maps a URL path to the bytes served for it (a page broken on purpose), and a
    path in ``hidden`` answers 404 (a file deleted on purpose); the site folder is never touched.
    Like GitHub Pages, the server lets the browser reuse a file for ten minutes without asking
    again; with ``revalidate`` the browser asks every time (the answer may have changed).
    """

    def __init__(self, root: Path, base: str = "/", revalidate: bool = False) -> None:
        self.root, self.base = root, base
        self.cache_control = "no-cache" if revalidate else "max-age=600"
        self.overrides: dict[str, bytes] = {}
        self.hidden: set[str] = set()
        handler = functools.partial(_Handler, self, directory=str(root))
        self._server = _Server(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> SiteServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def path(self, path: str) -> str:
        """The URL path of a path of the site, such as ``chapters/`` or ``/chapters/``."""
        return self.base + path.lstrip("/")

    def url(self, path: str) -> str:
        """The absolute URL of a path of the site."""
        return self.origin + self.path(path)


class _Server(http.server.ThreadingHTTPServer):
    """A threading HTTP server for which a request the browser abandons is not an error."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The browser closes a connection when a navigation cancels a request in flight (a big
        # page, the search index): socketserver would print that traceback into the test log.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files of the site under its base path, with the server's overrides and hidden paths
    applied; no access log."""

    def __init__(self, site: SiteServer, *args: Any, **kwargs: Any) -> None:
        self.site = site
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # the name http.server calls
        path = urlsplit(self.path).path
        if path in self.site.hidden or not path.startswith(self.site.base):
            self.send_error(404)
        elif path in self.site.overrides:
            body = self.site.overrides[path]
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            super().do_GET()

    def translate_path(self, path: str) -> str:
        return super().translate_path("/" + path[len(self.site.base) :])

    def end_headers(self) -> None:
        self.send_header("Cache-Control", self.site.cache_control)
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass
