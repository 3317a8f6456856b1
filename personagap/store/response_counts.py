"""Aggregate reads for the stage-3 report: per-(dataset, judge, condition, user) sums that DuckDB builds.

``report response`` computes every pairwise figure (accuracy, kappa and the panel over A/B/tie, position and length
bias, trivial baselines, the with- vs without-profile gap, swap consistency), the generic-vs-personalised rates and
every judge figure of the single-response datasets (against the reference and against each blind human rater)
from these small tables, so its memory does not grow with the number of judge labels (issue 20); only the human
labels of single-response items are read one a row (agreement among humans needs them per item). Which labels count is
:mod:`personagap.analysis.comparable`'s rule, through its SQL predicates and its one reference query
(:func:`~personagap.analysis.comparable.reference_sql`). Every value a caller passes is bound as a parameter.

How a verdict is read, in one place for the report:

* canonical labels are 'A', 'B' or 'tie'; a judge that saw the pair swapped has ``meta.swapped`` true, so it chose
  the answer shown first when ``(label = 'A') <> swapped``;
* an answer's length is its number of characters (code points, as Python's ``len``);
* the trivial judges (:data:`BASELINE_SIDES`: always A, always B, always the longer answer, always the shorter one,
  always tie) are counted by one definition in both the judges' and the humans' counts; both length judges say 'A'
  on equal lengths.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import cast

import duckdb
import pandas as pd

from personagap.analysis.codes import as_categories
from personagap.analysis.comparable import (
    HUMAN_KINDS,
    blind_human_sql,
    blind_vote_sql,
    comparable_judge_sql,
    human_labelled_sql,
)
from personagap.vocabulary import REVERSED as REVERSED

STAGE = "response"
PAIRWISE_KIND = "pairwise"
GVP_KIND = "generic_vs_personalized"
NO_PROFILE = "no-profile"
PERSONALIZED = "B"
"""Canonical position of the personalised answer of a generic-vs-personalised pair (the generic one is A)."""

_JUDGE = comparable_judge_sql("l")

BASELINE_SIDES: dict[str, str] = {
    "always_a": "'A'",
    "always_b": "'B'",
    "always_longer": "CASE WHEN len_a >= len_b THEN 'A' ELSE 'B' END",
    "always_shorter": "CASE WHEN len_a <= len_b THEN 'A' ELSE 'B' END",
    "always_tie": "'tie'",
}
"""Each trivial judge's label on a pair (SQL over ``len_a``, ``len_b``): the column of its hits in
:func:`pair_judge_counts` and :func:`pair_human_counts`. One definition for both, so a baseline beside a judge and
beside the humans is the same judge. On equal lengths both length judges say 'A' (the answer listed first)."""


def _baseline_hits(human: str, where: str) -> str:
    """``count(*) FILTER (...) AS always_...`` per :data:`BASELINE_SIDES` judge: items where it gives ``human``."""
    return ", ".join(f"count(*) FILTER ({where} AND {human} = {side}) AS {name}"
                     for name, side in BASELINE_SIDES.items())

_ITEMS = "pg_response_items"


@contextmanager
def staged(con: duckdb.DuckDBPyConnection, reference_table: str) -> Iterator[None]:
    """Stage-3 items (payload read once) with their blind human reference, as a temporary table for the counts below.

    Every stage-3 count reads it, so the item payloads are read once per report and each count joins the labels
    once. Temporary tables live in the connection's memory (a read-only store is enough); it is dropped on exit.

    Args:
        con: An open store connection.
        reference_table: A temporary table the caller holds with the blind reference of every item (``item_id``,
            ``human``: :func:`personagap.analysis.pipeline_sql.reference_table`, the one reference rule's query).

    Columns: ``item_id``, ``dataset``, ``user_id``, ``kind``, ``len_a``, ``len_b``, ``split``, ``tier``, ``shown``
    (the A/B order is the one humans saw: the payload has no ``order_seed``, which an import that shuffled the
    answers writes), ``human`` (the blind reference; missing where the item has none).

    Raises:
        ValueError: ``reference_table`` is not a table name.
    """
    if not reference_table.isidentifier():
        raise ValueError(f"not a table name: {reference_table!r}")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {_ITEMS} AS
        WITH staged AS (
            -- One parse of each payload for every field (a second json_exists parse costs ~0.4 s at 10^7 labels).
            SELECT item_id, dataset, user_id,
                   json_extract_string(payload, ['$.kind', '$.answer_a', '$.answer_b', '$.split', '$.tier',
                                                 '$.order_seed']) AS v
            FROM items WHERE stage = $stage
        )
        SELECT s.item_id, s.dataset, s.user_id, v[1] AS kind, length(v[2]) AS len_a, length(v[3]) AS len_b,
               v[4] AS split, v[5] AS tier, v[6] IS NULL AS shown, r.human
        FROM staged s LEFT JOIN {reference_table} r USING (item_id)
    """, {"stage": STAGE})
    try:
        yield
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_ITEMS}")


