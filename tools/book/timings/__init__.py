"""The appendix of measured timings, generated from the benchmark's results files.

- :mod:`~book.timings.load`: the results files, validated, and the runs' groups of rows;
- :mod:`~book.timings.format`: numbers and Markdown tables;
- :mod:`~book.timings.tables`: the tables of a run;
- :mod:`~book.timings.plots`: the figures of a run (drawn by the book's figure pipeline);
- :mod:`~book.timings.facts`: numbers quoted in the appendix's prose, as queries answered from a run;
- :mod:`~book.timings.page`: the generated parts of the appendix pages.
"""
