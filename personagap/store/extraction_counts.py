"""Aggregate reads for the stage-1 (extraction) report: per-(dataset, extractor, rater, user) verdict counts.

``report extraction`` computes its verdict figures (acceptance, verifier-human agreement, corrected rates) from
these small tables, not from every stored label, so its memory does not grow with the number of verdicts
(issue 20). Which labels count is :mod:`personagap.analysis.comparable`'s rule through its SQL predicates and its
one reference query; a verdict item is a stage-1 item whose payload kind is missing or ``extracted`` (what
the report's verdicts are).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import duckdb
import pandas as pd

from personagap.analysis.codes import as_categories
from personagap.analysis.comparable import blind_human_sql, blind_vote_sql, comparable_judge_sql, reference_sql

_KIND = "json_extract_string(payload, '$.kind')"
# Verdict items of stage 1, each with its extractor (the payload's, else the caller's stand-in name).
_VERDICT_ITEMS = f"""
    verdict_items AS (
        SELECT item_id, dataset, user_id, coalesce(json_extract_string(payload, '$.extractor'), $unnamed) AS extractor
        FROM items WHERE stage = 'extraction' AND ({_KIND} IS NULL OR {_KIND} = 'extracted')
    )"""
# Standard-protocol labels only: blind individual humans (a stored majority enters through the reference alone)
# and comparable judges (parsed or failed).
_COUNTED = (f"l.condition = '' AND (({blind_vote_sql('l')} AND l.label IS NOT NULL) "
            f"OR {comparable_judge_sql('l')})")


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> pd.DataFrame:
    # Through Arrow: the same dtypes as .df() without building strings one Python object at a time.
    return cast(pd.DataFrame, con.sql(sql, params=params).to_arrow_table().combine_chunks().to_pandas())


def verdict_counts(con: duckdb.DuckDBPyConnection, *, unnamed_extractor: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every stage-1 verdict figure's input, counted by DuckDB in one statement.

    Label counts: per (dataset, extractor, rater, rater kind, user, human reference, label) the number of
    verdicts, over the blind individual human labels (parsed) and the comparable judges' labels of the standard
    protocol (``label`` missing: a failed answer). ``human`` is the item's blind reference
    (:func:`~personagap.analysis.comparable.reference_sql`), missing where it has none. Reference counts: per
    (dataset, user, reference label) the verdict items with that reference.

    Args:
        con: An open store connection.
        unnamed_extractor: The extractor name of items whose payload names none.

    Returns:
        Label counts (``dataset``, ``extractor``, ``rater``, ``rater_kind``, ``user_id``, ``human``, ``label``,
        ``n``) and reference counts (``dataset``, ``user_id``, ``human``, ``n``).
    """
    # Item-level facts (dataset, extractor, user, reference) are coded as one integer cell per distinct
    # combination before the join with every label, so the 10^7-row join and grouping carry an integer, not four
    # strings (half the time at 10^7 labels). The cell numbers are internal to the statement.
    rows = _rows(con, f"""
        WITH {reference_sql('blind')}, {_VERDICT_ITEMS},
        judged AS MATERIALIZED (
            SELECT v.*, r.human FROM verdict_items v LEFT JOIN reference r USING (item_id)
        ),
        cells AS MATERIALIZED (
            SELECT dataset, extractor, user_id, human,
                   row_number() OVER (ORDER BY dataset, extractor, user_id, human) AS cell
            FROM (SELECT DISTINCT dataset, extractor, user_id, human FROM judged)
        ),
        item_cell AS (
            SELECT j.item_id, c.cell FROM judged j JOIN cells c
            ON j.dataset = c.dataset AND j.extractor = c.extractor AND j.user_id = c.user_id
               AND j.human IS NOT DISTINCT FROM c.human
        ),
        counted AS (
            SELECT ic.cell, l.rater, l.rater_kind, l.label, count(*) AS n
            FROM labels l JOIN item_cell ic USING (item_id)
            WHERE {_COUNTED}
            GROUP BY ALL
        )
        SELECT true AS labelled, c.dataset, c.extractor, k.rater, k.rater_kind, c.user_id, c.human, k.label, k.n
        FROM counted k JOIN cells c USING (cell)
        UNION ALL
        SELECT false, dataset, NULL, NULL, NULL, user_id, human, NULL, count(*)
        FROM judged WHERE human IS NOT NULL
        GROUP BY ALL
    """, {"unnamed": unnamed_extractor})
    labelled = rows.pop("labelled").to_numpy(dtype=bool)
    reference = rows.loc[~labelled, ["dataset", "user_id", "human", "n"]].reset_index(drop=True)
    # The report filters and groups the label counts a few dozen times: their text keys as categories.
    counts = as_categories(rows[labelled].reset_index(drop=True),
                           ["dataset", "extractor", "rater", "rater_kind", "user_id", "human", "label"])
    return counts, reference


