"""Take the README's screenshot of a chapter page from the built site, with headless Chromium.

    mkdocs build --strict && python .ci/screenshot.py

The site folder is served on localhost; every request to another host is blocked, so the
screenshot shows what a reader without network sees. Options: --site, --page, --anchor, --out,
--height, --dark.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serve files without logging every request."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib name)
        pass


def main() -> None:
    """Serve the site, open the page, wait for the fonts and save a PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=Path("site"), help="built site folder")
    parser.add_argument("--page", default="chapters/05-multi-head-attention/")
    parser.add_argument(
        "--anchor",
        default="52-one-projection-split-into-heads",
        help="id to scroll to ('' for none)",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/assets/screenshot-chapter.png"))
    parser.add_argument("--height", type=int, default=1000, help="viewport height in pixels")
    parser.add_argument("--dark", action="store_true", help="dark colour scheme")
    args = parser.parse_args()
    if not (args.site / args.page / "index.html").is_file():
        raise SystemExit(
            f"{args.site / args.page / 'index.html'} not found: run mkdocs build first"
        )

    handler = functools.partial(QuietHandler, directory=str(args.site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    blocked: list[str] = []

    def route(request_route) -> None:
        url = request_route.request.url
        if url.startswith(origin + "/"):
            request_route.continue_()
        else:
            blocked.append(url)
            request_route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context(
            viewport={"width": 1280, "height": args.height},
            device_scale_factor=1,
            color_scheme="dark" if args.dark else "light",
        )
        context.route("**/*", route)
        page = context.new_page()
        page.goto(f"{origin}/{args.page}")
        page.wait_for_load_state("networkidle")
        page.evaluate("document.fonts.ready")  # math is typeset at build time; wait for its fonts
        if args.anchor:  # scroll without a #fragment, which would highlight the heading
            if page.locator(f"[id='{args.anchor}']").count() != 1:
                raise SystemExit(f"no element with id {args.anchor!r} on {args.page}")
            page.evaluate(
                "id => window.scrollTo(0, document.getElementById(id).getBoundingClientRect().top"
                " + window.scrollY - 64)",
                args.anchor,
            )
            page.wait_for_timeout(300)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out))
        browser.close()
    server.shutdown()
    if blocked:
        raise SystemExit(f"the page asked for off-site URLs: {blocked}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
