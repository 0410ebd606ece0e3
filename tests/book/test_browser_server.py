"""The server of the built site that the browser tests load pages from (book.browser.server)."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from book.browser.server import REAL_INDEX_COOKIE, SiteServer


def _handlers_done(timeout_s: float = 10.0) -> None:
    """Wait until no request-handling thread of a server is left."""
    deadline = time.monotonic() + timeout_s
    while any("process_request_thread" in t.name for t in threading.enumerate()):
        if time.monotonic() > deadline:
            raise TimeoutError("a request of the test server is still being handled")
        time.sleep(0.02)


def test_a_request_the_browser_abandons_leaves_no_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # A navigation cancels a big download in flight: the server's writes then fail with a broken
    # pipe or a reset connection, which is the browser's choice, not an error of the site.
    (tmp_path / "big.bin").write_bytes(bytes(32 * 2**20))
    with SiteServer(tmp_path) as site:
        port = urlsplit(site.origin).port
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(b"GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert client.recv(64).startswith(b"HTTP/1.0 200")
        _handlers_done()
    assert "Exception occurred" not in capfd.readouterr().err


def _get(url: str, cookie: str | None = None) -> tuple[dict, str]:
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read()), answer.headers["Cache-Control"]


def test_the_search_index_is_emptied_unless_a_request_asks_for_the_real_one(tmp_path: Path) -> None:
    # Pages that do not search get the index without its documents (indexing it costs a page
    # load about a second of CPU); a tab in Tab.real_search_index() sends the cookie.
    index = {"config": {"lang": ["en"]}, "docs": [{"location": "", "title": "Home", "text": "x"}]}
    (tmp_path / "search").mkdir()
    (tmp_path / "search" / "search_index.json").write_text(json.dumps(index))
    with SiteServer(tmp_path, empty_search_index=True) as site:
        url = site.url("search/search_index.json")
        assert _get(url) == ({"config": index["config"], "docs": []}, "no-store")
        assert _get(url, f"other=1; {REAL_INDEX_COOKIE}=1") == (index, "no-store")
        assert _get(url, f"x{REAL_INDEX_COOKIE}=1")[0]["docs"] == []  # another cookie's name
    with SiteServer(tmp_path) as site:  # the default: the site's own index, cached as any file
        assert _get(site.url("search/search_index.json")) == (index, "max-age=600")
