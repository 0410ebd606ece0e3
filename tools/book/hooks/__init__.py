"""The logic of the MkDocs hooks, one module per concern; tools/mkdocs_hooks/*.py, which mkdocs.yml
names, only import their events from here."""
