"""The SQL of a jury (:mod:`personagap.judges.jury`): its jurors' counts, and its vote staged and written in SQL.

The vote's rules are :func:`personagap.judges.jury.jury_vote`'s (``majority``: the unique most frequent label, a tie
undecided; ``confidence``: the unique largest sum of the jurors' confidences as probabilities, a missing confidence
invalid), computed here per item in one GROUP BY so that no juror label passes through Python: at 10^7 labels a
jury of three judges reads 6 * 10^6 juror labels and writes 2 * 10^6 jury labels. The confidences' mapping onto
probabilities stays Python's (:func:`personagap.confidence.as_probability`), applied to the distinct (confidence,
scale) pairs only (:func:`confidence_values`) and handed back as a small table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, cast

import duckdb
import pandas as pd

from personagap.store.atomic import transaction
from personagap.store.writes import upsert, upsert_counted

JuryRule = Literal["majority", "confidence"]

_JURORS = "(SELECT unnest($raters) AS rater, unnest($conditions) AS condition)"
_CONFIDENCE = "TRY_CAST(json_extract_string(l.meta, '$.confidence') AS DOUBLE)"
_SCALE = "json_extract_string(l.meta, '$.confidence_scale')"
_VOTES = "_jury_labels"
_PROBABILITIES = "_jury_probabilities"
NO_CONFIDENCE = "invalid: a juror's label carries no confidence"
JURY_MEMORY_LIMIT = "1GB"
"""DuckDB's memory limit while the vote runs (spilling beyond it)."""
TIE = {"majority": "undecided: the jurors' labels tie", "confidence": "undecided: the jurors' confidences tie"}