def human_verdicts(con: duckdb.DuckDBPyConnection, datasets: Sequence[str]) -> pd.DataFrame:
    """The parsed blind individual human verdicts of ``datasets`` (agreement among humans needs them per item).

    Returns:
        Columns ``dataset``, ``item_id``, ``rater``, ``label``, ``user_id``.
    """
    if not datasets:  # nothing to read: no pass over every label
        return pd.DataFrame(columns=["dataset", "item_id", "rater", "label", "user_id"])
    return _rows(con, f"""
        WITH {_VERDICT_ITEMS}
        SELECT v.dataset, l.item_id, l.rater, l.label, v.user_id
        FROM labels l JOIN verdict_items v USING (item_id)
        WHERE {blind_vote_sql('l')} AND l.label IS NOT NULL AND list_contains($datasets, v.dataset)
    """, {"unnamed": "", "datasets": list(datasets)})


def verdict_item_ids(con: duckdb.DuckDBPyConnection, item_ids: Sequence[str]) -> set[str]:
    """Which of ``item_ids`` are stage-1 verdict items."""
    rows = con.execute(f"""
        WITH {_VERDICT_ITEMS}
        SELECT item_id FROM verdict_items WHERE item_id IN (SELECT unnest($ids))
    """, {"unnamed": "", "ids": list(item_ids)}).fetchall()
    return {str(r[0]) for r in rows}


def side_items(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Stage-1 items the extractor and gold figures read, never the verdict items of a dataset without them.

    Every item other than a verdict (conversations, chunks, gold, matcher pairs), and the extracted attributes of
    datasets with chunks or gold.

    Returns:
        Columns ``item_id``, ``dataset``, ``user_id``, ``attribute``, ``position``, ``payload`` (JSON text), in
        (dataset, user, item) order.
    """
    return con.execute(f"""
        WITH staged AS (SELECT *, {_KIND} AS kind FROM items WHERE stage = 'extraction'),
        scored AS (SELECT DISTINCT dataset FROM staged WHERE kind IN ('chunk', 'gold'))
        SELECT item_id, dataset, user_id, attribute, position, payload FROM staged
        WHERE (kind IS NOT NULL AND kind <> 'extracted')
           OR (kind = 'extracted' AND dataset IN (SELECT dataset FROM scored))
        ORDER BY dataset, user_id, item_id
    """).df()


def side_labels(con: duckdb.DuckDBPyConnection, item_ids: Sequence[str]) -> pd.DataFrame:
    """Standard-protocol labels (blind humans, comparable judges) on ``item_ids`` (stage 1's chunks, matcher pairs).

    Returns:
        Columns as :func:`personagap.store.load_labels` needs for the extractor and matching figures
        (``item_id``, ``rater``, ``rater_kind``, ``condition``, ``label``, ``error``, ``dataset``, ``user_id``).
    """
    columns = ["item_id", "rater", "rater_kind", "condition", "label", "error", "dataset", "user_id"]
    if not item_ids:  # nothing to read: no pass over every label
        return pd.DataFrame(columns=columns)
    return con.execute(f"""
        SELECT {', '.join(('i.' if c in ('dataset', 'user_id') else 'l.') + c for c in columns)}
        FROM labels l JOIN items i USING (item_id)
        WHERE l.item_id IN (SELECT unnest($ids)) AND l.condition = ''
          AND ({blind_human_sql('l')} OR {comparable_judge_sql('l')})
    """, {"ids": list(item_ids)}).df()
