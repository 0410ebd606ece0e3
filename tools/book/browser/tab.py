"""One browser page that records, visit by visit, what a reader's browser would have done wrong:
requests to other hosts, console errors, uncaught exceptions and failed requests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, Request, Response, Route
from playwright.sync_api import Error as PlaywrightError

from .chromium import TIMEOUT_MS, is_local

# Every page of the site fetches the one search index and indexes it in a worker: 1.9 MB, about
# a second of CPU per page load on a 2-core machine. Tests that do not search answer that request
# with the site's index emptied of its documents (its configuration kept, which the theme's script
# reads): a Tab does, except inside Tab.real_search_index(), where the searching checks run.
SEARCH_INDEX = "**/search/search_index.json"
_empty_indexes: dict[str, str] = {}  # the site's index without documents, by its URL


def empty_search_index(
    context: BrowserContext, report: Callable[[str], None] | None = None
) -> Callable[[Route], None]:
    """Answer the search index requests of ``context``'s pages with the index emptied of its
    documents; return the route handler (for ``context.unroute``). A failure to fetch or answer
    goes to ``report``, if given, as one line."""

    def answer(route: Route) -> None:
        url = route.request.url
        try:
            if url not in _empty_indexes:
                response = route.fetch()
                if not response.ok:  # a missing index is the page's problem: it sees it as it is
                    route.fulfill(response=response)
                    return
                _empty_indexes[url] = json.dumps({**response.json(), "docs": []})
            route.fulfill(status=200, content_type="application/json", body=_empty_indexes[url])
        except PlaywrightError as error:  # the page closed meanwhile, or a real failure
            if report:
                report(f"{url} (the emptied search index: {str(error).splitlines()[0]})")

    context.route(SEARCH_INDEX, answer)
    return answer


class Tab:
    """One browser page in its own context, recording each visit's requests to other hosts
    (which fail: see :func:`book.browser.chromium.launch`), console errors, uncaught exceptions
    and failed requests. Its pages get an empty search index outside :meth:`real_search_index`."""

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
        self._search_index = empty_search_index(self.context, self._report_index_failure)
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
        self.context.unroute(SEARCH_INDEX, self._search_index)
        try:
            yield
        finally:
            self._search_index = empty_search_index(self.context, self._report_index_failure)

    def _report_index_failure(self, text: str) -> None:
        if not self.page.is_closed():
            self.failed.append(text)

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
