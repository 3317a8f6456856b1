"""The SQL of the dashboard's Annotate page (:mod:`personagap.dashboard.annotate`).

Its queue's inputs, what a person has labelled, the reveal, and the one transaction that writes spooled labels.
Which judge labels count is :mod:`personagap.analysis.comparable`'s rule. Every filter is a bound parameter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import cast

import duckdb
import numpy as np
import pandas as pd

from personagap.analysis.comparable import comparable_judge_sql
from personagap.records import Label, Run
from personagap.store.writes import upsert, write_labels


def stage_items(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> list[str]:
    """Every item id of a stage and dataset, sorted."""
    return [str(r[0]) for r in con.execute(
        "SELECT item_id FROM items WHERE stage = ? AND dataset = ? ORDER BY item_id", [stage, dataset]).fetchall()]


def queue_judge_labels(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, *,
                       meta_of: str | None = None) -> pd.DataFrame:
    """The comparable judges' parsed labels on a stage and dataset: ``item_id``, ``rater``, ``label``, ``meta``.

    Args:
        con: An open connection.
        stage: Pipeline stage.
        dataset: Dataset.
        meta_of: Read the meta (JSON text) of this rater's labels only, None elsewhere (the queue reads the best
            judge's certainty only: at 10^7 labels every label's meta text is ~1 GB); None: every label's.
    """
    return cast(pd.DataFrame, con.execute(f"""
        SELECT l.item_id, l.rater, l.label,
               CASE WHEN CAST(? AS TEXT) IS NULL OR l.rater = ? THEN CAST(l.meta AS TEXT) END AS meta
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = ? AND i.dataset = ? AND l.label IS NOT NULL AND {comparable_judge_sql('l')}
    """, [meta_of, meta_of, stage, dataset]).df())


def stored_by(con: duckdb.DuckDBPyConnection, name: str, stage: str, dataset: str) -> set[str]:
    """Items of a stage and dataset this person's labels (any condition) are stored on."""
    return {str(r[0]) for r in con.execute("""
        SELECT DISTINCT l.item_id FROM labels l JOIN items i USING (item_id)
        WHERE l.rater = ? AND l.rater_kind = 'human' AND i.stage = ? AND i.dataset = ?
    """, [name, stage, dataset]).fetchall()}


