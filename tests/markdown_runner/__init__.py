"""The book's doc-test runner: every Python fence on every page runs, and its output is checked.

A pytest plugin built on pytest-markdown-docs 0.9.2 (pinned exactly in requirements.txt, because
the parts reused here are its internals, not a public API).

Modules:

- ``pages``: finds Python fences and their ```` ```{.text .output} ```` blocks, also inside
  admonitions, ``???`` blocks and content tabs; rewrites output blocks byte-for-byte.
- ``compare``: the comparison rule (tokens equal, whitespace ignored, each number within one
  unit of its last shown digit, integers exact).
- ``execution``: runs chains of fences in linear time, in a deterministic state, and formats
  tracebacks with page line numbers.
- ``notebooks``: code cells of ``.ipynb`` files and their stored outputs.
- ``plugin``: the pytest hooks, collectors and items; the ``--update-outputs`` option.

Reused from pytest-markdown-docs, and why:

- ``parse_superfences_block_info``: it reads the ``{.python continuation}`` brace syntax of
  pymdownx.superfences (which Material renders), so both tools agree on what a fence says.
- the ``pytest_markdown_docs_markdown_it`` hook: the same markdown-it parser (CommonMark), which
  a conftest can still reconfigure in one place.
- ``MarkdownInlinePythonItem`` (subclassed) and ``FenceTestDefinition``: items keep the
  ``markdown-docs`` marker (``pytest -m markdown-docs`` selects page tests) and the fence's code
  in their user properties, as the stock plugin reports them.

Replaced, and why:

- ``extract_fence_tests``: it builds each continuation fence's source by prepending every
  earlier fence of the chain, so a chain of N fences executes N(N+1)/2 fences; it knows nothing
  of output blocks; and it only sees fences markdown-it parses, missing those indented 4 spaces
  inside admonitions, ``???`` blocks and tabs. ``pages.parse_page`` walks those containers.
- the item's ``runtest``/``repr_failure`` and the ``DefaultRunner``: fences here must capture
  stdout, share one namespace along a chain (replaying earlier fences only when needed), reset
  print options and threads per chain, compare with the output block, and report diffs and
  tracebacks at page lines; the stock runner does none of this.
- the stock collection (``--markdown-docs``): it would also collect every docstring in every .py
  file and run each fence a second time, so the plugin refuses that flag.
"""
