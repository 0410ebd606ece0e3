"""What the book's tools share, defined once: where things are, and the numbers several of them
must agree on (the build writes what the tests and scripts then look for)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

# The smallest text a figure may show, in CSS pixels: the figure hook sizes every figure so, and
# the browser tests measure it.
MIN_TEXT_PX = 9
# The text column of a 390 px phone, in CSS pixels (358, less a margin for rounding): a figure that
# would not fit it at MIN_TEXT_PX gets a phone layout (its panels stacked), shown where the column
# is narrower than the figure.
PHONE_COLUMN_PX = 350

# Characters of code a code block shows without scrolling sideways on a 1280 px desktop (wider
# screens scale the font with the column), measured in Chromium: 80 in the page's column, 93 in a
# solution nested in an exercise (an admonition sets code smaller; 97 at one level). Every line
# of a page's code and output is held to them (tests/book/test_code_width.py), and the browser
# tests check that the site still shows that many. A source file a page lists whole (``--8<--``)
# sits in a box of its own, one level deep: its lines are held to that box's width.
CODE_COLUMN = 80
ADMONITION_CODE_COLUMN = 92
LISTING_CODE_COLUMN = 96

# The PDF edition: its file name beside the print page, and the paragraph of the print page after
# which `python -m book pdf` adds the link to it.
PDF_NAME = "attention-book.pdf"
PDF_PLACEHOLDER = '<p class="attn-pdf-link">'

# Debian's chromium, as the browser tests and the PDF step start it: headless, no sandbox (root in
# containers), no GPU, no first-run or sync, no background requests of its own. Each caller adds
# its own rule for which hosts resolve.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update",
)

# The most a chapter page may weigh: HTML bytes and elements (DOM nodes). A heavier page makes a
# phone freeze while it parses it; a chapter that would be heavier is read on section pages
# (book.chapters). tests/site/test_site.py measures every built chapter page.
MAX_PAGE_BYTES = 1_000_000
MAX_PAGE_ELEMENTS = 25_000
