"""The JavaScript the checks run in a page, from the ``.js`` files beside this module (``js/``),
ready for Playwright's ``page.evaluate``.

Each file holds one JavaScript function expression (comments first, no trailing semicolon), so that
a script is composed by calling one function with others as arguments, never by editing its text:
``READ_PAGE`` is ``read_page.js`` called with the two measuring functions.
"""

from __future__ import annotations

from importlib.resources import files


def script(name: str) -> str:
    """The function in ``js/<name>.js``, in parentheses: an expression that can be called.

    Raises:
        ValueError: if the file ends in a semicolon (a statement, which cannot be called).
    """
    source = files(__package__).joinpath("js", f"{name}.js").read_text(encoding="utf-8").strip()
    if source.endswith(";"):
        raise ValueError(f"expected js/{name}.js to end with its function expression, found ';'")
    # The newline ends a // comment on the last line, which would otherwise swallow the ')'.
    return f"({source}\n)"


# timeout (ms) => "loaded", or "timeout: fonts still loading after N ms".
WAIT_FOR_FONTS = script("wait_for_fonts")
# () => one record per inline figure, per table of the page (see the files).
MEASURE_FIGURES = script("measure_figures")
MEASURE_TABLES = script("measure_tables")
# () => everything the snapshot checks read from the page (book.browser.crawl.Snapshot.dom).
READ_PAGE = f"() => {script('read_page')}({MEASURE_FIGURES}, {MEASURE_TABLES})"
