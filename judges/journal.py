"""A run's answer journal: every paid answer is on disk before its call's slot is reused.

The runner writes labels to DuckDB in batches (about once a second), so that other processes -- the
dashboard, a report -- can open the file between batches. Between two batches, answers exist only in memory.
To lose no paid answer when the process is killed or the database stays locked, each answer is first
appended to a small JSON-lines file beside the database (``<db>.<run_id>.journal``) the moment it arrives:
one line holds the label rows and the cache row the batch will write. Killed with SIGKILL, a run therefore
loses only the calls still in flight.

The journal is deleted once all of its answers are in the database. A journal left behind (its process
died) is replayed into the database by the next run on it (:func:`recover_journals`), so its answers are
stored and cached and that run asks again only for what is missing. The journal holds answers, never the
API key. It is flushed to the operating system after every line (enough to survive the process being
killed; surviving a power cut would need an fsync per answer).
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import duckdb
import orjson

from personagap.liveness import PROCESS_KEY, process_alive
from personagap.records import Label
from personagap.store import now, upsert, write_labels
from personagap.store.atomic import transaction
from personagap.store.judge_answers import run_parameters

SUFFIX = ".journal"


def journal_path(db: str | Path, run_id: str) -> Path:
    """Where the journal of run ``run_id`` on database ``db`` lives."""
    db = Path(db)
    return db.with_name(f"{db.name}.{run_id}{SUFFIX}")


class Journal:
    """Append-only journal of one run's answers (created on the first answer)."""

    def __init__(self, db: str | Path, run_id: str) -> None:
        """Name the journal of ``run_id`` beside ``db``; nothing is created until :meth:`append`."""
        self.path = journal_path(db, run_id)
        self._file: IO[bytes] | None = None
        self.lines = 0

    def append(self, labels: list[Label], cache_row: dict[str, Any] | None) -> None:
        """Append one answer (its label rows and its cache row) and hand it to the operating system.

        Raises:
            OSError: The journal cannot be written (disk full, read-only folder).
        """
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 -- kept open for the whole run, closed in close()
        entry = {"labels": [lab.model_dump() for lab in labels], "cache": _without_time(cache_row)}
        self._file.write(orjson.dumps(entry, default=str) + b"\n")
        self._file.flush()
        self.lines += 1

    def close(self, *, delete: bool) -> None:
        """Close the file; delete it when every answer in it is stored in the database."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if delete:
            self.path.unlink(missing_ok=True)


def _without_time(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {k: v for k, v in row.items() if k != "created_at"}


def read_journal(path: Path) -> Iterator[tuple[list[Label], dict[str, Any] | None]]:
    """The answers of a journal file. A last line cut short by the kill is skipped (its call was in flight)."""
    with open(path, "rb") as f:
        for line in f:
            try:
                entry = orjson.loads(line)
                labels = [Label(**d) for d in entry["labels"]]
                cache = entry["cache"]
                if cache is not None and not isinstance(cache, dict):
                    raise TypeError("cache row")
            except (ValueError, TypeError, KeyError):  # cut short (orjson's and pydantic's errors are ValueErrors)
                continue
            yield labels, None if cache is None else cache | {"created_at": now()}


def recover_journals(con: duckdb.DuckDBPyConnection, db: str | Path) -> dict[str, int]:
    """Store the answers of journals whose run's process has died, then delete those journals.

    Journals of runs still running (another process on this host) are left alone, as are journals whose
    run cannot be told alive or dead (run on another host). Each journal is stored in one transaction.

    Args:
        con: A writable connection to ``db``.
        db: The database file (journals live beside it).

    Returns:
        Run id -> number of answers recovered from its journal.
    """
    db = Path(db)
    found: dict[str, int] = {}
    # Run ids start with 'judge-': a database named like '<db>.x' keeps its own journals apart.
    for name in sorted(glob.glob(glob.escape(str(db)) + ".judge-*" + SUFFIX)):
        path = Path(name)
        run_id = path.name[len(db.name) + 1:-len(SUFFIX)]
        stored = run_parameters(con, run_id)
        params = orjson.loads(stored) if stored else {}
        if process_alive(params.get(PROCESS_KEY)) is not False:
            continue
        labels: list[Label] = []
        cache_rows: list[dict[str, Any]] = []
        answers = 0
        for answer_labels, cache_row in read_journal(path):
            answers += 1
            labels.extend(answer_labels)
            if cache_row is not None:
                cache_rows.append(cache_row)
        store_answers(con, labels, cache_rows)
        path.unlink(missing_ok=True)
        found[run_id] = answers
    return found


def store_answers(con: duckdb.DuckDBPyConnection, labels: list[Label], cache_rows: list[dict[str, Any]]) -> None:
    """Write answers' labels and cache rows in one transaction (all or nothing)."""
    # Two tasks with the same inputs (PRISM lists some comparisons in two files) share one answer key: one row.
    cache_rows = list({r["key"]: r for r in cache_rows}.values())
    with transaction(con):
        write_labels(con, labels)
        upsert(con, "judge_cache", cache_rows)
