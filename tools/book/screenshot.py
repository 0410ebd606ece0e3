"""The README's screenshot of a chapter page, taken from the built site in headless Chromium.

    mkdocs build --strict && python -m book screenshot

The site is served on localhost by the browser tests' server and opened by their chromium, which
can reach no other host: the screenshot shows what a reader without network sees, and a page
that asked for anything off the site fails the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

from .browser.chromium import DESKTOP, is_local, launch
from .browser.server import SiteServer
from .constants import REPO


def main(argv: list[str] | None = None) -> None:
    """Serve the site, open the page, wait for its fonts and save a PNG."""
    parser = argparse.ArgumentParser(prog="python -m book screenshot", description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=REPO / "site", help="built site folder")
    parser.add_argument("--page", default="chapters/05-multi-head-attention/one-projection-split-into-heads/")
    parser.add_argument("--anchor", default="52-one-projection-split-into-heads",
                        help="id to scroll to ('' for none)")
    parser.add_argument("--out", type=Path, default=REPO / "docs/assets/screenshot-chapter.png")
    parser.add_argument("--height", type=int, default=1000, help="viewport height in pixels")
    parser.add_argument("--dark", action="store_true", help="dark colour scheme")
    args = parser.parse_args(argv)
    if not (args.site / args.page / "index.html").is_file():
        raise SystemExit(f"{args.site / args.page / 'index.html'} not found: run mkdocs build first")
    offsite: list[str] = []
    with SiteServer(args.site) as server, sync_playwright() as playwright:
        browser = launch(playwright)
        context = browser.new_context(viewport={**DESKTOP, "height": args.height}, device_scale_factor=1,
                                      color_scheme="dark" if args.dark else "light")
        page = context.new_page()
        page.on("request", lambda request: None if is_local(request.url) else offsite.append(request.url))
        page.goto(server.url(args.page), wait_until="networkidle")
        page.evaluate("document.fonts.ready")  # the math is typeset at build time: wait for its fonts
        if args.anchor:  # scroll without a #fragment, which would highlight the heading
            if page.locator(f"[id='{args.anchor}']").count() != 1:
                raise SystemExit(f"no element with id {args.anchor!r} on {args.page}")
            page.evaluate("id => window.scrollTo(0, document.getElementById(id).getBoundingClientRect().top"
                          " + window.scrollY - 64)", args.anchor)
            page.wait_for_timeout(300)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out))
        browser.close()
    if offsite:
        raise SystemExit(f"the page asked for off-site URLs: {offsite}")
    print(f"wrote {args.out}")

