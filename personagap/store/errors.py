"""The store's errors."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The database file cannot be used (newer schema, held by a writer too long, ...)."""


class DuplicateKeyError(ValueError):
    """A batch holds the same key twice: a bug in the importer that built it (importers locate duplicates)."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message, cut to 200 characters (a store error is one line)."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= 200 else line[:200] + "…"
