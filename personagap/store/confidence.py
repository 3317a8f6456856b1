"""Aggregate reads of judges' confidences: per (dataset, judge, user, confidence value) counts that DuckDB builds.

A judge label's confidence lives in ``labels.meta`` (no schema change): ``confidence`` (a number on the judge's own
scale) and ``confidence_scale`` (``"1-100"``, ``"0-100"``, ``"probability"``, ...). A confidence that did not parse
is ``confidence_error`` beside a label that still stands. Which labels count is
:mod:`personagap.analysis.comparable`'s rule (its SQL predicates and its one reference query), so calibration and
coverage curves score the same labels against the same humans as every report.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import duckdb
import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from personagap.analysis.comparable import blind_vote_sql, comparable_judge_sql, reference_sql

_JUDGE = comparable_judge_sql("l")


_TALLY = "_pg_confidence_counts"
COUNTS_MEMORY_LIMIT = "1GB"
"""DuckDB's memory limit while it counts (:func:`confidence_counts`, :func:`confidence_counts_by_judge`)."""

_TALLY_SQL = f"""
        WITH {reference_sql("blind")},
        staged AS MATERIALIZED (
            -- Each item's reference joined once per item, not once per label (MATERIALIZED: else DuckDB joins the
            -- labels with the items and then with the references, two joins of every label; 17 vs 19.5 s at 10^7
            -- labels under load 9); LEFT, so a label of an item without one still counts among the judge's labels.
            SELECT i.item_id, i.dataset, i.user_id, r.human
            FROM items i LEFT JOIN reference r USING (item_id)
            WHERE i.stage = $stage AND ($dataset IS NULL OR i.dataset = $dataset)
        ),
        judged AS (
            -- One JSON parse per label for all three keys (each json_extract_string call parses it again).
            SELECT s.dataset, l.rater, l.rater_kind, l.condition, s.user_id, s.human, l.label,
                   json_extract_string(l.meta, ['$.confidence', '$.confidence_scale', '$.confidence_error']) AS m
            FROM labels l JOIN staged s USING (item_id)
            WHERE {_JUDGE} AND l.label IS NOT NULL
        )
        SELECT dataset, rater, rater_kind, condition, coalesce(m[2], '') AS confidence_scale, user_id,
               TRY_CAST(m[1] AS DOUBLE) AS confidence, human, label, count(*) AS n, count(m[3]) AS failures
        FROM judged
        GROUP BY ALL
"""
"""Every parsed comparable judge label of the stage, counted per (judge, scale, user, confidence, reference, label):
the count rows (a finite confidence and a reference) and the labels without either, for the gaps, in one pass."""

_COUNTED = "human IS NOT NULL AND isfinite(confidence)"
"""The tally's count rows: a usable confidence (isfinite is NULL, so false, where none parsed) and a reference."""

_COLUMNS = ("dataset", "rater", "rater_kind", "condition", "confidence_scale", "user_id", "confidence", "human",
            "label", "n")


@dataclass(frozen=True)
class JudgeCounts:
    """One judge's confidence counts on one dataset, and how many of its labels carry no usable confidence."""

    dataset: str
    rater: str
    rater_kind: str
    condition: str
    labels: int
    """Parsed comparable labels of the judge (with or without a confidence or a reference)."""
    with_confidence: int
    """Of those, labels with a finite numeric confidence."""
    confidence_failures: int
    """Labels whose stated confidence did not parse (``confidence_error``; the label stands)."""
    scales: tuple[str, ...]
    """The distinct confidence scales of the count rows, sorted (``""``: none stated)."""
    rows: pd.DataFrame
    """``user_id``, ``confidence``, ``human``, ``label``, ``n``: :func:`confidence_counts`' rows of this judge, in
    the same order."""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(dataset, rater, rater_kind, condition)."""
        return self.dataset, self.rater, self.rater_kind, self.condition


@contextmanager
def _tally(con: duckdb.DuckDBPyConnection, stage: str, dataset: str | None) -> Iterator[str]:
    """The tally as a temporary table (its name), built under :data:`COUNTS_MEMORY_LIMIT`, dropped on exit."""
    # DuckDB takes up to 80% of the machine's memory for the aggregate unless told otherwise; under a limit it
    # spills to disk (the store's connections never set one: personagap/store/connection.py).
    con.execute(f"SET memory_limit = '{COUNTS_MEMORY_LIMIT}'")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_TALLY} AS {_TALLY_SQL}", {"stage": stage, "dataset": dataset})
        yield _TALLY
    finally:
        con.execute(f"DROP TABLE IF EXISTS {_TALLY}")
        con.execute("RESET memory_limit")


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
        ``confidence``, ``human``, ``label``, ``n``, sorted by all of them.
    """
    with _tally(con, stage, dataset) as table:
        return cast(pd.DataFrame, con.sql(f"SELECT {', '.join(_COLUMNS)} FROM {table} WHERE {_COUNTED} "
                                          "ORDER BY ALL").df())


