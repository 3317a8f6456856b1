"""Database files for tests: an altered copy of a store, and a process that holds a store's write lock."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import duckdb


def altered(good_db: Path, db: Path, *sql: str) -> Path:
    """A copy of ``good_db`` at ``db`` with ``sql`` run on it."""
    shutil.copy(good_db, db)
    con = duckdb.connect(str(db))
    for statement in sql:
        con.execute(statement)
    con.close()
    return db


HOLDER = textwrap.dedent("""
    import sys, time, duckdb
    while True:  # take the file as soon as the judge run's writer lets go of it
        try:
            con = duckdb.connect(sys.argv[1])
            break
        except duckdb.IOException:
            time.sleep(0.005)
    print("LOCKED", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
""")