def item_choices(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """(stage, dataset) pairs that have items, with item counts."""
    return cast(pd.DataFrame, con.execute(
        "SELECT stage, dataset, count(*) AS items FROM items GROUP BY ALL ORDER BY stage, dataset").df())


def others_labels(con: duckdb.DuckDBPyConnection, item_id: str, name: str) -> pd.DataFrame:
    """Every other rater's labels on one item (what the reveal shows), judges and humans, failures included."""
    return cast(pd.DataFrame, con.execute("""
        SELECT rater, rater_kind, condition, label, error, reason FROM labels
        WHERE item_id = ? AND NOT (rater = ? AND rater_kind = 'human')
        ORDER BY CASE WHEN rater_kind IN ('human', 'human_majority') THEN 0 ELSE 1 END, rater, condition
    """, [item_id, name]).df())


def write_annotations(con: duckdb.DuckDBPyConnection, runs: Sequence[Run], labels: Sequence[Label]) -> None:
    """Write annotators' session runs and labels in one transaction (rolled back whole on a DuckDB error).

    A session's run row keeps its first start (the stored one, if earlier) and its latest label time.

    Raises:
        duckdb.Error: The write failed; nothing was written.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        known = {r[0]: r[1] for r in con.execute(
            "SELECT run_id, started_at FROM runs WHERE run_id IN (SELECT unnest(?))", [[r.run_id for r in runs]]
        ).fetchall()}
        rows = [r.model_copy(update={"started_at": min(known.get(r.run_id, r.started_at), r.started_at)}).model_dump()
                for r in runs]
        upsert(con, "runs", rows)
        write_labels(con, labels)
        con.execute("COMMIT")
    except duckdb.Error:
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


#: Per-item columns of :func:`queue_item_scores` (every count an int; ``best_label`` None where the judge has none).
SCORE_COLUMNS = ("item_id", "total", "top", "best_n", "best_top", "best_label", "other_n", "other_diff")


def queue_item_scores(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, best_judge: str,
                      meta_values: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per item of a stage and dataset (every one, sorted by ``item_id``), the counts every queue order reads.

    ``total``: its comparable judge labels; ``top``: the count of its most common label; ``best_n``,
    ``best_top``: the same of ``best_judge``'s labels; ``best_label``: that judge's most common label, a tie going
    to the label that sorts first (byte order); ``other_n``, ``other_diff``: the other judges' labels on items the
    best judge labelled, and how many of them differ from ``best_label``; ``value_sum``, ``value_n``: the sum
    and the number of the integer ``value`` of the best judge's labels whose meta text is in ``meta_values``
    (``meta``, ``value``; 0 where none is).
    """
    values = meta_values if meta_values is not None else pd.DataFrame(
        {"meta": pd.Series(dtype=object), "value": pd.Series(dtype=np.int64)})
    con.register("_meta_values", values)
    try:
        return cast(pd.DataFrame, con.execute(f"""
            WITH per AS (
                SELECT l.item_id, l.label, count(*) AS n, count(*) FILTER (WHERE l.rater = ?) AS nb
                FROM labels l JOIN items i USING (item_id)
                WHERE i.stage = ? AND i.dataset = ? AND l.label IS NOT NULL AND {comparable_judge_sql('l')}
                GROUP BY ALL
            ),
            ranked AS (
                SELECT *, row_number() OVER (PARTITION BY item_id ORDER BY nb DESC, label) AS k FROM per
            ),
            counted AS (
                SELECT item_id, sum(n)::BIGINT AS total, max(n)::BIGINT AS top, sum(nb)::BIGINT AS best_n,
                       max(nb)::BIGINT AS best_top, max(label) FILTER (WHERE k = 1 AND nb > 0) AS best_label,
                       sum(n - nb)::BIGINT AS others, sum(n - nb) FILTER (WHERE k = 1)::BIGINT AS others_same
                FROM ranked GROUP BY item_id
            ),
            e AS (
                SELECT item_id, total, top, best_n, best_top, best_label,
                       CASE WHEN best_n > 0 THEN others ELSE 0 END AS other_n,
                       CASE WHEN best_n > 0 THEN others - others_same ELSE 0 END AS other_diff
                FROM counted
            ),
            c AS (
                SELECT l.item_id, sum(v.value)::BIGINT AS value_sum, count(*)::BIGINT AS value_n
                FROM labels l JOIN items i USING (item_id) JOIN _meta_values v ON CAST(l.meta AS TEXT) = v.meta
                WHERE i.stage = ? AND i.dataset = ? AND l.label IS NOT NULL AND l.rater = ?
                  AND {comparable_judge_sql('l')}
                GROUP BY l.item_id
            )
            SELECT i.item_id, coalesce(e.total, 0)::BIGINT AS total, coalesce(e.top, 0)::BIGINT AS top,
                   coalesce(e.best_n, 0)::BIGINT AS best_n, coalesce(e.best_top, 0)::BIGINT AS best_top,
                   e.best_label, coalesce(e.other_n, 0)::BIGINT AS other_n,
                   coalesce(e.other_diff, 0)::BIGINT AS other_diff,
                   coalesce(c.value_sum, 0)::BIGINT AS value_sum, coalesce(c.value_n, 0)::BIGINT AS value_n
            FROM items i LEFT JOIN e USING (item_id) LEFT JOIN c USING (item_id)
            WHERE i.stage = ? AND i.dataset = ?
            ORDER BY i.item_id
        """, [best_judge, stage, dataset, stage, dataset, best_judge, stage, dataset]).df())
    finally:
        con.unregister("_meta_values")


def best_judge_metas(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, best_judge: str) -> pd.DataFrame:
    """The distinct meta texts of a judge's comparable labels on a stage and dataset (``meta``), with ``n`` labels."""
    return cast(pd.DataFrame, con.execute(f"""
        SELECT CAST(l.meta AS TEXT) AS meta, count(*) AS n FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = ? AND i.dataset = ? AND l.label IS NOT NULL AND l.rater = ? AND {comparable_judge_sql('l')}
        GROUP BY ALL
    """, [stage, dataset, best_judge]).df())
