"""Debian's headless chromium, started so that a page can reach no host but localhost, and the
sizes of the screens the tests lay pages out on.

Every request to another host goes to a proxy that does not exist (``DEAD_PROXY``), and the
resolver knows only localhost, should a request bypass the proxy: a page that would fetch anything
from the internet fails, and :class:`book.browser.tab.Tab` records the attempt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, Playwright

from ..constants import CHROMIUM, CHROMIUM_ARGS

LOCAL_HOSTS = ("127.0.0.1", "localhost")
# The browser tests' own rule for which hosts resolve (book.constants.CHROMIUM_ARGS leaves it to
# each caller): localhost only.
BROWSER_ARGS = (
    *CHROMIUM_ARGS,
    "--host-resolver-rules=MAP * ~NOTFOUND, " + ", ".join(f"EXCLUDE {h}" for h in LOCAL_HOSTS),
)
# Every request to another host goes to this proxy, a port nothing listens on, and fails. (Blocking
# through Playwright's request routing would stop every request of every page in Python: a fifth of
# the suite's browser time.)
DEAD_PROXY = {"server": "http://127.0.0.1:9", "bypass": ",".join(LOCAL_HOSTS)}
# How long a page may take to load, or a step to finish, before a test gives up: the whole-book
# page (15 MB) takes 15 to 40 s to load on a 2-core machine busy with the rest of the run, past
# Playwright's default of 30 s.
TIMEOUT_MS = 120_000
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}  # a current phone
# The screens a page is laid out on in the light and the dark scheme: keyword arguments of
# ``Browser.new_context``.
SCREENS: dict[str, dict[str, Any]] = {
    "phone": {"viewport": PHONE, "is_mobile": True, "has_touch": True},
    "phone-dark": {"viewport": PHONE, "is_mobile": True, "has_touch": True, "color_scheme": "dark"},
    "desktop": {"viewport": DESKTOP},
    "desktop-dark": {"viewport": DESKTOP, "color_scheme": "dark"},
}


def launch(playwright: Playwright, executable: Path = CHROMIUM) -> Browser:
    """Start Debian's headless chromium with the arguments the tests rely on."""
    return playwright.chromium.launch(
        executable_path=str(executable), args=list(BROWSER_ARGS), proxy=DEAD_PROXY
    )


def is_local(url: str) -> bool:
    """True for a URL that the browser may fetch: localhost, or data inside the page itself."""
    parts = urlsplit(url)
    return parts.scheme in {"data", "blob", "about"} or parts.hostname in LOCAL_HOSTS
