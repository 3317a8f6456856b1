"""Aggregate reads of judges' confidences: per (dataset, judge, user, confidence value) counts that DuckDB builds.

A judge label's confidence lives in ``labels.meta`` (no schema change): ``confidence`` (a number on the judge's own
scale) and ``confidence_scale`` (``"1-100"``, ``"0-100"``, ``"probability"``, ...). A confidence that did not parse
is ``confidence_error`` beside a label that still stands. Which labels count is
:mod:`personagap.analysis.comparable`'s rule (its SQL predicates and its one reference query), so calibration and
coverage curves score the same labels against the same humans as every report.
"""

from __future__ import annotations

from typing import cast

import duckdb
import pandas as pd

from personagap.analysis.comparable import comparable_judge_sql, reference_sql

_JUDGE = comparable_judge_sql("l")


_COUNTS_SQL = f"""
        WITH {reference_sql("blind")},
        staged AS (
            SELECT item_id, dataset, user_id FROM items
            WHERE stage = $stage AND ($dataset IS NULL OR dataset = $dataset)
        ),
        judged AS (
            SELECT s.dataset, l.rater, l.rater_kind, l.condition, s.user_id, l.item_id, l.label,
                   TRY_CAST(json_extract_string(l.meta, '$.confidence') AS DOUBLE) AS confidence,
                   json_extract_string(l.meta, '$.confidence_scale') AS confidence_scale
            FROM labels l JOIN staged s USING (item_id)
            WHERE {_JUDGE} AND l.label IS NOT NULL AND l.meta IS NOT NULL
        )
        SELECT j.dataset, j.rater, j.rater_kind, j.condition, coalesce(j.confidence_scale, '') AS confidence_scale,
               j.user_id, j.confidence, r.human, j.label, count(*) AS n
        FROM judged j JOIN reference r USING (item_id)
        WHERE j.confidence IS NOT NULL AND isfinite(j.confidence)
        GROUP BY ALL
"""


def confidence_counts(con: duckdb.DuckDBPyConnection, stage: str, dataset: str | None = None) -> pd.DataFrame:
    """Per (dataset, judge, condition, user, confidence value, reference label, judge label), the number of items.

    Only parsed comparable judge labels that carry a numeric ``confidence`` and whose item has a blind human
    reference (:func:`~personagap.analysis.comparable.reference_sql`). Rows grow with the distinct confidences a
    judge states per user, never with its labels: verbal scales have at most a hundred values, and confidences
    from probabilities are rounded where they are captured (:data:`personagap.confidence.PROBABILITY_DIGITS`).

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        dataset: Only this dataset (None: every dataset of the stage).

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``confidence_scale``, ``user_id``,
        ``confidence``, ``human``, ``label``, ``n``.
    """
    return _rows(con, _COUNTS_SQL + "ORDER BY ALL", {"stage": stage, "dataset": dataset})


_JUDGE_COUNTS = "_pg_confidence_counts"
COUNTS_MEMORY_LIMIT = "1GB"
"""DuckDB's memory limit while it counts (:func:`confidence_counts_by_judge`)."""


def confidence_counts_by_judge(con: duckdb.DuckDBPyConnection, stage: str,
                               dataset: str | None = None) -> list[tuple[tuple[str, str, str, str], pd.DataFrame]]:
    """:func:`confidence_counts`'s rows one frame per (dataset, rater, rater_kind, condition), in sorted order.

    The same rows in the same order as that frame grouped by the four keys (``groupby(sort=True)``, so a key with a
    missing part is left out as pandas leaves it out). The counts are kept in a temporary table and read into
    pandas a judge at a time: reading the whole result at once held ~4.7 GB at 10^7 labels (5 * 10^6 count rows),
    far more than the frames themselves.
    """
    params = {"stage": stage, "dataset": dataset}
    # DuckDB takes up to 80% of the machine's memory for the aggregate unless told otherwise; under a limit it
    # spills to disk (the store's connections never set one: personagap/store/connection.py).
    con.execute(f"SET memory_limit = '{COUNTS_MEMORY_LIMIT}'")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_JUDGE_COUNTS} AS {_COUNTS_SQL}", params)
        keys = con.execute(f"SELECT DISTINCT dataset, rater, rater_kind, condition FROM {_JUDGE_COUNTS} "
                           "WHERE dataset IS NOT NULL AND rater IS NOT NULL AND rater_kind IS NOT NULL "
                           "AND condition IS NOT NULL ORDER BY ALL").fetchall()
        out = []
        for ds, rater, kind, condition in keys:
            rows = _rows(con, f"SELECT * FROM {_JUDGE_COUNTS} WHERE dataset = $ds AND rater = $rater "
                              "AND rater_kind = $kind AND condition = $condition ORDER BY ALL",
                         {"ds": ds, "rater": rater, "kind": kind, "condition": condition})
            out.append(((str(ds), str(rater), str(kind), str(condition)), rows))
        return out
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_JUDGE_COUNTS}")
        con.execute("RESET memory_limit")


def any_confidence(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether any label in the store states a confidence (or a confidence that failed to parse).

    A cheap scan of ``labels.meta`` that spares the two per-stage counts below (each joins every judge label with
    its item and the blind reference: about 4 s at 10^7 labels) on the common store where no judge states one.
    """
    # Every key written beside a confidence starts with '"confidence' (confidence, confidence_scale,
    # confidence_error), so a label this misses has none of them.
    rows = con.execute("SELECT EXISTS (SELECT 1 FROM labels WHERE meta IS NOT NULL "
                       """AND contains(CAST(meta AS VARCHAR), '"confidence'))""").fetchall()
    return bool(rows[0][0])


def confidence_gaps(con: duckdb.DuckDBPyConnection, stage: str, dataset: str | None = None) -> pd.DataFrame:
    """Per (dataset, judge, condition), parsed labels with and without a usable confidence, and confidence failures.

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``labels`` (parsed labels),
        ``with_confidence`` and ``confidence_failures`` (a stated confidence that did not parse; the label stands).
    """
    return _rows(con, f"""
        WITH judged AS (
            SELECT i.dataset, l.rater, l.rater_kind, l.condition,
                   TRY_CAST(json_extract_string(l.meta, '$.confidence') AS DOUBLE) AS confidence,
                   json_extract_string(l.meta, '$.confidence_error') AS confidence_error
            FROM labels l JOIN items i USING (item_id)
            WHERE i.stage = $stage AND ($dataset IS NULL OR i.dataset = $dataset) AND {_JUDGE}
              AND l.label IS NOT NULL
        )
        SELECT dataset, rater, rater_kind, condition, count(*) AS labels,
               count(*) FILTER (WHERE confidence IS NOT NULL AND isfinite(confidence)) AS with_confidence,
               count(*) FILTER (WHERE confidence_error IS NOT NULL) AS confidence_failures
        FROM judged
        GROUP BY ALL
        ORDER BY ALL
    """, {"stage": stage, "dataset": dataset})


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> pd.DataFrame:
    return cast(pd.DataFrame, con.sql(sql, params=params).df())
