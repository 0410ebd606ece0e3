"""The book's figures, drawn from the ``attention`` package: one module per chapter (``chNN``,
``ch07_io``) and one for the appendix's measurements (``appendix``).

Each module defines ``FIGURES = {"name": make}``, where ``make()`` returns a matplotlib Figure;
the figure hook (:mod:`book.hooks.figures`) draws each into the site as ``figures/<name>.svg``,
and chapters 1 to 7 and 9 show their module's source under their figures.
"""
