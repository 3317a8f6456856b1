"""The Parquet exchange binds what the user gives (paths, dataset names) as parameters (issue 20, defect 9).

Every query DuckDB runs during an export and a merge is logged (DuckDB's ``log_query_path``): no
folder, database or dataset name may appear in the SQL text, and the hostile names round-trip intact.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from personagap.exchange import export_store, import_export
from personagap.records import Item, Label, Run
from personagap.store import ImportBatch, write_batch

HOSTILE = "it's'); DROP TABLE labels; --"


def _batch() -> ImportBatch:
    batch = ImportBatch()
    batch.runs.append(Run(run_id="import-x", kind="import", source=HOSTILE, started_at=datetime(2026, 1, 1)))
    for dataset in (HOSTILE, "plain"):
        for n in range(2):
            iid = f"{dataset}-{n}"
            batch.items[iid] = Item(item_id=iid, dataset=dataset, stage="relevance", user_id="u", attribute=HOSTILE)
            batch.labels.append(Label(item_id=iid, rater=HOSTILE, rater_kind="human", label="yes", run_id="import-x"))
    batch.meta[f"origin:{HOSTILE}"] = "real"
    return batch


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every DuckDB connection opened from here on logs each query's text to a file in the returned folder."""
    logs = tmp_path / "queries"
    logs.mkdir()
    connect = duckdb.connect

    def logging_connect(*args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        con = connect(*args, **kwargs)
        # One file per connection: setting the path starts the file afresh.
        con.execute("SET log_query_path = ?", [str(logs / f"{len(list(logs.iterdir()))}.log")])
        return con

    monkeypatch.setattr(duckdb, "connect", logging_connect)
    return logs


def _rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_export_and_merge_bind_paths_and_names(tmp_path: Path, logged: Path) -> None:
    folder = tmp_path / HOSTILE
    folder.mkdir()
    db = folder / "store.duckdb"
    write_batch(db, _batch())
    out = folder / "export"
    merged = folder / "merged.duckdb"

    export_store(db, out)
    import_export(out, merged)

    text = "".join(p.read_text(encoding="utf-8") for p in logged.iterdir())
    assert "COPY" in text and "read_parquet" in text  # the log saw the export and the merge
    assert HOSTILE not in text and "it''s" not in text
    for table in ("items", "labels", "meta", "runs"):
        assert sorted(_rows(merged, f"SELECT * FROM {table}")) == sorted(_rows(db, f"SELECT * FROM {table}")), table
    assert _rows(merged, "SELECT DISTINCT dataset FROM items ORDER BY 1") == [(HOSTILE,), ("plain",)]
