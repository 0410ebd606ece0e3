"""Experiments whose results a page shows but the doc tests cannot afford to rerun in full.

Each module trains what a chapter compares, writes its results with their provenance to
``results/<name>.json`` beside it; its ``--check`` reruns a few stored rows and fails if today's
code gives other numbers (``.ci/run`` runs it), and a test in ``tests/book/`` compares the rows a
page also prints.
"""
