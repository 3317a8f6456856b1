"""Reads and writes of routing (issue 23): per-item judge labels with confidences, and the stored routing decision.

The decision is one ``runs`` row of kind ``route`` per (stage, dataset) -- its id a hash of the two, so a rerun
replaces it (idempotent) and a route with another judge or target supersedes the last one. Its ``parameters`` hold
the judge, the target, the threshold and the routed item ids: the Annotate page's "routed to people" queue serves
exactly those ids, never a recomputation that could drift from what ``personagap route`` printed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

import duckdb
import pandas as pd

from personagap.analysis.comparable import comparable_judge_sql, judge_display_sql, reference_sql
from personagap.store.batch import git_sha as _git_sha
from personagap.store.batch import now
from personagap.store.writes import upsert

ROUTE_KIND = "route"
"""The ``runs.kind`` of a stored routing decision."""


def route_run_id(stage: str, dataset: str) -> str:
    """The id of the one routing decision of a stage and dataset (stable across reruns)."""
    return "route-" + hashlib.sha256(f"{stage}\x1f{dataset}".encode()).hexdigest()[:16]


def judges_with_labels(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> pd.DataFrame:
    """Every comparable judge of a dataset: ``judge`` (display name), ``rater``, ``condition``, ``labels``."""
    return cast(pd.DataFrame, con.execute(f"""
        SELECT {judge_display_sql('l')} AS judge, l.rater, l.condition, count(*) AS labels
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = ? AND i.dataset = ? AND {comparable_judge_sql('l')}
        GROUP BY ALL ORDER BY judge
    """, [stage, dataset]).df())


def route_items(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, rater: str,
                condition: str) -> pd.DataFrame:
    """One row per item of the dataset: ``item_id``, ``user_id``, the judge's ``label`` and ``confidence``, ``human``.

    The judge's label is None where it gave none or failed; its confidence NaN where none was stated; ``human`` is
    the blind reference (:func:`~personagap.analysis.comparable.reference_sql`), None where no person decided it.
    """
    return cast(pd.DataFrame, con.sql(f"""
        WITH {reference_sql("blind")},
        judged AS (
            SELECT l.item_id, l.label,
                   TRY_CAST(json_extract_string(l.meta, '$.confidence') AS DOUBLE) AS confidence,
                   json_extract_string(l.meta, '$.confidence_scale') AS confidence_scale
            FROM labels l
            WHERE l.rater = $rater AND l.condition = $condition AND {comparable_judge_sql('l')}
        )
        SELECT i.item_id, i.user_id, j.label,
               CASE WHEN isfinite(j.confidence) THEN j.confidence END AS confidence, j.confidence_scale, r.human
        FROM items i LEFT JOIN judged j USING (item_id) LEFT JOIN reference r USING (item_id)
        WHERE i.stage = $stage AND i.dataset = $dataset
        ORDER BY i.item_id
    """, params={"stage": stage, "dataset": dataset, "rater": rater, "condition": condition}).df())


def save_route(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, judge: str,
               parameters: dict[str, Any], routed: list[str]) -> str:
    """Store the routing decision (replacing the last one of this stage and dataset); returns its run id.

    Args:
        con: A writable connection.
        stage: Pipeline stage.
        dataset: Dataset.
        judge: The judge's display name.
        parameters: What was decided and why (target, threshold, ...), JSON-serialisable.
        routed: The item ids routed to people, in any order (stored sorted).
    """
    run_id = route_run_id(stage, dataset)
    stamp = now()
    upsert(con, "runs", [{
        "run_id": run_id, "kind": ROUTE_KIND, "source": f"route {stage}/{dataset}", "rater": judge,
        "judge_version": None, "git_sha": _git_sha(), "started_at": stamp, "finished_at": stamp,
        "status": "finished",
        "parameters": parameters | {"stage": stage, "dataset": dataset, "judge": judge, "routed": sorted(routed)}}])
    return run_id


def load_route(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> dict[str, Any] | None:
    """The stored routing decision of a stage and dataset (its parameters), or None."""
    rows = con.execute("SELECT CAST(parameters AS TEXT) FROM runs WHERE run_id = ? AND kind = ?",
                       [route_run_id(stage, dataset), ROUTE_KIND]).fetchall()
    if not rows or rows[0][0] is None:
        return None
    return cast(dict[str, Any], json.loads(rows[0][0]))
