"""Reads of the store."""

from __future__ import annotations

import duckdb
import pandas as pd


def load_labels(con: duckdb.DuckDBPyConnection, *, dataset: str | None = None, stage: str | None = None,
                condition: str | None = None) -> pd.DataFrame:
    """Return labels joined with their items, filtered by bound parameters.

    Args:
        con: Open connection.
        dataset: Keep only this dataset.
        stage: Keep only this stage.
        condition: Keep only this condition.

    Returns:
        One row per label with the item's dataset, stage, user, prompt and attribute.
    """
    where, params = ["TRUE"], []
    for col, value in (("i.dataset", dataset), ("i.stage", stage), ("l.condition", condition)):
        if value is not None:
            where.append(f"{col} = ?")
            params.append(value)
    sql = f"""
        SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label, l.raw, l.reason, l.error, l.run_id, l.meta,
               i.dataset, i.stage, i.user_id, i.prompt_index, i.attribute, i.position
        FROM labels l JOIN items i USING (item_id)
        WHERE {' AND '.join(where)}
    """
    return con.execute(sql, params).df()


def running_runs(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(run id, parameters as JSON text) of every run whose stored status is 'running'."""
    rows = con.execute("SELECT run_id, CAST(parameters AS TEXT) FROM runs WHERE status = 'running'").fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]
