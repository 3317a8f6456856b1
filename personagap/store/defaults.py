"""The store's default file name, in a module that imports nothing (the CLI's ``--help`` shows it without DuckDB)."""

DEFAULT_DB = "personagap.duckdb"
"""The database file commands read and write when no ``--db`` is given (the same as ``schema.DEFAULT_DB``)."""
