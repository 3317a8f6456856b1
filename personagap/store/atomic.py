"""One transaction on an open connection: all of a block's writes, or none of them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import duckdb


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``BEGIN`` before the block, ``COMMIT`` after it; ``ROLLBACK`` when it raises (anything, Ctrl-C too).

    A ROLLBACK that fails in turn (the folder became unwritable, say) does not hide the block's own error, which
    is the one raised (as :func:`personagap.store.write_batch` does).

    Yields:
        ``con``.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise
