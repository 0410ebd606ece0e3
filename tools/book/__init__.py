"""The book's own tooling, importable: what the build hooks, the tests and the scripts share.

Not part of the package readers install (``attention``); installed editable beside it by
``requirements.txt``. Modules:

- :mod:`book.chapters`: the chapters and the pages each is read on, in reading order;
- :mod:`book.pages`: the one page reader (Python fences, their output blocks, rewriting them);
- :mod:`book.runner`: the pytest plugin that runs every fence and notebook cell;
- :mod:`book.hooks`: the logic of each MkDocs hook (tools/mkdocs_hooks/*.py re-export their events);
- :mod:`book.docstrings`: the Griffe extension that shows the docstrings in the API reference;
- :mod:`book.figures`: the code that draws each chapter's figures and the appendix's plots;
- :mod:`book.appendix`: the appendix of measured timings, from the benchmark's results files;
- :mod:`book.browser`: the browser tests' server, chromium, tabs, crawl and checks;
- :mod:`book.pdf`, :mod:`book.screenshot`: the PDF edition and the README's screenshot;
- :mod:`book.constants`: what several of these must agree on.

``python -m book --help`` lists the chores that run outside the build.
"""
