"""Opening the store: one embedded file, short transactions, clear refusals.

Why short transactions: DuckDB lets one process hold a file for writing and then
refuses every other process, readers included ("Conflicting lock is held"). So
writers here open the file, write one batch in one transaction and close it again;
readers (the report, the dashboard) open it read-only and retry briefly while a
writer holds it. A long judge run therefore never locks the dashboard out for
longer than one batch takes to write.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import duckdb

from personagap.store.errors import StoreError
from personagap.store.errors import first_line as _first_line
from personagap.store.schema import ensure_schema as _ensure_schema

_T = TypeVar("_T")
LOCK_MARKERS = ("Conflicting lock", "Could not set lock", "database is locked")

FORCE_SCHEMA = False
"""Add PersonaGap's tables to a DuckDB file that already holds other tables (set by ``--force-schema``)."""

# Never reach the network: a SQLite or other foreign file would otherwise make DuckDB download an extension.
_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
# Errors that come from the file (damaged, truncated, unwritable), not from our SQL.
_FILE_ERRORS: tuple[type[BaseException], ...] = (
    duckdb.IOException, duckdb.SerializationException, duckdb.InternalException, duckdb.FatalException,
    duckdb.PermissionException)


def connect(path: str | Path, *, read_only: bool = False, wait_seconds: float = 10.0,
            force_schema: bool | None = None) -> duckdb.DuckDBPyConnection:
    """Open the store, creating the schema when writable.

    Retries while another process holds the file, because a writer here holds it
    only for one short batch. Extension autoloading is off, so opening a foreign file never
    reaches the network.

    Args:
        path: The DuckDB file.
        read_only: Open read-only (the dashboard and reports do).
        wait_seconds: How long to retry on a lock conflict before giving up.
        force_schema: Add PersonaGap's tables to a DuckDB file holding other tables
            (default :data:`FORCE_SCHEMA`); otherwise such a file is refused.

    Returns:
        An open connection.

    Raises:
        StoreError: The file is missing (read-only), not a DuckDB database, damaged, locked
            for longer than ``wait_seconds``, another program's database, or of a schema
            version this PersonaGap does not read.
    """
    path = Path(path)
    if read_only and not path.exists():
        raise StoreError(f"{path}: no such database; import data first (see `personagap import --help`)")
    _check_location(path, read_only=read_only)
    con = _while_locked(path, wait_seconds,
                        lambda: duckdb.connect(str(path), read_only=read_only, config=dict(_CONFIG)))
    # DuckDB prints a progress bar to stdout for any query over 2 s: at 10^6+ labels it landed in front of
    # `report --json`, which then was no valid JSON. Long work shows its own progress, on stderr. (A connection
    # setting: DuckDB refuses it in the config as a global option.)
    con.execute("SET enable_progress_bar = false")
    try:
        _ensure_schema(con, path, read_only=read_only,
                       force=FORCE_SCHEMA if force_schema is None else force_schema)
    except StoreError:
        con.close()
        raise
    except _FILE_ERRORS as exc:
        con.close()
        raise StoreError(f"{path}: {_first_line(exc)}") from exc
    return con


def _while_locked(path: Path, wait_seconds: float, open_file: Callable[[], _T]) -> _T:
    """``open_file()``, retried while another process holds the file (a writer holds it for one batch)."""
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        try:
            return open_file()
        except duckdb.Error as exc:
            locked = isinstance(exc, duckdb.IOException) and any(m in str(exc) for m in LOCK_MARKERS)
            if not locked or time.monotonic() > deadline:
                raise StoreError(f"{path}: cannot open as a PersonaGap database: {_first_line(exc)}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


@contextlib.contextmanager
def attached(con: duckdb.DuckDBPyConnection, path: str | Path,
             wait_seconds: float = 10.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """Make the store file ``con``'s default database for the block: rows staged on ``con`` go in by SQL.

    ``con`` is a private in-memory connection whose relations hold rows already validated (the generic
    label importer's): written with ``INSERT ... SELECT`` they never become Python objects. The file is
    attached under the rules of :func:`connect` (waits for a lock; created, migrated and checked as there);
    the staged relations stay visible by name.

    Raises:
        StoreError: As :func:`connect`; also when this process already has the file open elsewhere.
    """
    path = Path(path)
    _check_location(path, read_only=False)
    home = con.execute("SELECT current_database()").fetchall()[0][0]
    # The path is bound, never spliced into the SQL text (it may hold quotes).
    _while_locked(path, wait_seconds, lambda: con.execute("ATTACH ? AS _store", [str(path)]))
    try:
        con.execute("USE _store")
        _ensure_schema(con, path, read_only=False, force=FORCE_SCHEMA)
        yield con
    except _FILE_ERRORS as exc:
        raise StoreError(f"{path}: {_first_line(exc)}") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.execute(f"USE {home}")
            con.execute("DETACH _store")


@contextlib.contextmanager
def opened(path: str | Path, *, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """Context manager around :func:`connect` that always closes the file.

    Errors the file itself raises inside the block (a damaged or truncated file, a folder
    that cannot be written) become a :class:`StoreError` naming the file; errors in our
    own SQL stay what they are, so bugs are not hidden.
    """
    con = connect(path, read_only=read_only)
    try:
        yield con
    except _FILE_ERRORS as exc:
        raise StoreError(f"{path}: {_first_line(exc)}") from exc
    finally:
        with contextlib.suppress(duckdb.Error):
            con.close()


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_location(path: Path, *, read_only: bool) -> None:
    """Refuse, with one clear line, what DuckDB would refuse with a confusing one (or try to download for)."""
    if path.is_dir():
        raise StoreError(f"{path}: is a directory; give a database file")
    if path.is_file():
        try:
            with path.open("rb") as handle:
                head = handle.read(16)
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the database: {exc.strerror or exc}") from exc
        if head == _SQLITE_MAGIC:
            raise StoreError(f"{path}: is a SQLite database, not a PersonaGap (DuckDB) one; give another --db file")
    if read_only:
        return
    folder = path.parent if str(path.parent) else Path(".")
    if folder.is_dir() and not os.access(folder, os.W_OK):
        # DuckDB writes a .wal file beside the database: an unwritable folder fails the commit, after the work.
        raise StoreError(f"{path}: cannot write here: the folder {folder} is read-only (DuckDB keeps a .wal file "
                         "beside the database); give a --db file in a writable folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise StoreError(f"{path}: the database file is read-only; give a writable --db file")
