"""Every write: upserts by natural key, an import batch in one transaction, removal of what a re-import lost."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel

from personagap.records import Label, LabelRow
from personagap.store.batch import ImportBatch, TableCounts, WriteSummary, columns_table, rows_table
from personagap.store.connection import opened
from personagap.store.errors import DuplicateKeyError, StoreError
from personagap.store.errors import first_line as _first_line
from personagap.store.schema import TABLES

RELEASE_KEY = "release"
"""Key of an import run's ``parameters`` holding its file's release identity (``recenter:stage2/...``): what
names the run, wherever the release lies (``human_data/_jsonl.Release``)."""


def upsert(con: duckdb.DuckDBPyConnection, table: str,
           rows: Sequence[dict[str, Any]] | pd.DataFrame | pa.Table) -> int:
    """Insert rows, replacing any row with the same natural key.

    Runs inside whatever transaction the caller holds.

    Args:
        con: Open writable connection.
        table: One of :data:`TABLES`.
        rows: Dicts, a DataFrame or an Arrow table with exactly the table's columns.

    Returns:
        The number of rows written.
    """
    counts = upsert_counted(con, table, rows)
    return counts.inserted + counts.updated + counts.unchanged


def upsert_counted(con: duckdb.DuckDBPyConnection, table: str,
                   rows: Sequence[dict[str, Any]] | pd.DataFrame | pa.Table | str,
                   ignore: frozenset[str] = frozenset(), *, keys_checked: bool = False) -> TableCounts:
    """:func:`upsert`, saying how many rows were inserted, updated and left unchanged.

    Args:
        con: Open writable connection.
        table: One of :data:`TABLES`.
        rows: Dicts, a DataFrame or an Arrow table with exactly the table's columns, or the name of a
            relation on ``con`` giving them (rows staged in SQL never pass through Python; see :func:`attached`).
        ignore: Columns whose difference alone does not make a row "updated" (e.g. an import
            run's timestamps: an unchanged re-import rewrites nothing).
        keys_checked: The caller has already proved that no key occurs twice in ``rows`` (the generic
            label importer does, to name the offending line); otherwise it is checked here.

    Raises:
        DuplicateKeyError: ``rows`` holds a key twice (nothing is written).
    """
    columns, key = TABLES[table]
    if isinstance(rows, str):
        view, n = rows, None  # counted only when needed: counting a staged join runs it
    else:
        frame = rows if isinstance(rows, pd.DataFrame | pa.Table) else rows_table(table, rows)
        n = frame.num_rows if isinstance(frame, pa.Table) else len(frame)
        if n == 0:
            return TableCounts()
        view = f"_incoming_{table}"
        con.register(view, frame)
    try:
        if not keys_checked:
            # Items and labels have no key index (see _ITEMS_COLUMNS): their keys are unique because of this.
            twice = con.execute(f"SELECT {', '.join(key)} FROM {view} GROUP BY ALL HAVING count(*) > 1 "
                                "LIMIT 1").fetchall()
            if twice:
                raise DuplicateKeyError(f"{table}: the batch holds key {twice[0]!r} twice; nothing was written")
        # Only new or changed rows are touched: they are deleted by key and inserted again. That is
        # INSERT ... ON CONFLICT DO UPDATE's result, ~3x faster at 10^6 fresh rows (DuckDB 2.0), and an
        # unchanged re-import rewrites nothing. Atomic inside the caller's transaction.
        col_list = ", ".join(columns)
        if not con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchall()[0][0]:
            written = con.execute(f"INSERT INTO {table} ({col_list}) SELECT {col_list} FROM {view}").fetchall()
            return TableCounts(inserted=int(written[0][0]))
        if n is None:
            n = int(con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0])
        on = " AND ".join(f"t.{k} = v.{k}" for k in key)
        differs = " OR ".join(f"t.{c} IS DISTINCT FROM v.{c}" for c in columns
                              if c not in key and c not in ignore) or "FALSE"
        changed = f"_changed_{table}"
        # fetchall: DuckDB 2 refuses further work on a connection until a result is consumed.
        con.execute(f"CREATE OR REPLACE TEMP TABLE {changed} AS SELECT v.*, t.{key[0]} IS NULL AS _is_new "
                    f"FROM {view} v LEFT JOIN {table} t ON {on} WHERE t.{key[0]} IS NULL OR {differs}").fetchall()
        inserted, total = con.execute(f"SELECT count(*) FILTER (WHERE _is_new), count(*) FROM {changed}").fetchall()[0]
        match = " AND ".join(f"{table}.{k} = {changed}.{k}" for k in key)
        con.execute(f"DELETE FROM {table} USING {changed} WHERE {match}").fetchall()
        con.execute(f"INSERT INTO {table} ({col_list}) SELECT {col_list} FROM {changed}").fetchall()
        con.execute(f"DROP TABLE {changed}").fetchall()
    finally:
        if not isinstance(rows, str):
            con.unregister(view)
    return TableCounts(inserted=int(inserted), updated=int(total - inserted), unchanged=int(n - total))


IMPORT_RUN_VOLATILE = frozenset({"started_at", "finished_at", "git_sha"})
"""Run columns that differ on every import of the same file: alone, they do not make the run 'updated'."""


def write_batch(path: str | Path, batch: ImportBatch) -> WriteSummary:
    """Write an import batch to the store in a single transaction, replacing what its files wrote before.

    Either every row lands or none does: a failure rolls the whole batch back. For each run of
    ``batch.runs`` (one per imported file; its id derives from the file's path), labels that run
    wrote earlier and the batch no longer holds are removed in the same transaction, so a
    re-import leaves exactly what the files now hold. Items that only those labels referenced,
    and then the prompts and users that only those items referenced, are removed with them.

    Args:
        path: The DuckDB file (created if missing).
        batch: The validated rows.

    Returns:
        Rows inserted / updated / removed / unchanged per table (also kept as ``batch.written``).

    Raises:
        StoreError: The file cannot be opened or written (nothing is changed).
    """
    summary = WriteSummary()
    with opened(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            t = summary.tables
            t["runs"] = upsert_counted(con, "runs", [r.model_dump() for r in batch.runs], IMPORT_RUN_VOLATILE)
            t["users"] = upsert_counted(con, "users", [u.model_dump() for u in batch.users.values()])
            t["attributes"] = upsert_counted(con, "attributes", [a.model_dump() for a in batch.attributes.values()])
            t["prompts"] = upsert_counted(con, "prompts", [p.model_dump() for p in batch.prompts.values()])
            items = _records_table("items", list(batch.items.values()))
            t["items"] = upsert_counted(con, "items", items)
            bulk = batch.label_columns.columns
            labels = columns_table("labels", {
                c: [getattr(lab, c) for lab in batch.labels] + bulk[c] for c in TABLES["labels"][0]})
            t["labels"] = upsert_counted(con, "labels", labels)
            gone, superseded = _gone_runs(con, batch), _superseded_runs(con, batch)
            dropped = [g for g, _ in gone] + superseded
            remove_stale(con, summary, [r.run_id for r in batch.runs] + dropped, labels, items, _owned_table(batch))
            if dropped:
                con.execute("DELETE FROM runs WHERE run_id IN (SELECT unnest(?))", [dropped]).fetchall()
                summary.tables["runs"] = replace(summary["runs"], removed=len(dropped))
                summary.gone = [source for _, source in gone]
            set_meta(con, batch.meta)
            try:
                con.execute("COMMIT")
            except (duckdb.TransactionException, duckdb.IOException) as exc:
                # E.g. the .wal file cannot be created: the transaction is lost, the file unchanged.
                raise StoreError(f"{path}: cannot write the database ({_first_line(exc)}); nothing was "
                                 "changed") from exc
        except BaseException:
            # A failed ROLLBACK (e.g. the folder became unwritable) must not hide the first error.
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
    batch.written = summary
    return summary


def _gone_runs(con: duckdb.DuckDBPyConnection, batch: ImportBatch) -> list[tuple[str, str]]:
    """(run id, source) of earlier imports of files deleted from a release (or folder) this batch reads completely.

    A release is matched by its identity scope, wherever it was imported from; a folder by its real path.
    """
    if not batch.folders and not batch.releases:
        return []
    prefixes = [f.rstrip("/") + "/" for f in batch.folders]
    rows = con.execute(f"""
        SELECT run_id, source FROM runs
        WHERE kind = 'import' AND run_id NOT IN (SELECT unnest(?))
          AND (list_bool_or([starts_with(json_extract_string(parameters, '$.path'), p) FOR p IN ?])
               OR list_bool_or([starts_with(json_extract_string(parameters, '$.{RELEASE_KEY}'), s) FOR s IN ?]))
        ORDER BY source
    """, [[r.run_id for r in batch.runs], prefixes, batch.releases]).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _superseded_runs(con: duckdb.DuckDBPyConnection, batch: ImportBatch) -> list[str]:
    """Runs written before releases had identities (named by absolute path) of the files this batch imports.

    Such a run is the same file of the same release when its path ends with the file's place in the release
    (``/stage2/llm_relevance/gpt-5.4.jsonl``) and it has the same rater and adapter: the batch replaces it, so
    a store written by an older PersonaGap follows a re-import from a new folder too.
    """
    named = [(r.run_id, str(r.parameters[RELEASE_KEY]).partition(":")[2], r.rater, r.parameters.get("adapter"))
             for r in batch.runs if r.parameters and RELEASE_KEY in r.parameters]
    if not named:
        return []
    rows = con.execute(f"""
        SELECT DISTINCT o.run_id FROM runs o, (SELECT unnest(?) AS run_id, unnest(?) AS file, unnest(?) AS rater,
                                                      unnest(?) AS adapter) n
        WHERE o.kind = 'import' AND o.run_id <> n.run_id
          AND json_extract_string(o.parameters, '$.{RELEASE_KEY}') IS NULL
          AND ends_with(json_extract_string(o.parameters, '$.path'), '/' || n.file)
          AND o.rater IS NOT DISTINCT FROM n.rater
          AND json_extract_string(o.parameters, '$.adapter') IS NOT DISTINCT FROM n.adapter
          AND o.run_id NOT IN (SELECT unnest(?))
        ORDER BY o.run_id
    """, [[n[0] for n in named], [n[1] for n in named], [n[2] for n in named], [n[3] for n in named],
          [r.run_id for r in batch.runs]]).fetchall()
    return [str(r[0]) for r in rows]


def set_run_status(con: duckdb.DuckDBPyConnection, run_ids: list[str], status: str) -> None:
    """Set the status of runs ``run_ids`` (within the caller's connection)."""
    if run_ids:
        con.execute("UPDATE runs SET status = ? WHERE run_id IN (SELECT unnest(?))", [status, run_ids]).fetchall()


def set_meta(con: duckdb.DuckDBPyConnection, values: dict[str, str]) -> None:
    """Insert or replace meta entries, bound as parameters (within the caller's transaction)."""
    if values:
        con.execute("INSERT INTO meta SELECT unnest(?), unnest(?) ON CONFLICT (key) DO UPDATE SET value = "
                    "excluded.value", [list(values), list(values.values())]).fetchall()


def _owned_table(batch: ImportBatch) -> pa.Table:
    runs = [r for r, ids in batch.owned.items() for _ in ids]
    items = [i for ids in batch.owned.values() for i in ids]
    return pa.table({"run_id": pa.array(runs, pa.string()), "item_id": pa.array(items, pa.string())})


def remove_stale(con: duckdb.DuckDBPyConnection, summary: WriteSummary, run_ids: list[str],
                 labels: pa.Table | str, items: pa.Table | str, owned: pa.Table | None = None) -> None:
    """Delete what the batch's runs wrote before and the batch no longer holds (inside the caller's transaction).

    Labels of ``run_ids`` whose key is not in ``labels`` go first. Then an item goes if this batch
    does not hold it, no label refers to it, and no file claims it any more (``import_items``); it is
    considered only if a removed label referred to it or one of these runs claimed it before. Prompts
    and users that only removed items referred to go last.

    Args:
        con: Writable connection inside a transaction.
        summary: Gets the removed counts.
        run_ids: The runs (files) being re-imported.
        labels: The batch's labels (at least item_id, rater, condition, and run_id when the batch has it),
            as Arrow or the name of a relation on ``con``.
        items: The batch's items (at least item_id), likewise.
        owned: (run_id, item_id) the files of ``run_ids`` mention now; None leaves ``import_items`` alone.
    """
    if not run_ids:
        return
    if isinstance(labels, str):
        con.execute(f"CREATE OR REPLACE TEMP VIEW _batch_labels AS SELECT item_id, rater, condition FROM {labels}")
        ours = con.execute(f"SELECT count(*) FROM {labels} WHERE run_id IN (SELECT unnest(?))",
                           [run_ids]).fetchall()[0][0]
    else:
        con.register("_batch_labels", labels.select(["item_id", "rater", "condition"]))
        ours = pc.sum(pc.is_in(labels["run_id"], value_set=pa.array(run_ids, pa.string()))).as_py() or 0 \
            if "run_id" in labels.column_names else 0
    if isinstance(items, str):
        con.execute(f"CREATE OR REPLACE TEMP VIEW _batch_items AS SELECT item_id FROM {items}")
    else:
        con.register("_batch_items", items.select(["item_id"]))
    try:
        touched: set[str] = set()
        # After the upsert every batch label of these runs is stored under its run: when the runs hold no
        # more labels than the batch brings, nothing is stale (an unchanged re-import skips the anti-join).
        stored = con.execute("SELECT count(*) FROM labels WHERE run_id IN (SELECT unnest(?))",
                             [run_ids]).fetchall()[0][0]
        if stored > ours:
            removed = con.execute("""
                DELETE FROM labels l WHERE l.run_id IN (SELECT unnest(?))
                  AND NOT EXISTS (SELECT 1 FROM _batch_labels b
                                  WHERE b.item_id = l.item_id AND b.rater = l.rater AND b.condition = l.condition)
                RETURNING l.item_id
            """, [run_ids]).fetchall()
            touched.update(r[0] for r in removed)
            summary.tables["labels"] = replace(summary["labels"], removed=len(removed))
        if owned is not None:
            touched.update(_replace_owned(con, run_ids, owned))
        if touched:
            _remove_items(con, summary, touched)
    finally:
        for name, given in (("_batch_labels", labels), ("_batch_items", items)):
            if isinstance(given, str):
                con.execute(f"DROP VIEW IF EXISTS {name}")
            else:
                con.unregister(name)


def _replace_owned(con: duckdb.DuckDBPyConnection, run_ids: list[str], owned: pa.Table) -> set[str]:
    """Make ``import_items`` of ``run_ids`` equal ``owned``, touching only rows that differ; returns items let go."""
    con.register("_owned", owned)
    try:
        dropped = con.execute("""
            DELETE FROM import_items o WHERE o.run_id IN (SELECT unnest(?))
              AND NOT EXISTS (SELECT 1 FROM _owned n WHERE n.run_id = o.run_id AND n.item_id = o.item_id)
            RETURNING o.item_id
        """, [run_ids]).fetchall()
        con.execute("""
            INSERT INTO import_items SELECT DISTINCT n.run_id, n.item_id FROM _owned n
            WHERE NOT EXISTS (SELECT 1 FROM import_items o WHERE o.run_id = n.run_id AND o.item_id = n.item_id)
        """).fetchall()
    finally:
        con.unregister("_owned")
    return {r[0] for r in dropped}




def _remove_items(con: duckdb.DuckDBPyConnection, summary: WriteSummary, touched: set[str]) -> None:
    con.register("_touched", pa.table({"item_id": pa.array(sorted(touched), pa.string())}))
    # An item is removed only when nothing refers to it any more: not this batch, not a label, not a file.
    gone = con.execute("""
        DELETE FROM items i WHERE i.item_id IN (SELECT item_id FROM _touched)
          AND i.item_id NOT IN (SELECT item_id FROM _batch_items)
          AND NOT EXISTS (SELECT 1 FROM labels l WHERE l.item_id = i.item_id)
          AND NOT EXISTS (SELECT 1 FROM import_items o WHERE o.item_id = i.item_id)
        RETURNING i.dataset, i.user_id, i.prompt_index
    """).fetchall()
    con.unregister("_touched")
    if not gone:
        return
    summary.tables["items"] = replace(summary["items"], removed=len(gone))
    con.register("_gone", pa.table({"dataset": pa.array([g[0] for g in gone], pa.string()),
                                    "user_id": pa.array([g[1] for g in gone], pa.string()),
                                    "prompt_index": pa.array([g[2] for g in gone], pa.int64())}))
    try:
        prompts = con.execute("""
            DELETE FROM prompts p WHERE EXISTS (SELECT 1 FROM _gone g WHERE g.dataset = p.dataset
                                                AND g.user_id = p.user_id AND g.prompt_index = p.prompt_index)
              AND NOT EXISTS (SELECT 1 FROM items i WHERE i.dataset = p.dataset AND i.user_id = p.user_id
                              AND i.prompt_index = p.prompt_index)
            RETURNING 1
        """).fetchall()
        users = con.execute("""
            DELETE FROM users u WHERE EXISTS (SELECT 1 FROM _gone g WHERE g.dataset = u.dataset
                                              AND g.user_id = u.user_id)
              AND NOT EXISTS (SELECT 1 FROM items i WHERE i.dataset = u.dataset AND i.user_id = u.user_id)
              AND NOT EXISTS (SELECT 1 FROM prompts p WHERE p.dataset = u.dataset AND p.user_id = u.user_id)
              AND NOT EXISTS (SELECT 1 FROM attributes a WHERE a.dataset = u.dataset AND a.user_id = u.user_id)
            RETURNING 1
        """).fetchall()
    finally:
        con.unregister("_gone")
    if prompts:
        summary.tables["prompts"] = replace(summary["prompts"], removed=len(prompts))
    if users:
        summary.tables["users"] = replace(summary["users"], removed=len(users))


def _records_table(table: str, records: Sequence[BaseModel | LabelRow]) -> pa.Table:
    """Column-wise table of typed records (model_dump per row costs seconds at 10^5-10^6 rows)."""
    return columns_table(table, {c: [getattr(r, c) for r in records] for c in TABLES[table][0]})


def write_labels(con: duckdb.DuckDBPyConnection, labels: Sequence[Label | LabelRow]) -> int:
    """Upsert labels within the caller's transaction."""
    return upsert(con, "labels", _records_table("labels", labels))
