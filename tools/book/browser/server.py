"""The built site, served on localhost in a thread, with pages replaced or hidden on purpose, and
with its search index emptied for the pages that do not search."""

from __future__ import annotations

import functools
import http.server
import json
import sys
import threading
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

SEARCH_INDEX = "search/search_index.json"  # under the site's base path
REAL_INDEX_COOKIE = "attn-real-search-index"  # a request with it gets the whole search index


class SiteServer:
    """Serve a built site on a free localhost port, in a thread, under the URL path ``base``.

    ``overrides`` maps a URL path to the bytes served for it (a page broken on purpose), and a
    path in ``hidden`` answers 404 (a file deleted on purpose); the site folder is never touched.
    Like GitHub Pages, the server lets the browser reuse a file for ten minutes without asking
    again; with ``revalidate`` the browser asks every time (the answer may have changed).

    Every page fetches the site's search index (1.9 MB) and indexes it in a worker, about a second
    of CPU per page load on a 2-core machine. With ``empty_search_index`` the server answers that
    request with the index emptied of its documents (its configuration kept, which the theme's
    script reads), unless the request carries the cookie ``REAL_INDEX_COOKIE``
    (:meth:`book.browser.tab.Tab.real_search_index` sets it); the browser stores neither answer.
    (Answering it through Playwright's routing would turn off the browser's cache for the whole
    context, and cost a page load more than the index does.)
    """

    def __init__(
        self, root: Path, base: str = "/", revalidate: bool = False, empty_search_index: bool = False
    ) -> None:
        self.root, self.base = root, base
        self.cache_control = "no-cache" if revalidate else "max-age=600"
        self.empty_search_index = empty_search_index
        self._empty_index: bytes | None = None
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

    def emptied_index(self) -> bytes:
        """The site's search index without its documents."""
        if self._empty_index is None:
            index = json.loads((self.root / SEARCH_INDEX).read_text(encoding="utf-8"))
            self._empty_index = json.dumps({**index, "docs": []}).encode()
        return self._empty_index


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
            self._send(self.site.overrides[path], "text/html; charset=utf-8")
        elif self._empties_index(path) and (
            REAL_INDEX_COOKIE not in SimpleCookie(self.headers.get("Cookie") or "")
        ):
            self._send(self.site.emptied_index(), "application/json")
        else:
            super().do_GET()

    def _empties_index(self, path: str) -> bool:
        """True for the search index's path on a server made with ``empty_search_index``."""
        return self.site.empty_search_index and path == self.site.path(SEARCH_INDEX)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def translate_path(self, path: str) -> str:
        return super().translate_path("/" + path[len(self.site.base) :])

    def end_headers(self) -> None:
        no_store = self._empties_index(urlsplit(self.path).path)
        self.send_header("Cache-Control", "no-store" if no_store else self.site.cache_control)
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass
