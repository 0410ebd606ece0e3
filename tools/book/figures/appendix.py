"""Figures of the appendix: every run's measurements (book.appendix.plots), one set per results file.

Drawn by the same pipeline as the chapters' figures, so they share the book's style, keep their
text as text, take the dark theme's colours and stay legible on a phone.
"""

from book.appendix.load import load_runs
from book.appendix.plots import figure_names

FIGURES = {name: make for run in load_runs().values() for name, (_, make) in figure_names(run).items()}
