"""The server of the built site that the browser tests load pages from (book.browser.server)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from book.browser.server import SiteServer


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
