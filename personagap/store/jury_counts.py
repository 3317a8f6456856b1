"""The SQL of a jury (:mod:`personagap.judges.jury`): its jurors' counts, and its vote computed and written in SQL.

The vote's rules are :func:`personagap.judges.jury.jury_vote`'s (``majority``: the unique most frequent label, a tie
undecided; ``confidence``: the unique largest sum of the jurors' confidences as probabilities, a missing confidence
invalid), computed here per item in one GROUP BY so that no juror label passes through Python: at 10^7 labels a
jury of three judges reads 6 * 10^6 juror labels and writes 2 * 10^6 jury labels. The confidences' mapping onto
probabilities stays Python's (:func:`personagap.confidence.as_probability`), applied to the distinct (confidence,
scale) pairs only (:func:`confidence_values`) and handed back as a small table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Literal, cast

import duckdb
import pandas as pd

from personagap.analysis.comparable import judge_display_sql
from personagap.store.atomic import transaction
from personagap.store.writes import upsert

JuryRule = Literal["majority", "confidence"]

_JURORS = "(SELECT unnest($raters) AS rater, unnest($conditions) AS condition)"
_CONFIDENCE = "TRY_CAST(json_extract_string(l.meta, '$.confidence') AS DOUBLE)"
_SCALE = "json_extract_string(l.meta, '$.confidence_scale')"
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
    """Per juror, the distinct stated ``confidence`` and ``scale`` of its parsed labels (None where not stated).

    Columns ``rater``, ``condition``, ``confidence``, ``scale``: per juror, so that a juror that states no usable
    confidence at all can be named before a confidence-weighted vote (issue 32).
    """
    return cast(pd.DataFrame, con.execute(f"""
        SELECT DISTINCT l.rater, l.condition, {_CONFIDENCE} AS confidence, {_SCALE} AS scale
        FROM labels l JOIN {_JURORS} j USING (rater, condition)
        WHERE l.label IS NOT NULL
    """, _params(jurors)).df())


def jury_jurors(con: duckdb.DuckDBPyConnection, stage: str, dataset: str) -> dict[str, list[str]]:
    """Per jury with a label in the dataset's stage, its jurors, both by display name (``rater [condition]``).

    Read from the jury's run (``parameters.jurors``: ``[[rater, condition], ...]``), for the Agreement page's
    leaving a jury and its own jurors out of its group means.
    """
    rows = con.execute(f"""
        SELECT DISTINCT {judge_display_sql('l')} AS jury, CAST(json_extract(r.parameters, '$.jurors') AS VARCHAR)
        FROM (SELECT DISTINCT l.rater, l.condition, l.run_id FROM labels l JOIN items i USING (item_id)
              WHERE i.stage = ? AND i.dataset = ?) l
        JOIN runs r USING (run_id)
        WHERE json_extract(r.parameters, '$.jurors') IS NOT NULL
    """, [stage, dataset]).fetchall()
    out: dict[str, list[str]] = {}
    for jury, jurors in rows:
        names = out.setdefault(str(jury), [])
        for rater, condition in json.loads(jurors):
            name = f"{rater} [{condition}]" if condition else str(rater)
            if name not in names:
                names.append(name)
    return out


def _vote_sql(rule: JuryRule, n_jurors: int) -> str:
    """The INSERT of one jury label per item (see :func:`write_jury`), for ``n_jurors`` jurors sorted by key."""
    # Each juror's label on the item, pivoted by the juror's position in key order: the meta's JSON is built from
    # these columns in that order. An ordered string_agg per item did the same at 18 s of the 22 s vote at 10^7
    # labels (DuckDB sorts within every group); a flag per juror and label costs one more aggregate column.
    flags = "".join(f", bool_or(v.k = {k}) AS j{k}" for k in range(n_jurors))
    picked = "".join(f", first(label) FILTER (WHERE j{k}) AS l{k}" for k in range(n_jurors))
    pairs = ", ".join(f"to_json($keys[{k + 1}]) || ':' || to_json(l{k})" for k in range(n_jurors))
    if rule == "confidence":
        weight = "CASE WHEN p.probability IS NULL OR isnan(p.probability) THEN NULL ELSE p.probability END"
        source = (f"LEFT JOIN {_PROBABILITIES} p ON p.confidence IS NOT DISTINCT FROM {_CONFIDENCE} "
                  f"AND p.scale IS NOT DISTINCT FROM {_SCALE}")
        invalid = "unweighted > 0"
    else:  # a majority counts labels: no confidence is read (nor its JSON parsed)
        weight, source, invalid = "1.0", "", "FALSE"
    return f"""
        INSERT INTO labels (item_id, rater, rater_kind, condition, label, raw, reason, error, run_id, meta)
        WITH jurors AS (
            SELECT unnest($raters) AS rater, unnest($conditions) AS condition, unnest(range(len($raters))) AS k
        ),
        v AS (
            SELECT l.item_id, j.k, l.label, {weight} AS w
            FROM labels l JOIN jurors j USING (rater, condition) {source}
            WHERE l.label IS NOT NULL
        ),
        per_label AS (
            -- Sums of confidences are compared as Python compares them (exact equality of the sums), as in jury_vote.
            SELECT item_id, label, {'count(*)' if rule == 'majority' else 'sum(w)'} AS weight,
                   count(*) FILTER (WHERE w IS NULL) AS unweighted{flags}
            FROM v GROUP BY item_id, label
        ),
        per_item AS (
            -- One label wins iff the two largest weights differ (max(weight, 2): both, ties kept; a window of each
            -- item's largest weight cost ~40% more). A weight is NULL only where a juror's weight is, which makes
            -- the item invalid whatever the rest says.
            SELECT item_id, sum(unweighted) AS unweighted, arg_max(label, weight) AS winner,
                   coalesce(len(max(weight, 2)) = 1 OR max(weight, 2)[1] > max(weight, 2)[2], FALSE) AS decided{picked}
            FROM per_label
            GROUP BY item_id
        )
        SELECT item_id, $rater, $rater_kind, $condition,
               CASE WHEN {invalid} THEN NULL WHEN decided THEN winner END,
               NULL, NULL,
               CASE WHEN {invalid} THEN $no_confidence WHEN decided THEN NULL ELSE $tie END,
               $run_id,
               ('{{"rule":' || to_json($rule) || ',"jurors":{{' || concat_ws(',', {pairs}) || '}}}}')::JSON
        FROM per_item
    """


def write_jury(con: duckdb.DuckDBPyConnection, jurors: Sequence[tuple[str, str]], rule: JuryRule,
               probabilities: pd.DataFrame, *, rater: str, rater_kind: str, condition: str,
               run: dict[str, object], status: Callable[[int, int], str]) -> tuple[int, int, dict[str, int]]:
    """Replace ``rater``'s labels under ``condition`` by the jury's vote on every item its jurors labelled.

    One transaction: one label per item is inserted from SQL (``INSERT ... SELECT``: no label passes through
    Python), the jury's earlier labels are deleted (an item its jurors no longer label loses its jury label too),
    and its run row is upserted with the status ``status`` gives its counts. A label's meta is
    ``{"rule": RULE, "jurors": {"RATER|CONDITION": LABEL, ...}}`` (jurors in that key's order).

    Args:
        con: A writable connection.
        jurors: (rater, condition) of each juror.
        rule: ``majority`` or ``confidence``.
        probabilities: :func:`confidence_values`' ``confidence`` and ``scale`` with a ``probability`` column (NaN
            where a confidence is no vote's weight; a pair given twice counts once).
        rater: The jury's rater key.
        rater_kind: Its kind (its jurors').
        condition: The condition its labels are stored under.
        run: The jury's run row (the ``runs`` table's columns).
        status: The run's stored status from (items labelled, items undecided).

    Returns:
        (items labelled, items undecided, undecided items per reason).
    """
    # Keys in the order the meta lists them (text order, as SQL sorts it: code points); a juror's position in it
    # is its pivot column in _vote_sql.
    ordered = sorted(jurors, key=lambda j: f"{j[0]}|{j[1]}")
    if rule == "confidence":
        con.register(_PROBABILITIES, probabilities[["confidence", "scale", "probability"]]
                     .drop_duplicates(["confidence", "scale"]))
    params = {**_params(ordered), "keys": [f"{r}|{c}" for r, c in ordered], "rater": rater,
              "rater_kind": rater_kind, "condition": condition, "run_id": str(run["run_id"]), "rule": rule,
              "tie": TIE[rule], "no_confidence": NO_CONFIDENCE}
    # DuckDB takes up to 80% of the machine's memory for the vote's aggregates unless told otherwise; under a
    # limit it spills to disk (1.2 GB peak at 10^7 labels).
    con.execute(f"SET memory_limit = '{JURY_MEMORY_LIMIT}'")
    try:
        with transaction(con):
            # The vote reads the jurors' labels as they were before this run; the jury's earlier labels (every
            # label of its rater and condition but this run's) go after, so a jury named like one of its jurors
            # still votes on that juror's labels.
            con.execute(_vote_sql(rule, len(ordered)), params).fetchall()
            con.execute("DELETE FROM labels WHERE rater = ? AND condition = ? AND run_id <> ?",
                        [rater, condition, str(run["run_id"])]).fetchall()
            counted = con.execute("SELECT label IS NOT NULL, error, count(*) FROM labels WHERE run_id = ? "
                                  "GROUP BY ALL", [str(run["run_id"])]).fetchall()
            labelled = sum(int(n) for decided, _, n in counted if decided)
            reasons = {str(error): int(n) for decided, error, n in counted if not decided}
            undecided = sum(reasons.values())
            upsert(con, "runs", [{**run, "status": status(labelled, undecided)}])
    finally:
        if rule == "confidence":
            con.unregister(_PROBABILITIES)
        con.execute("RESET memory_limit")  # the store's connections never set one (personagap/store/connection.py)
    return labelled, undecided, reasons
