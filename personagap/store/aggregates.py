"""Aggregate reads for reports: per-(dataset, judge, condition, user) counts that DuckDB builds.

Reports and ``diagnose`` compute their figures from these small tables instead of every stored label, so
their memory does not grow with the number of labels (issue 20). Which labels count is
:mod:`personagap.analysis.comparable`'s rule, used through its SQL predicates and its one reference query
(:func:`~personagap.analysis.comparable.reference_sql`), so the figures are those of the per-label path.
"""

from __future__ import annotations

from typing import cast

import duckdb
import pandas as pd

from personagap.analysis.comparable import (
    SHOWN_LLM_RATING,
    Reference,
    anchored_human_sql,
    blind_human_sql,
    comparable_judge_sql,
    reference_sql,
)

_JUDGE = comparable_judge_sql("l")

# One parsed label per (item, judge rater, kind, condition): the per-label path keeps the first of duplicates
# (drop_duplicates on item_id), which row is first being the store's row order either way.
_PARSED = f"""
    parsed AS (
        SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label, i.dataset, i.user_id
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = $stage AND {_JUDGE} AND l.label IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY l.item_id, l.rater, l.rater_kind, l.condition) = 1
    )"""


def _frame(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> pd.DataFrame:
    # Through Arrow: the same dtypes as .df() without building strings one Python object at a time.
    return cast(pd.DataFrame, con.sql(sql, params=params).to_arrow_table().combine_chunks().to_pandas())


def judge_label_counts(con: duckdb.DuckDBPyConnection, stage: str, which: Reference = "blind") -> pd.DataFrame:
    """Per (dataset, judge, condition, user, reference label, judge label) the number of items.

    One parsed comparable judge label per item and judge; ``human`` is the item's human reference
    (:func:`~personagap.analysis.comparable.reference_sql` of ``which``), missing where the item has none: those
    rows are the judge's unmatched items, the others its confusion counts.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        which: The blind reference (what judges are scored against) or the anchored one.

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human``, ``label``, ``n``.
    """
    return _frame(con, f"""
        WITH {reference_sql(which)}, {_PARSED}
        SELECT p.dataset, p.rater, p.rater_kind, p.condition, p.user_id, r.human, p.label, count(*) AS n
        FROM parsed p LEFT JOIN reference r USING (item_id)
        GROUP BY ALL
    """, {"stage": stage})


def reference_counts(con: duckdb.DuckDBPyConnection, stage: str, which: Reference = "blind") -> pd.DataFrame:
    """Per (dataset, user, reference label) the number of items with that human reference.

    Returns:
        Columns ``dataset``, ``user_id``, ``human``, ``n``.
    """
    return _frame(con, f"""
        WITH {reference_sql(which)}
        SELECT i.dataset, i.user_id, r.human, count(*) AS n
        FROM reference r JOIN items i USING (item_id)
        WHERE i.stage = $stage
        GROUP BY ALL
    """, {"stage": stage})


def judge_failures(con: duckdb.DuckDBPyConnection, stage: str) -> pd.DataFrame:
    """Per (dataset, judge, condition, error text) the number of unparsed comparable judge answers.

    The error text is returned whole (grouped), so that the caller's one rule names the reason.

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``error``, ``n``.
    """
    return _frame(con, f"""
        SELECT i.dataset, l.rater, l.rater_kind, l.condition, l.error, count(*) AS n
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = $stage AND {_JUDGE} AND l.label IS NULL
        GROUP BY ALL
    """, {"stage": stage})


def multi_human_labels(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, *,
                       min_humans: int) -> pd.DataFrame:
    """The labels the alternative-annotator test reads: every label on items several individual humans labelled.

    Items with at least ``min_humans`` distinct individual human raters (blind, or anchored: the test runs on
    each apart), plus, for every judge, the item it labelled that has the most such humans of each protocol:
    on it alone the test says why it does not apply to that judge ("at most N per item"). Nothing else of the
    dataset is read.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        dataset: Dataset key.
        min_humans: Individual humans an item needs (the test's minimum per item).

    Returns:
        Columns as :func:`personagap.store.load_labels` (``item_id``, ``rater``, ``rater_kind``, ``condition``,
        ``label``, ``error``, ``dataset``, ``user_id``).
    """
    person = f"l.rater_kind = 'human' AND l.label IS NOT NULL AND l.condition <> '{SHOWN_LLM_RATING}'"
    return _frame(con, f"""
        WITH per_item AS (
            SELECT l.item_id,
                   count(DISTINCT l.rater) FILTER (WHERE {blind_human_sql('l')} AND {person}) AS blind,
                   count(DISTINCT l.rater) FILTER (WHERE {anchored_human_sql('l')} AND {person}) AS anchored
            FROM labels l JOIN items i USING (item_id)
            WHERE i.stage = $stage AND i.dataset = $dataset
            GROUP BY l.item_id
        ),
        judged AS (
            SELECT l.rater, l.rater_kind, l.condition, l.item_id,
                   coalesce(p.blind, 0) AS blind, coalesce(p.anchored, 0) AS anchored
            FROM labels l JOIN items i USING (item_id) LEFT JOIN per_item p USING (item_id)
            WHERE i.stage = $stage AND i.dataset = $dataset AND {_JUDGE} AND l.label IS NOT NULL
        ),
        keep AS (
            SELECT item_id FROM per_item WHERE blind >= $min OR anchored >= $min
            UNION SELECT arg_max(item_id, blind) FROM judged GROUP BY rater, rater_kind, condition
            UNION SELECT arg_max(item_id, anchored) FROM judged GROUP BY rater, rater_kind, condition
        )
        SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label, l.error, i.dataset, i.user_id
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = $stage AND i.dataset = $dataset AND l.item_id IN (SELECT item_id FROM keep)
    """, {"stage": stage, "dataset": dataset, "min": min_humans})


def stage_datasets(con: duckdb.DuckDBPyConnection, stage: str) -> list[str]:
    """The datasets of ``stage`` that hold at least one label, sorted."""
    rows = con.execute("""
        SELECT DISTINCT i.dataset FROM items i
        WHERE i.stage = $stage AND EXISTS (SELECT 1 FROM labels l WHERE l.item_id = i.item_id)
        ORDER BY 1
    """, {"stage": stage}).fetchall()
    return [str(r[0]) for r in rows]
