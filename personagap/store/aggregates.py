"""Aggregate reads for reports: per-(dataset, judge, condition, user) counts that DuckDB builds.

Reports and ``diagnose`` compute their figures from these small tables instead of every stored label, so
their memory does not grow with the number of labels (issue 20). Which labels count is
:mod:`personagap.analysis.comparable`'s rule, used through its SQL predicates and its one reference query
(:func:`~personagap.analysis.comparable.reference_sql`), so the figures are those of the per-label path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import duckdb
import pandas as pd

from personagap.analysis.comparable import (
    SHOWN_LLM_RATING,
    anchored_human_sql,
    blind_human_sql,
    blind_vote_sql,
    comparable_judge_sql,
    individual_human_sql,
    reference_sql,
)
from personagap.store.temp_tables import held_table
from personagap.vocabulary import HUMAN_KINDS, HumanSet

_JUDGE = comparable_judge_sql("l")
REFERENCE_SQL = reference_sql("blind")
JUDGE_SQL = _JUDGE
BLIND_SQL = blind_human_sql("l")
ANCHORED_SQL = anchored_human_sql("l")
# The individual human votes of each protocol: comparable.py's one definition, never rebuilt here.
BLIND_VOTE_SQL = blind_vote_sql("l")
ANCHORED_VOTE_SQL = individual_human_sql("anchored", "l")

def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object] | None = None) -> pd.DataFrame:
    # Through Arrow: the same dtypes as .df() without building strings one Python object at a time.
    return cast(pd.DataFrame, con.sql(sql, params=params).to_arrow_table().combine_chunks().to_pandas())


def label_counts(con: duckdb.DuckDBPyConnection, stage: str | None, which: HumanSet = "blind",
                 dataset: str | None = None, *, reference_table: str | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What a stage report's judge rows and estimates are computed from, counted by DuckDB in one query.

    Judge counts: per (dataset, judge, condition, user, reference label, judge label) the number of items, over
    the parsed comparable judge labels; ``human`` is the item's human reference
    (:func:`~personagap.analysis.comparable.reference_sql` of ``which``), missing where the item has none: those
    rows are the judge's unmatched items, the others its confusion counts. Reference counts: per (dataset, user,
    reference label) the number of items with that reference.

    Args:
        con: An open store connection.
        stage: Pipeline stage (None: every stage).
        which: The blind reference (what judges are scored against) or the anchored one.
        dataset: Only this dataset (None: every dataset of the stage).
        reference_table: A temporary table the caller holds with ``which``'s reference of every item (``item_id``,
            ``human``: :func:`personagap.analysis.pipeline_sql.reference_table`, computed by the same
            :func:`~personagap.analysis.comparable.reference_sql`), read instead of computing it again; None:
            computed here. A name of that module's constant, never user input.

    Returns:
        Judge counts (``stage``, ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human``,
        ``label``, ``n``) and reference counts (``stage``, ``dataset``, ``user_id``, ``human``, ``n``).
    """
    # One statement, so the reference (the costly part: every human label) is computed once for both. A judge has
    # one label per item: (item, rater, condition) is the labels table's key, unique by every write (schema.TABLES).
    # The items are joined with their reference first and the labels with that (one hash table of items): at 10^7
    # labels 0.5 GB less and faster than joining the labels with the items and then the reference. The reference
    # holds one non-missing label per item, so ``human IS NOT NULL`` is "the item has a reference".
    if reference_table is not None and not reference_table.isidentifier():
        raise ValueError(f"not a table name: {reference_table!r}")
    ref = (reference_sql(which) if reference_table is None
           else f"reference AS (SELECT item_id, human FROM {reference_table})")
    rows = _rows(con, f"""
        WITH {ref},
        staged AS (
            SELECT i.item_id, i.stage, i.dataset, i.user_id, r.human FROM items i LEFT JOIN reference r USING (item_id)
            WHERE ($stage IS NULL OR i.stage = $stage) AND ($dataset IS NULL OR i.dataset = $dataset)
        )
        SELECT true AS judged, s.stage, s.dataset, l.rater, l.rater_kind, l.condition, s.user_id, s.human, l.label,
               count(*) AS n
        FROM labels l JOIN staged s USING (item_id)
        WHERE {_JUDGE} AND l.label IS NOT NULL
        GROUP BY ALL
        UNION ALL
        SELECT false, s.stage, s.dataset, NULL, NULL, NULL, s.user_id, s.human, NULL, count(*)
        FROM staged s WHERE s.human IS NOT NULL
        GROUP BY ALL
    """, {"stage": stage, "dataset": dataset})
    judged = rows.pop("judged").to_numpy(dtype=bool)
    reference = rows.loc[~judged, ["stage", "dataset", "user_id", "human", "n"]].reset_index(drop=True)
    return rows[judged].reset_index(drop=True), reference


