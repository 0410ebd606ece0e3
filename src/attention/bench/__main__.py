"""``python -m attention.bench``: run the benchmark (see ``--help``)."""

from .cli import main

main()
