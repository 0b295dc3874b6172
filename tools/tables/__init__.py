"""Generators of the measured tables in the docs (tools/doc_tables.py runs them).

Each module here defines TABLES = {"name": function}; a function takes no argument and returns the
Markdown that goes between `<!-- table:name -->` and `<!-- /table:name -->` in a doc, built only
from files under results/. common.py has what they share.
"""