def judge_failures(con: duckdb.DuckDBPyConnection, stage: str) -> pd.DataFrame:
    """Per (dataset, judge, condition, error text) the number of unparsed comparable judge answers.

    The error text is returned whole (grouped), so that the caller's one rule names the reason.

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``error``, ``n``.
    """
    return _rows(con, f"""
        SELECT i.dataset, l.rater, l.rater_kind, l.condition, l.error, count(*) AS n
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = $stage AND {_JUDGE} AND l.label IS NULL
        GROUP BY ALL
    """, {"stage": stage})


_PERSON = f"l.rater_kind = 'human' AND l.label IS NOT NULL AND l.condition <> '{SHOWN_LLM_RATING}'"
ITEM_HUMANS = "_item_humans"
"""The temporary table of :func:`item_humans_table`."""


# The CTE ``per_item(item_id, blind, anchored)``: the distinct individual blind and anchored human raters of every
# item with an individual human label. Distinct humans are counted only where an item holds two or more human labels:
# an item with one human label has one human of that label's protocol, so most items skip the costly count(DISTINCT)
# grouping.
_PER_ITEM = f"""
        human AS (
            SELECT l.item_id, l.rater, {BLIND_VOTE_SQL} AS b, {ANCHORED_VOTE_SQL} AS a
            FROM labels l WHERE {_PERSON}
        ),
        crowded AS (SELECT item_id FROM human GROUP BY item_id HAVING count(*) >= 2),
        per_item AS (
            SELECT item_id, count(DISTINCT rater) FILTER (WHERE b) AS blind,
                   count(DISTINCT rater) FILTER (WHERE a) AS anchored
            FROM human SEMI JOIN crowded USING (item_id) GROUP BY item_id
            UNION ALL
            SELECT item_id, b::INTEGER, a::INTEGER FROM human ANTI JOIN crowded USING (item_id)
        )"""


def _table(name: str) -> str:
    # A temporary table's name is this module's constant, never user input: refuse anything else.
    if not name.isidentifier():
        raise ValueError(f"not a table name: {name!r}")
    return name


@contextlib.contextmanager
def item_humans_table(con: duckdb.DuckDBPyConnection) -> Iterator[str]:
    """Hold, per item with an individual human label, its distinct individual blind and anchored humans.

    What :func:`multi_human_labels` (items several humans labelled) and :func:`diagnosis_inputs` (items two or
    more blind humans labelled) both count: ``diagnose`` counts it once (a grouping of every human label by item)
    for both. A temporary table, private to the connection and allowed on a read-only one; dropped afterwards.

    Nested uses on one connection share the outer table (a report holds it for every dataset it tests; the
    test's own read holds it when called alone), so it is counted once per connection.

    Yields:
        The table's name (:data:`ITEM_HUMANS`): columns ``item_id``, ``blind``, ``anchored``.
    """
    with held_table(con, ITEM_HUMANS, f"WITH {_PER_ITEM} SELECT item_id, blind, anchored FROM per_item") as name:
        yield name