_PAIR_ITEMS = f"""
    pair_items AS (SELECT * FROM {_ITEMS} WHERE kind = $pairwise)"""

_PARSED = f"""
    parsed AS (
        SELECT l.item_id, l.rater, l.condition, l.label
        FROM labels l SEMI JOIN pair_items USING (item_id)
        WHERE {_JUDGE} AND l.label IS NOT NULL
    )"""


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> pd.DataFrame:
    # Through Arrow: the same dtypes as .df() without building strings one Python object at a time.
    return cast(pd.DataFrame, con.sql(sql, params=params).to_arrow_table().combine_chunks().to_pandas())


def _params(**extra: object) -> dict[str, object]:
    return {"pairwise": PAIRWISE_KIND, **extra}


def datasets_of_kinds(con: duckdb.DuckDBPyConnection, kinds: Sequence[str]) -> list[str]:
    """Stage-3 datasets holding an item of one of ``kinds`` (inside :func:`staged`), sorted."""
    rows = con.execute(f"SELECT DISTINCT dataset FROM {_ITEMS} WHERE list_contains($kinds, kind) ORDER BY dataset",
                       {"kinds": list(kinds)}).fetchall()
    return [str(r[0]) for r in rows]


def pair_judge_counts(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Every comparable judge's labels on pairwise items, counted in one pass (inside :func:`staged`).

    Reverse-order runs (conditions ending in :data:`REVERSED`) are counted too: they are no judge of their own,
    the caller reads from them only that :func:`swap_counts` has something to count.

    One row per (dataset, rater, rater_kind, condition, user, blind human reference ``human`` (missing: the item
    has none), ``label`` (missing: the answer could not be parsed), item ``split`` and ``tier``, ``error`` text):
    the confusion counts, the bias sums, the accuracy by split or tier and the failures by reason, all at once.
    Parsed labels carry no error text, so the failures' texts split no other count.

    Returns:
        Those key columns and ``n`` (labels), ``failed`` (unparsed), ``joined`` (parsed with a reference), ``hits``
        (the reference's label), ``decisive`` (A/B verdicts with a reference), ``first`` (of those, the answer
        shown first), ``unequal`` (decisive on answers of unequal length), ``longer`` (of those, the longer
        answer), and per :data:`BASELINE_SIDES` judge (``always_a``, ``always_b``, ``always_longer``,
        ``always_shorter``, ``always_tie``) the joined items where it gives the reference's label: each trivial
        judge's hits on the items this judge is scored on.
    """
    counts = _rows(con, f"""
        WITH {_PAIR_ITEMS},
        judged AS (
            SELECT p.dataset, l.rater, l.rater_kind, l.condition, p.user_id, p.human, l.label, p.split, p.tier,
                   l.error, l.label IS NOT NULL AND p.human IS NOT NULL AS joined,
                   l.label IN ('A', 'B') AND p.human IS NOT NULL AS decisive,
                   (l.label = 'A') <> coalesce(try_cast(l.meta->>'swapped' AS BOOLEAN), false) AS first,
                   p.len_a <> p.len_b AS unequal, (l.label = 'A') = (p.len_a > p.len_b) AS longer, p.len_a, p.len_b
            FROM labels l JOIN pair_items p USING (item_id)
            WHERE {_JUDGE}
        )
        SELECT dataset, rater, rater_kind, condition, user_id, human, label, split, tier, error, count(*) AS n,
               count(*) FILTER (label IS NULL) AS failed, count(*) FILTER (joined) AS joined,
               count(*) FILTER (joined AND label = human) AS hits, count(*) FILTER (decisive) AS decisive,
               count(*) FILTER (decisive AND first) AS first, count(*) FILTER (decisive AND unequal) AS unequal,
               count(*) FILTER (decisive AND unequal AND longer) AS longer, {_baseline_hits("human", "joined")}
        FROM judged
        GROUP BY ALL
    """, _params())
    # The report filters and groups these counts per dataset and judge: their text keys as categories.
    return as_categories(counts, ["dataset", "rater", "rater_kind", "condition", "user_id", "human", "label", "split",
                                  "tier"])


def pair_human_counts(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The blind human reference of pairwise items, per (dataset, user): what the humans' own biases read.

    Returns:
        Per (dataset, user): ``n`` items with a reference, ``decisive`` (A/B), ``first`` (A: the answer listed
        first, the order humans saw where ``shown``), ``unequal``/``longer`` as :func:`pair_judge_counts`,
        ``ties``, the hits of every :data:`BASELINE_SIDES` judge (``always_a`` ... ``always_tie``, as in
        :func:`pair_judge_counts`), ``shown`` (every item's order is the one the humans saw).
    """
    return _rows(con, f"""
        WITH {_PAIR_ITEMS}
        SELECT p.dataset, p.user_id, count(*) AS n, count(*) FILTER (p.human IN ('A', 'B')) AS decisive,
               count(*) FILTER (p.human = 'A') AS first,
               count(*) FILTER (p.human IN ('A', 'B') AND p.len_a <> p.len_b) AS unequal,
               count(*) FILTER (p.human IN ('A', 'B') AND p.len_a <> p.len_b
                                AND (p.human = 'A') = (p.len_a > p.len_b)) AS longer,
               count(*) FILTER (p.human = 'tie') AS ties, {_baseline_hits("p.human", "true")},
               bool_and(p.shown) AS shown
        FROM pair_items p WHERE p.human IS NOT NULL
        GROUP BY ALL
    """, _params())


def pair_human_raters(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The blind human raters of each dataset's pairwise items (inside :func:`staged`).

    Returns:
        Columns ``dataset``, ``rater``: one row each.
    """
    return _rows(con, f"""
        WITH {_PAIR_ITEMS}
        SELECT DISTINCT p.dataset, l.rater FROM labels l JOIN pair_items p USING (item_id)
        WHERE {blind_human_sql("l")}
    """, _params())


def profile_gap_counts(con: duckdb.DuckDBPyConnection, baseline: str = NO_PROFILE) -> pd.DataFrame:
    """Per (dataset, judge, condition with the profile, user): hits with and without it on the same items.

    A condition ``X`` or ``X+suffix`` (``X`` not ``baseline``, not a reverse-order run) is paired with
    ``baseline`` or ``baseline+suffix`` of the same rater; only items both judged (parsed) that have a blind
    human reference count.

    Args:
        con: A connection inside :func:`staged`.
        baseline: The condition without the profile (``report response --baseline-condition``).

    Returns:
        Columns ``dataset``, ``rater``, ``with_condition``, ``without_condition``, ``user_id``, ``hits_with``,
        ``hits_without``, ``n``.
    """
    return _rows(con, f"""
        WITH {_PAIR_ITEMS}, {_PARSED},
        with_profile AS (
            SELECT *, $no_profile || CASE WHEN strpos(condition, '+') BETWEEN 1 AND length(condition) - 1
                                          THEN substr(condition, strpos(condition, '+')) ELSE '' END AS paired
            FROM parsed
            WHERE split_part(condition, '+', 1) <> $no_profile AND NOT ends_with(condition, $reversed)
        )
        SELECT p.dataset, w.rater, w.condition AS with_condition, o.condition AS without_condition, p.user_id,
               count(*) FILTER (w.label = p.human) AS hits_with, count(*) FILTER (o.label = p.human) AS hits_without,
               count(*) AS n
        FROM with_profile w
        JOIN (SELECT * FROM parsed WHERE split_part(condition, '+', 1) = $no_profile) o
          ON o.item_id = w.item_id AND o.rater = w.rater AND o.condition = w.paired
        JOIN pair_items p ON p.item_id = w.item_id
        WHERE p.human IS NOT NULL
        GROUP BY ALL
    """, _params(no_profile=baseline, reversed=REVERSED))


def swap_counts(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per (dataset, rater, condition): items judged (parsed) in both orders, and those with the same verdict.

    Returns:
        Columns ``dataset``, ``rater``, ``condition``, ``pairs``, ``same``.
    """
    return _rows(con, f"""
        WITH {_PAIR_ITEMS}, {_PARSED}
        SELECT p.dataset, a.rater, a.condition, count(*) AS pairs, count(*) FILTER (a.label = b.label) AS same
        FROM parsed a
        JOIN (SELECT * FROM parsed WHERE ends_with(condition, $reversed)) b
          ON b.item_id = a.item_id AND b.rater = a.rater AND b.condition = a.condition || $reversed
        JOIN pair_items p ON p.item_id = a.item_id
        GROUP BY ALL
    """, _params(reversed=REVERSED))


def gvp_counts(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per (dataset, judge, condition, user) on generic-vs-personalised pairs: verdicts, and personalised wins.

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``rows`` (labels, parsed
        or not), ``n`` (parsed verdicts), ``preferred`` (verdicts naming the personalised answer).
    """
    return _rows(con, f"""
        WITH gvp AS (SELECT item_id, dataset, user_id FROM {_ITEMS} WHERE kind = $gvp)
        SELECT g.dataset, l.rater, l.rater_kind, l.condition, g.user_id, count(*) AS rows, count(l.label) AS n,
               count(*) FILTER (l.label = $personalized) AS preferred
        FROM labels l JOIN gvp g USING (item_id)
        WHERE {_JUDGE} AND NOT ends_with(l.condition, $reversed)
        GROUP BY ALL
    """, {"gvp": GVP_KIND, "personalized": PERSONALIZED, "reversed": REVERSED})


_SINGLE_ITEMS = f"""
    single_items AS (SELECT item_id, dataset, user_id, human FROM {_ITEMS} WHERE list_contains($single, kind))"""


def single_label_values(con: duckdb.DuckDBPyConnection, single_kinds: Sequence[str]) -> pd.DataFrame:
    """Every distinct label of the single-response items (kinds ``single_kinds``), inside :func:`staged`.

    What is read of every rater's labels beyond the counts below: which datasets hold a label, which labels
    (a yes/no dataset's), and the labels the category rule reads where no stored record describes a dataset.

    Returns:
        Columns ``dataset``, ``rater_kind``, ``condition``, ``label`` (missing: a failure) and
        ``human_labelled`` (the item is one a human labelled:
        :func:`~personagap.analysis.comparable.human_labelled_sql`); one row per distinct combination.
    """
    return _rows(con, f"""
        WITH {_SINGLE_ITEMS}
        SELECT DISTINCT s.dataset, l.rater_kind, l.condition, l.label, {human_labelled_sql("l")} AS human_labelled
        FROM labels l JOIN single_items s USING (item_id)
    """, {"single": list(single_kinds)})


def single_human_labels(con: duckdb.DuckDBPyConnection, single_kinds: Sequence[str],
                        datasets: Sequence[str]) -> pd.DataFrame:
    """The human labels (parsed) on the single-response items (kinds ``single_kinds``) of ``datasets``, one a row.

    Agreement among humans (alpha, Fleiss, each pair of raters, the rated aspects) needs them per item; every
    judge figure is computed from :func:`single_judge_counts` and :func:`single_rater_counts`, so no judge
    label is read one a row.

    Returns:
        The columns of :func:`personagap.store.load_labels`, with its dtypes.
    """
    return con.execute("""
        SELECT l.item_id, l.rater, l.rater_kind, l.condition, l.label, l.raw, l.reason, l.error, l.run_id, l.meta,
               i.dataset, i.stage, i.user_id, i.prompt_index, i.attribute, i.position
        FROM labels l JOIN items i USING (item_id)
        WHERE i.stage = $stage AND list_contains($datasets, i.dataset) AND list_contains($single, i.payload->>'kind')
          AND list_contains($humans, l.rater_kind) AND l.label IS NOT NULL
    """, {"stage": STAGE, "datasets": list(datasets), "single": list(single_kinds),
          "humans": list(HUMAN_KINDS)}).df()


def single_reference_counts(con: duckdb.DuckDBPyConnection, single_kinds: Sequence[str]) -> pd.DataFrame:
    """Per single-response dataset and blind reference label, the number of items with it (inside :func:`staged`).

    The reference is :func:`staged`'s (the one reference query), so a section's reference rates are those of the
    items every judge is scored against.

    Returns:
        Columns ``dataset``, ``human``, ``n``.
    """
    return _rows(con, f"""
        SELECT dataset, human, count(*) AS n FROM {_ITEMS}
        WHERE list_contains($single, kind) AND human IS NOT NULL
        GROUP BY ALL
    """, {"single": list(single_kinds)})


def single_judge_counts(con: duckdb.DuckDBPyConnection, single_kinds: Sequence[str]) -> pd.DataFrame:
    """Every comparable judge's labels on single-response items against the blind reference (inside :func:`staged`).

    One pass: the confusion counts with the reference, the labels off a dataset's scale (the caller tells them
    apart on the distinct labels) and the failures by error text.

    Returns:
        Per (``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human`` (the blind reference;
        missing where the item has none), ``label`` (missing: unparsed), ``error``): ``n`` labels and ``first``,
        the smallest row id among them (the store's order, in which failures are listed by reason).
    """
    return _rows(con, f"""
        WITH {_SINGLE_ITEMS}
        SELECT s.dataset, l.rater, l.rater_kind, l.condition, s.user_id, s.human, l.label, l.error, count(*) AS n,
               min(l.rowid) AS first
        FROM labels l JOIN single_items s USING (item_id)
        WHERE {_JUDGE}
        GROUP BY ALL
    """, {"single": list(single_kinds)})


def single_rater_counts(con: duckdb.DuckDBPyConnection, single_kinds: Sequence[str]) -> pd.DataFrame:
    """Every comparable judge's parsed labels on single-response items against each blind human rater's label.

    Human raters are ``human`` labels under the blind condition (stored majorities are no rater); only items both
    labelled count (inside :func:`staged`).

    Returns:
        Per (``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human_rater``, ``human`` (that
        rater's label), ``label``): ``n`` items.
    """
    return _rows(con, f"""
        WITH {_SINGLE_ITEMS}
        SELECT s.dataset, l.rater, l.rater_kind, l.condition, s.user_id, h.rater AS human_rater, h.label AS human,
               l.label, count(*) AS n
        FROM labels l JOIN single_items s USING (item_id) JOIN labels h ON h.item_id = l.item_id
        WHERE {_JUDGE} AND l.label IS NOT NULL AND {blind_vote_sql("h")}
          AND h.label IS NOT NULL
        GROUP BY ALL
    """, {"single": list(single_kinds)})
