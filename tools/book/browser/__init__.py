"""The book in a real browser: what the browser tests (tests/browser/) use to load the built site
and to check what a reader gets from it.

Every ``check_*`` function returns a list of problems, one readable line each, and an empty list
when the page is fine. The same functions run against the real site and against copies of its
pages broken on purpose (tests/browser/test_checks_catch_breakage.py), which proves that each
check notices the breakage it exists for. Modules, each one job:

- :mod:`book.browser.chromium`: starting Debian's headless chromium so that it can reach no host
  but localhost, and the viewport sizes of a desktop and a phone.
- :mod:`book.browser.server`: :class:`~book.browser.server.SiteServer`, the built site served on
  localhost (with pages replaced or hidden on purpose).
- :mod:`book.browser.tab`: :class:`~book.browser.tab.Tab`, a browser page that records what each
  visit requested, failed or logged.
- :mod:`book.browser.scripts`: the JavaScript run in the page (the ``.js`` files of ``js/``).
- :mod:`book.browser.crawl`: visiting pages and recording them
  (:class:`~book.browser.crawl.Snapshot`), crawling the site, where links land, and what the
  built site holds.
- :mod:`book.browser.checks`: checks of one snapshot; :mod:`book.browser.live_checks`: checks
  that drive a live page (copy, search, light/dark, notebook download).
- :mod:`book.browser.colour`: WCAG 2.1 luminance and contrast.

Requires Playwright (its Python package; the browser is Debian's chromium, not Playwright's).
"""