def multi_human_labels(con: duckdb.DuckDBPyConnection, stage: str, dataset: str, *,
                       min_humans: int, item_humans: str | None = None,
                       judges: pd.DataFrame | None = None) -> pd.DataFrame:
    """The labels the alternative-annotator test reads: every label on items several individual humans labelled.

    Items with at least ``min_humans`` distinct individual human raters (blind, or anchored: the test runs on
    each apart), plus, for every judge, the item it labelled that has the most such humans of each protocol:
    on it alone the test says why it does not apply to that judge ("at most N per item"). Nothing else of the
    dataset is read.

    When every judge labelled the dataset's item with the most humans of each protocol (the usual case), that
    item is every judge's top item and the judges' labels are not read to find it; otherwise each judge's top
    item is found from its labels.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        dataset: Dataset key.
        min_humans: Individual humans an item needs (the test's minimum per item).
        item_humans: The table of :func:`item_humans_table` when the caller holds it; None: counted here.
        judges: Every comparable judge with a parsed label on the dataset (``rater``, ``rater_kind``,
            ``condition``: e.g. the judge rows of :func:`label_counts`), or more; None: every comparable judge
            with a parsed label in the store (a superset: a judge of another dataset has not labelled this one's
            top item, and the judges' labels are then read).

    Returns:
        Columns as :func:`personagap.store.load_labels` (``item_id``, ``rater``, ``rater_kind``, ``condition``,
        ``label``, ``error``, ``dataset``, ``user_id``).
    """
    with item_humans_table(con) if item_humans is None else contextlib.nullcontext(item_humans) as held:
        expected = _judge_keys(con) if judges is None else set(
            judges[["rater", "rater_kind", "condition"]].drop_duplicates().itertuples(index=False, name=None))
        tops = _shared_tops(con, held, stage, dataset, expected)
        params: dict[str, object] = {"stage": stage, "dataset": dataset, "min": min_humans}
        if tops is None:
            judged = f"""judged AS (
                SELECT arg_max(l.item_id, coalesce(p.blind, 0)) AS top_blind,
                       arg_max(l.item_id, coalesce(p.anchored, 0)) AS top_anchored
                FROM labels l SEMI JOIN ds_items USING (item_id) LEFT JOIN per_item p USING (item_id)
                WHERE {_JUDGE} AND l.label IS NOT NULL
                GROUP BY l.rater, l.rater_kind, l.condition
            )"""
        else:
            judged = "judged AS (SELECT unnest($tops::VARCHAR[]) AS top_blind, NULL::VARCHAR AS top_anchored)"
            params["tops"] = tops
        return _rows(con, f"""
            WITH ds_items AS (SELECT item_id FROM items WHERE stage = $stage AND dataset = $dataset),
            per_item AS (SELECT p.item_id, p.blind, p.anchored FROM {_table(held)} p SEMI JOIN ds_items
                         USING (item_id)),
            {judged},
            keep AS (
                SELECT item_id FROM per_item WHERE blind >= $min OR anchored >= $min
                UNION SELECT top_blind FROM judged UNION SELECT top_anchored FROM judged
            )
            SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label, l.error, i.dataset, i.user_id
            FROM labels l JOIN keep USING (item_id) JOIN items i USING (item_id)
        """, params)


def _judge_keys(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str, str]]:
    # Every comparable judge with a parsed label in the store: a scan of three dictionary-coded columns, without
    # the join to the items that restricting it to one dataset would cost (~8x at 10^7 labels).
    rows = con.execute(f"SELECT DISTINCT l.rater, l.rater_kind, l.condition FROM labels l "
                       f"WHERE {_JUDGE} AND l.label IS NOT NULL").fetchall()
    return {(str(r), str(k), str(c)) for r, k, c in rows}


def _shared_tops(con: duckdb.DuckDBPyConnection, item_humans: str, stage: str, dataset: str,
                 expected: set[tuple[str, str, str]]) -> list[str] | None:
    """The dataset's items with the most blind / anchored humans, when every judge labelled both; else None.

    No item of the dataset has more humans of that protocol (an item without any has none), so an item with the
    most that a judge labelled is that judge's top item: one item each, found without reading every judge label.
    ``expected`` holds every judge of the dataset (or more: the fast path is then refused, never wrong).
    """
    if not expected:
        return []  # no judge: no top item to read
    found = con.execute(f"""
        SELECT arg_max(p.item_id, p.blind), arg_max(p.item_id, p.anchored)
        FROM {_table(item_humans)} p SEMI JOIN (SELECT item_id FROM items WHERE stage = ? AND dataset = ?)
        USING (item_id)
    """, [stage, dataset]).fetchall()
    tops = [str(t) for t in found[0] if t is not None] if found else []
    if len(tops) != 2:
        return None  # no individual human on the dataset: every judge's top item is any of its items
    labelled = con.execute(f"""
        SELECT DISTINCT l.item_id, l.rater, l.rater_kind, l.condition FROM labels l
        WHERE l.item_id IN (?, ?) AND {_JUDGE} AND l.label IS NOT NULL
    """, tops).fetchall()
    for top in set(tops):
        if expected - {(r, k, c) for item, r, k, c in labelled if item == top}:
            return None
    return sorted(set(tops))