def confidence_counts_by_judge(con: duckdb.DuckDBPyConnection, stage: str,
                            dataset: str | None = None) -> list[JudgeCounts]:
    """Each judge's :func:`confidence_counts` rows and labels without a usable confidence, from one pass over labels.

    One entry per (dataset, rater, rater_kind, condition) with at least one count row, in sorted order; a judge's
    ``rows`` are its rows of :func:`confidence_counts` in the same order (by scale, user, confidence, reference,
    label). The tally is kept in a temporary table and read a judge at a time as Arrow columns: reading the whole
    result into pandas at once held ~4.7 GB at 10^7 labels (5 * 10^6 count rows). DuckDB does not sort a judge's
    rows: numpy orders them (a stable sort of integer codes took 0.1 s where DuckDB's ORDER BY over the text took
    ~1.4 s a judge at 10^7 labels); the order matters because calibration sums floats row by row.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        dataset: Only this dataset (None: every dataset of the stage).
    """
    with _tally(con, stage, dataset) as table:
        gaps = con.execute(f"""
            SELECT dataset, rater, rater_kind, condition, sum(n) AS labels,
                   coalesce(sum(n) FILTER (WHERE isfinite(confidence)), 0) AS with_confidence,
                   sum(failures) AS failures,
                   bool_or({_COUNTED}) AS counted
            FROM {table}
            WHERE dataset IS NOT NULL AND rater IS NOT NULL AND rater_kind IS NOT NULL AND condition IS NOT NULL
            GROUP BY ALL ORDER BY ALL""").fetchall()
        out = []
        for ds, rater, kind, condition, labels, with_confidence, failures, counted in gaps:
            if not counted:
                continue
            arrow = con.sql(f"SELECT confidence_scale, user_id, confidence, human, label, n FROM {table} "
                            f"WHERE {_COUNTED} AND dataset = $ds AND rater = $rater AND rater_kind = $kind "
                            "AND condition = $condition",
                            params={"ds": ds, "rater": rater, "kind": kind, "condition": condition}).to_arrow_table()
            scales, rows = _sorted_rows(arrow)
            out.append(JudgeCounts(dataset=str(ds), rater=str(rater), rater_kind=str(kind),
                                   condition=str(condition), labels=int(labels),
                                   with_confidence=int(with_confidence), confidence_failures=int(failures),
                                   scales=scales, rows=rows))
        return out


def _text_codes(column: pa.ChunkedArray) -> tuple[list[str], npt.NDArray[np.intp]]:
    """The distinct texts of a column without nulls in code-point order, and each row's position among them."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    texts = [str(t) for t in encoded.dictionary.to_pylist()]
    order = sorted(range(len(texts)), key=texts.__getitem__)  # Python orders str by code point, as DuckDB does
    rank = np.empty(len(texts), dtype=np.intp)
    rank[order] = np.arange(len(texts))
    return [texts[i] for i in order], rank[encoded.indices.to_numpy(zero_copy_only=False)]


def _sorted_rows(arrow: pa.Table) -> tuple[tuple[str, ...], pd.DataFrame]:
    """A judge's count rows (Arrow) sorted by scale, user, confidence, reference, label, and its distinct scales."""
    codes = {c: _text_codes(arrow.column(c)) for c in ("confidence_scale", "user_id", "human", "label")}
    confidence = arrow.column("confidence").to_numpy()
    # np.lexsort sorts by the last key first; the rows are distinct groups, so no two compare equal.
    order = np.lexsort((codes["label"][1], codes["human"][1], confidence, codes["user_id"][1],
                        codes["confidence_scale"][1]))
    taken = arrow.select(["user_id", "confidence", "human", "label", "n"]).take(order)
    return tuple(codes["confidence_scale"][0]), taken.to_pandas()


def has_blind_pairs(con: duckdb.DuckDBPyConnection, stage: str) -> bool:
    """Whether some item of ``stage`` holds two or more blind human votes: no human ceiling of it without one.

    The ceiling's humans are exactly the labels of such items (``diagnosis_inputs``' ``humans``: items with two or
    more parsed blind votes), so a stage without one has none to read; this check groups the human votes only,
    where reading them joins every label of the store with its item (~5 s at 10^7 labels under load).
    """
    rows = con.sql(f"""
        SELECT EXISTS (
            SELECT 1 FROM labels l JOIN items i USING (item_id)
            WHERE {blind_vote_sql("l")} AND l.label IS NOT NULL AND i.stage = $stage
            GROUP BY l.item_id HAVING count(*) >= 2)
    """, params={"stage": stage}).fetchall()
    return bool(rows[0][0])


def any_confidence(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether any label in the store states a confidence (or a confidence that failed to parse).

    A cheap scan of ``labels.meta`` that spares the per-stage tally (:func:`confidence_counts_by_judge`: every judge
    label joined with its item and the blind reference) on the common store where no judge states one.
    """
    # Every key written beside a confidence starts with '"confidence' (confidence, confidence_scale,
    # confidence_error), so a label this misses has none of them.
    rows = con.execute("SELECT EXISTS (SELECT 1 FROM labels WHERE meta IS NOT NULL "
                       """AND contains(CAST(meta AS VARCHAR), '"confidence'))""").fetchall()
    return bool(rows[0][0])
