"""The book's doc-test runner: every Python fence on every page runs, and its output is checked.

A pytest plugin on pytest's own hooks and markdown-it-py (CommonMark); it owns its marker,
``page`` (``pytest -m page`` selects the page tests). It began as a replacement of
pytest-markdown-docs, and no longer uses anything of it.

Modules:

- ``book.pages`` (beside this package, the repository's one page reader): finds Python fences
  and their ```` ```{.text .output} ```` blocks, also inside admonitions, ``???`` blocks and
  content tabs; rewrites output blocks byte-for-byte.
- ``compare``: the comparison rule (tokens equal, whitespace ignored, each number within one
  unit of its last shown digit, integers exact).
- ``execution``: runs chains of fences in linear time, in a deterministic state, and formats
  tracebacks with page line numbers.
- ``notebooks``: code cells of ``.ipynb`` files and their stored outputs.
- ``runtime``: the session's state and the pending rewrites of outputs;
- ``items``: the collectors and items (one per fence, cell or problem), grouped per page for
  pytest-xdist;
- ``plugin``: the pytest hooks; the ``--update-outputs`` option; the count of executed fences
  across workers.

Written here rather than taken from pytest-markdown-docs, and why:

- the fence info string: ``book.pages.info_words`` reads both ``python continuation`` and the brace
  syntax of pymdownx.superfences, ``{.python continuation}``, which Material renders;
- the collection: pytest-markdown-docs' ``extract_fence_tests`` builds each continuation fence's
  source by prepending every earlier fence of the chain, so a chain of N fences executes
  N(N+1)/2 fences; it knows nothing of output blocks; and it only sees fences markdown-it parses,
  missing those indented 4 spaces inside admonitions, ``???`` blocks and tabs.
  ``book.pages.parse_page`` walks those containers, and it is the repository's one fence scanner: the
  site and shape-trace tests read pages with ``book.pages.read_page`` too;
- the items and their run: fences here must capture stdout, share one namespace along a chain
  (replaying earlier fences only when needed), reset print options and threads per chain,
  compare with the output block, and report diffs and tracebacks at page lines; the stock items
  do none of this;
- the stock collection (``--markdown-docs``) would also collect every docstring in every .py
  file.
"""