def has_labels(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> bool:
    """Whether a dataset of ``stage`` holds any label (reads that dataset's items only)."""
    rows = con.sql("""
        SELECT EXISTS (SELECT 1 FROM labels l JOIN items i USING (item_id)
                       WHERE i.stage = $stage AND i.dataset = $dataset)
    """, params={"stage": stage, "dataset": dataset}).fetchall()
    return bool(rows[0][0])


def has_anchored_humans(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> bool:
    """Whether a dataset holds any anchored human label (humans who saw an LLM's label first)."""
    rows = con.sql(f"""
        SELECT EXISTS (SELECT 1 FROM labels l JOIN items i USING (item_id)
                       WHERE i.stage = $stage AND i.dataset = $dataset AND {anchored_human_sql('l')})
    """, params={"stage": stage, "dataset": dataset}).fetchall()
    return bool(rows[0][0])


def diagnosis_inputs(con: duckdb.DuckDBPyConnection, *, pairs: pd.DataFrame | None = None,
                     judge_counts: pd.DataFrame | None = None, item_humans: str | None = None
                     ) -> dict[str, pd.DataFrame]:
    """What ``diagnose`` computes from (:func:`personagap.analysis.diagnosis.diagnose`), counted by DuckDB.

    Per-user confusion counts of every comparable judge against the blind reference, failure counts, the
    individual blind human labels and comparable judge labels of items two or more blind humans labelled (the
    ceiling and the gap need them per item), per-dataset human counts and the per-stage inventory.

    Args:
        con: An open store connection.
        pairs: The per-user confusion counts when the caller has them (the judge counts of
            :func:`label_counts` of every stage with a reference); None: counted here.
        judge_counts: Every judge count of :func:`label_counts` of every stage (with and without a reference)
            when the caller has them: the parsed comparable judge labels are then not read again (at 10^7 labels
            they are four in five of all labels), only the others are.
        item_humans: The table of :func:`item_humans_table` when the caller holds it (its ``blind`` count is the
            number of blind human labels of an item: one per rater); None: counted here.

    Returns:
        ``pairs``, ``failures``, ``humans``, ``inventory``, ``judge_items`` and ``human_counts`` frames.
    """
    pairs = pairs if pairs is not None else _rows(con, f"""
        WITH {REFERENCE_SQL}
        SELECT i.stage, i.dataset, l.rater, l.rater_kind, l.condition, i.user_id, r.human, l.label,
               count(*) AS n
        FROM labels l JOIN reference r USING (item_id) JOIN items i USING (item_id)
        WHERE {JUDGE_SQL} AND l.label IS NOT NULL
        GROUP BY ALL
    """)
    # One pass over every label with its item, grouped by rater and protocol (a few rows per dataset): the failure
    # counts, the human counts and the inventory are sums over it. The role flags depend on rater kind and
    # condition only, so they are constant within a group.
    summary = _rows(con, f"""
        SELECT i.stage, i.dataset, l.rater, l.rater_kind, l.condition, count(*) AS n, count(l.label) AS parsed,
               {JUDGE_SQL} AS judge, {BLIND_VOTE_SQL} AS blind, {ANCHORED_VOTE_SQL} AS anchored
        FROM labels l JOIN items i USING (item_id)
        {"" if judge_counts is None else f"WHERE ({JUDGE_SQL} AND l.label IS NOT NULL) IS NOT TRUE"}
        GROUP BY ALL
    """)
    if judge_counts is not None:
        summary = _with_parsed_judges(summary, judge_counts)
    summary = summary.assign(unparsed=summary["n"] - summary["parsed"])
    failed = summary[summary["judge"] & (summary["unparsed"] > 0)]
    failures = failed[["stage", "dataset", "rater", "rater_kind", "condition"]].assign(
        failures=failed["unparsed"]).reset_index(drop=True)
    human_counts = _human_counts(summary[summary["parsed"] > 0])
    # Only items that at least two individual blind humans labelled can say anything about the ceiling: their
    # blind human labels and comparable judge labels, read in one query.
    multi_items = (f"SELECT item_id FROM {_table(item_humans)} WHERE blind >= 2" if item_humans is not None else f"""
            SELECT l.item_id FROM labels l
            WHERE {BLIND_VOTE_SQL} AND l.label IS NOT NULL
            GROUP BY l.item_id HAVING count(*) >= 2""")
    multi = _rows(con, f"""
        WITH multi AS ({multi_items})
        SELECT {BLIND_SQL} AS human, i.stage, i.dataset, l.item_id, l.rater, l.rater_kind, l.condition, l.label,
               i.user_id
        FROM labels l JOIN multi USING (item_id) JOIN items i USING (item_id)
        WHERE l.label IS NOT NULL AND ({BLIND_VOTE_SQL} OR {JUDGE_SQL})
    """)
    is_human = multi.pop("human").to_numpy(dtype=bool)
    humans = multi.loc[is_human, ["stage", "dataset", "item_id", "rater", "label", "user_id"]].reset_index(drop=True)
    judge_items = multi[~is_human].reset_index(drop=True)
    items = _rows(con, "SELECT stage, count(*) AS n_items FROM items GROUP BY stage")
    by_stage = summary.assign(
        human_n=summary["n"].where(summary["rater_kind"].isin(HUMAN_KINDS), 0),
        judge_n=summary["n"].where(summary["judge"], 0),
    ).groupby("stage").agg(n_labels=("n", "sum"), n_human_labels=("human_n", "sum"), n_judge_labels=("judge_n", "sum"))
    inventory = items.merge(by_stage, left_on="stage", right_index=True, how="left").fillna(
        {"n_labels": 0, "n_human_labels": 0, "n_judge_labels": 0}).astype(
        {"n_labels": "int64", "n_human_labels": "int64", "n_judge_labels": "int64"})
    return {"pairs": pairs, "failures": failures, "humans": humans, "inventory": inventory,
            "judge_items": judge_items, "human_counts": human_counts}


def _with_parsed_judges(summary: pd.DataFrame, judge_counts: pd.DataFrame) -> pd.DataFrame:
    """The summary of every label: ``summary`` (all but the parsed comparable judge labels) plus those, counted."""
    keys = ["stage", "dataset", "rater", "rater_kind", "condition"]
    counted = judge_counts.groupby(keys, as_index=False, dropna=False)["n"].sum()
    # Parsed comparable judge labels: every one parsed, a judge's (JUDGE_SQL), no human's.
    judges = counted.assign(n=counted["n"].astype("int64"), parsed=counted["n"].astype("int64"), judge=True,
                            blind=False, anchored=False)
    both = pd.concat([summary, judges[summary.columns]], ignore_index=True)
    # A judge with unparsed labels too has a row in each part: one row per group, as one query gives it (the
    # flags follow from rater kind and condition, so they agree).
    return both.groupby(keys, as_index=False, dropna=False, sort=False).agg(
        n=("n", "sum"), parsed=("parsed", "sum"), judge=("judge", "max"), blind=("blind", "max"),
        anchored=("anchored", "max"))


def _human_counts(summary: pd.DataFrame) -> pd.DataFrame:
    """Per (stage, dataset) distinct blind and anchored human raters and their parsed labels, from the summary."""
    out = []
    for (stage, dataset), rows in summary.groupby(["stage", "dataset"], sort=True):
        blind, anchored = rows[rows["blind"]], rows[rows["anchored"]]
        if not rows["rater_kind"].eq("human").any():
            continue  # the per-label query counted human labels only: a dataset without any has no row
        out.append((stage, dataset, blind["rater"].nunique(), int(blind["parsed"].sum()),
                    anchored["rater"].nunique(), int(anchored["parsed"].sum())))
    return pd.DataFrame(out, columns=["stage", "dataset", "blind_raters", "blind_labels", "anchored_raters",
                                      "anchored_labels"])
