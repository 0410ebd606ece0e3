"""Experiments whose results a page shows but the doc tests cannot afford to rerun in full.

Each module trains what a chapter compares, writes its results with their provenance to
``results/<name>.json`` beside it, and is reproduced row by row by a test in ``tests/book/``.
"""
