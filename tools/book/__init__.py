"""The book's own tooling, importable: what the build hooks, the tests and the scripts share.

Not part of the package readers install (``attention``); installed editable beside it by
``requirements.txt``. Modules:

- :mod:`book.timings`: the appendix of measured timings, from the benchmark's results files
  (loading, tables, figures, the numbers quoted in its prose, the pages).
"""
