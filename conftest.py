"""Repository-wide pytest setup.

Loads the book's page runner (tests/markdown_runner): every Python fence of every page under
docs/ runs and its printed output is checked against the page. ``pytester`` drives the runner's
own tests in tests/doctests/.
"""

pytest_plugins = ["pytester", "tests.markdown_runner.plugin"]