def _params(jurors: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    return {"raters": [r for r, _ in jurors], "conditions": [c for _, c in jurors]}


def juror_summary(con: duckdb.DuckDBPyConnection, jurors: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """Per juror found with a parsed label: ``rater``, ``condition``, ``rater_kind``, ``labels`` (its count)."""
    return cast(pd.DataFrame, con.execute(f"""
        SELECT l.rater, l.condition, l.rater_kind, count(*) AS labels
        FROM labels l JOIN {_JURORS} j USING (rater, condition)
        WHERE l.label IS NOT NULL
        GROUP BY ALL ORDER BY 1, 2, 3
    """, _params(jurors)).df())


def confidence_values(con: duckdb.DuckDBPyConnection, jurors: Sequence[tuple[str, str]]) -> pd.DataFrame:
    """The distinct stated ``confidence`` and ``scale`` of the jurors' parsed labels (None where not stated)."""
    return cast(pd.DataFrame, con.execute(f"""
        SELECT DISTINCT {_CONFIDENCE} AS confidence, {_SCALE} AS scale
        FROM labels l JOIN {_JURORS} j USING (rater, condition)
        WHERE l.label IS NOT NULL
    """, _params(jurors)).df())


def write_jury(con: duckdb.DuckDBPyConnection, jurors: Sequence[tuple[str, str]], rule: JuryRule,
               probabilities: pd.DataFrame, *, rater: str, rater_kind: str, condition: str,
               run: dict[str, object]) -> tuple[int, int]:
    """Replace ``rater``'s labels under ``condition`` by the jury's vote on every item its jurors labelled.

    One transaction: the jury's earlier labels are deleted (an item its jurors no longer label loses its jury
    label too), its run row upserted, and one label per item inserted from SQL. A label's meta is
    ``{"rule": RULE, "jurors": {"RATER|CONDITION": LABEL, ...}}`` (jurors in that key's order).

    Args:
        con: A writable connection.
        jurors: (rater, condition) of each juror.
        rule: ``majority`` or ``confidence``.
        probabilities: :func:`confidence_values`' rows with a ``probability`` column (NaN where a confidence
            is no vote's weight).
        rater: The jury's rater key.
        rater_kind: Its kind (its jurors').
        condition: The condition its labels are stored under.
        run: The jury's run row (the ``runs`` table's columns).

    Returns:
        (items labelled, items undecided).
    """
    weight = "p.probability" if rule == "confidence" else "1.0"
    con.register(_PROBABILITIES, probabilities[["confidence", "scale", "probability"]])
    # Sums of confidences are compared as Python compares them (exact equality of the sums); the per-item
    # sum of at most a handful of jurors in juror order (the order Python added them in is immaterial here:
    # a tie of float sums is an exact tie either way, as in jury_vote).
    sql = f"""
        CREATE OR REPLACE TEMP TABLE {_VOTES} AS
        WITH v AS (
            SELECT l.item_id, l.rater || '|' || l.condition AS juror, l.label,
                   CASE WHEN p.probability IS NULL OR isnan(p.probability) THEN NULL ELSE {weight} END AS w
            FROM labels l JOIN {_JURORS} j USING (rater, condition)
                 LEFT JOIN {_PROBABILITIES} p
                 ON p.confidence IS NOT DISTINCT FROM {_CONFIDENCE} AND p.scale IS NOT DISTINCT FROM {_SCALE}
            WHERE l.label IS NOT NULL
        ),
        per_label AS (
            SELECT item_id, label, {'count(*)' if rule == 'majority' else 'sum(w)'} AS weight,
                   count(*) FILTER (WHERE w IS NULL) AS unweighted
            FROM v GROUP BY ALL
        ),
        per_item AS (
            SELECT item_id, sum(unweighted) AS unweighted, arg_max(label, weight) AS winner,
                   count(*) FILTER (WHERE weight = top) AS at_top
            FROM (SELECT *, max(weight) OVER (PARTITION BY item_id) AS top FROM per_label)
            GROUP BY item_id
        ),
        decided AS (
            SELECT item_id,
                   CASE WHEN {'FALSE' if rule == 'majority' else 'unweighted > 0'} THEN NULL
                        WHEN at_top = 1 THEN winner END AS label,
                   CASE WHEN {'FALSE' if rule == 'majority' else 'unweighted > 0'} THEN $no_confidence
                        WHEN at_top = 1 THEN NULL ELSE $tie END AS error
            FROM per_item
        ),
        juror_json AS (
            SELECT item_id, '{{' || string_agg(to_json(juror) || ':' || to_json(label), ',' ORDER BY juror) || '}}'
                   AS jurors
            FROM v GROUP BY item_id
        )
        SELECT d.item_id, $rater AS rater, $rater_kind AS rater_kind, $condition AS condition, d.label,
               NULL::TEXT AS raw, NULL::TEXT AS reason, d.error, $run_id AS run_id,
               ('{{"rule":' || to_json($rule) || ',"jurors":' || jj.jurors || '}}')::JSON AS meta
        FROM decided d JOIN juror_json jj USING (item_id)
    """
    params = {**_params(jurors), "rater": rater, "rater_kind": rater_kind, "condition": condition,
              "run_id": str(run["run_id"]), "rule": rule, "no_confidence": NO_CONFIDENCE, "tie": TIE[rule]}
    # DuckDB takes up to 80% of the machine's memory for the vote's aggregates unless told otherwise (2.5 GB at
    # 10^7 labels, measured); under a limit it spills to disk at no measured cost in time (1.2 GB).
    con.execute(f"SET memory_limit = '{JURY_MEMORY_LIMIT}'")
    try:
        with transaction(con):
            con.execute(sql, params)
            con.execute("DELETE FROM labels WHERE rater = ? AND condition = ?", [rater, condition])
            upsert(con, "runs", [run])
            upsert_counted(con, "labels", _VOTES, keys_checked=True)  # one row per item by construction
            row = con.execute("SELECT count(*) FILTER (WHERE label IS NOT NULL), "
                              "count(*) FILTER (WHERE label IS NULL) FROM " + _VOTES).fetchall()[0]
    finally:
        con.execute("DROP TABLE IF EXISTS " + _VOTES)
        con.unregister(_PROBABILITIES)
        con.execute("RESET memory_limit")  # the store's connections never set one (personagap/store/connection.py)
    return int(row[0]), int(row[1])
