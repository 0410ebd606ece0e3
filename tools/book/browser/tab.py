"""One browser page that records, visit by visit, what a reader's browser would have done wrong:
requests to other hosts, console errors, uncaught exceptions and failed requests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request, Response

from .chromium import TIMEOUT_MS, is_local
from .server import REAL_INDEX_COOKIE


class Tab:
    """One browser page in its own context, recording each visit's requests to other hosts
    (which fail: see :func:`book.browser.chromium.launch`), console errors, uncaught exceptions
    and failed requests. From a server made with ``empty_search_index``
    (:class:`book.browser.server.SiteServer`), its pages get an empty search index outside
    :meth:`real_search_index`."""

    def __init__(self, browser: Browser, viewport: dict[str, int], phone: bool = False) -> None:
        self.context: BrowserContext = browser.new_context(
            viewport=viewport,
            device_scale_factor=1,
            is_mobile=phone,
            has_touch=phone,
            color_scheme="light",
            permissions=["clipboard-read", "clipboard-write"],
            accept_downloads=True,
        )
        self.context.on("request", self._on_request)
        self.context.on("requestfinished", self._on_done)
        self.context.on("requestfailed", self._on_failed)
        self.context.on("response", self._on_response)
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page: Page = self.context.new_page()
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.page_errors.append(str(error)))
        self.reset()

    def blank(self) -> None:
        """Leave the current page for an empty one and forget what earlier visits recorded.

        Whatever the old page still had in flight (a font, the search index) is cancelled, and
        its events are delivered before the navigation returns, so none leaks into the next visit.
        """
        self.page.goto("about:blank")
        self.reset()

    def reset(self) -> None:
        """Forget what earlier visits recorded."""
        self.offhost: list[str] = []  # requests to other hosts (they fail)
        self.console_errors: list[str] = []
        self.page_errors: list[str] = []  # uncaught exceptions
        self.failed: list[str] = []  # local requests that failed or answered 4xx/5xx
        self.requested: list[str] = []  # local requests made
        self._pending: set[Request] = set()

    @contextmanager
    def real_search_index(self) -> Iterator[None]:
        """Inside the block, pages load the site's own search index."""
        self.context.add_cookies([{"name": REAL_INDEX_COOKIE, "value": "1", "url": "http://127.0.0.1/"}])
        try:
            yield
        finally:
            self.context.clear_cookies(name=REAL_INDEX_COOKIE)

    def close(self) -> None:
        """Close the page and its context."""
        self.context.close()

    def settle(self, timeout_s: float = 5.0) -> None:
        """Wait until no local request of the page is still in flight (search index, fonts)."""
        deadline = time.monotonic() + timeout_s
        while self._pending and time.monotonic() < deadline:
            self.page.wait_for_timeout(25)

    def _on_request(self, request: Request) -> None:
        if is_local(request.url):
            self.requested.append(request.url)
            self._pending.add(request)
        else:
            self.offhost.append(request.url)

    def _on_done(self, request: Request) -> None:
        self._pending.discard(request)

    def _on_failed(self, request: Request) -> None:
        self._pending.discard(request)
        # An off-host request is already recorded; ERR_ABORTED is a request cancelled by
        # the next navigation or turned into a download, not a missing file (that answers 404).
        if is_local(request.url) and "ERR_ABORTED" not in (request.failure or ""):
            self.failed.append(f"{request.url} ({request.failure})")

    def _on_response(self, response: Response) -> None:
        if response.status >= 400 and is_local(response.url):
            self.failed.append(f"{response.url} (HTTP {response.status})")

    def _on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.console_errors.append(message.text)
