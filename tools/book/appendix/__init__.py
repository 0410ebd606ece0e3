"""The appendix of measured timings, generated from the benchmark's results files.

- :mod:`~book.appendix.load`: the results files, validated, and the runs' groups of rows;
- :mod:`~book.appendix.format`: numbers and Markdown tables;
- :mod:`~book.appendix.tables`: the tables of a run;
- :mod:`~book.appendix.plots`: the figures of a run (drawn by the book's figure pipeline);
- :mod:`~book.appendix.facts`: numbers quoted in the appendix's prose, as queries answered from a run;
- :mod:`~book.appendix.page`: the generated parts of the appendix pages.
"""
