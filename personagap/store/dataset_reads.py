"""Reads of what the store says about its datasets: origins, item kinds, record entries, labels on a scale.

The dataset records themselves are :mod:`personagap.datasets`' rule; these are the queries it (and the labels API)
reads the store with.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

# The rule module whose SQL fragments the store uses (allowed store -> rule import, see .importlinter).
from personagap.analysis.comparable import human_labelled_sql

DEFAULT_ORIGIN = "real"
"""The origin of a dataset the store does not tag (``origin:<dataset>`` in ``meta``)."""

PAIRWISE_PAYLOAD_KINDS: tuple[str, ...] = ("pairwise", "generic_vs_personalized")
"""Stage-3 payload kinds whose items are two answers to choose between."""

# Per (stage, dataset), its most common item kind (a stage-3 dataset normally holds one kind).
ITEM_KINDS_SQL = f"""
    SELECT stage, dataset, CASE
        WHEN stage = 'extraction' THEN 'verification'
        WHEN stage = 'relevance' THEN 'relevance'
        WHEN payload->>'kind' IN ({", ".join(f"'{k}'" for k in PAIRWISE_PAYLOAD_KINDS)}) THEN 'pairwise'
        ELSE 'single' END AS item_kind, count(*) AS n
    FROM items GROUP BY ALL
"""


def _scale_labels_sql(source: str) -> str:
    # ``source``: the labels to look through (a CTE of some of them); the human-labelled test reads them all.
    return f"""
    SELECT DISTINCT i.stage, i.dataset, l.rater_kind, l.condition, l.label
    FROM {source} l JOIN items i USING (item_id)
    WHERE l.label IS NOT NULL AND {human_labelled_sql("l")}
"""


SCALE_LABELS_SQL = _scale_labels_sql("labels")
"""Every distinct label per (stage, dataset, rater kind, condition) on human-labelled items: what the
category rule (:func:`~personagap.analysis.comparable.categories_for`) reads."""


def dataset_origins(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every dataset in the store -> ``real`` or ``synthetic`` (untagged datasets are ``real``).

    Args:
        con: An open connection (read-only is fine).

    Returns:
        Dataset key -> origin, sorted by dataset.
    """
    tagged = dict(con.execute("SELECT substr(key, 8), value FROM meta WHERE key LIKE 'origin:%'").fetchall())
    datasets = [d for (d,) in con.execute("SELECT DISTINCT dataset FROM items ORDER BY dataset").fetchall()]
    return {d: str(tagged.get(d, DEFAULT_ORIGIN)) for d in sorted(set(datasets) | set(tagged))}


def item_kinds(con: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Per (stage, dataset, item kind) its number of items (:data:`ITEM_KINDS_SQL`)."""
    return con.execute(ITEM_KINDS_SQL).df()


def record_entries(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The meta entries dataset records are read from: ``dataset:``, legacy ``labels:`` and ``origin:`` keys."""
    return {str(k): str(v) for k, v in con.execute(
        "SELECT key, value FROM meta WHERE key LIKE 'dataset:%' OR key LIKE 'labels:%' OR key LIKE 'origin:%'"
    ).fetchall()}


def meta_with_prefix(con: duckdb.DuckDBPyConnection, prefix: str) -> dict[str, str]:
    """The meta entries whose key starts with ``prefix`` (key -> value)."""
    return {str(k): str(v) for k, v in con.execute("SELECT key, value FROM meta WHERE starts_with(key, ?)",
                                                   [prefix]).fetchall()}


def datasets_with_human_labels(con: duckdb.DuckDBPyConnection, stage: str) -> list[str]:
    """The datasets of ``stage`` with at least one label by an individual human (rater kind ``human``), sorted."""
    return [str(r[0]) for r in con.execute(
        "SELECT DISTINCT i.dataset FROM labels l JOIN items i USING (item_id) "
        "WHERE i.stage = ? AND l.rater_kind = 'human' ORDER BY 1", [stage]).fetchall()]


def unsettled_scale_labels(con: duckdb.DuckDBPyConnection, settled: Sequence[str],
                           datasets: Sequence[str]) -> pd.DataFrame:
    """:data:`SCALE_LABELS_SQL`'s rows of ``datasets`` whose label is not one of ``settled``.

    The label filter reads the labels table alone, so DuckDB applies it before any join.
    """
    return con.execute(f"""
        WITH unsettled AS (SELECT * FROM labels WHERE NOT list_contains($settled, label))
        SELECT * FROM ({_scale_labels_sql("unsettled")})
        WHERE list_contains($datasets, dataset)
    """, {"settled": list(settled), "datasets": list(datasets)}).df()


def tidy_label_rows(con: duckdb.DuckDBPyConnection, *, stage: str | None = None, dataset: str | None = None,
                    rater_kind: str | None = None, condition: str | None = None,
                    include_failures: bool = True) -> pd.DataFrame:
    """Every stored label with its item's context (:func:`personagap.labels_api.load_labels` without ``origin``).

    Besides the context, a label's ``confidence`` and ``confidence_scale`` (its meta) and the item's linking keys
    (payload ``conversation``, ``response_kind``, ``attribute_id``, ``attributes_used`` as JSON text,
    ``input_condition``, ``system``, ``personalized``; a stage-1 item's ``extractor``): every column the label
    format reads. Filters are bound parameters; ``include_failures`` False drops labels whose answer did not parse.
    """
    where, params = ["TRUE"], []
    for col, value in (("i.stage", stage), ("i.dataset", dataset), ("l.rater_kind", rater_kind),
                       ("l.condition", condition)):
        if value is not None:
            where.append(f"{col} = ?")
            params.append(value)
    if not include_failures:
        where.append("l.label IS NOT NULL")
    return con.execute(f"""
        SELECT i.dataset, i.stage, coalesce(i.payload ->> '$.source_id', i.item_id) AS item_id, i.user_id,
               l.rater, l.rater_kind, l.condition, l.label, l.reason, l.error, l.run_id, i.attribute,
               coalesce(p.prompt_text, i.payload ->> '$.question', i.payload ->> '$.context') AS prompt,
               coalesce(i.payload ->> '$.profile', u.profile_text) AS profile,
               i.payload ->> '$.answer_a' AS response_a, i.payload ->> '$.answer_b' AS response_b,
               i.payload ->> '$.response' AS response, l.item_id AS stored_item_id,
               TRY_CAST(l.meta ->> '$.confidence' AS DOUBLE) AS confidence,
               l.meta ->> '$.confidence_scale' AS confidence_scale,
               i.payload ->> '$.conversation' AS conversation, i.payload ->> '$.response_kind' AS response_kind,
               i.payload ->> '$.attribute_id' AS attribute_id, i.payload ->> '$.attributes_used' AS attributes_used,
               i.payload ->> '$.input_condition' AS input_condition, i.payload ->> '$.system' AS system,
               i.payload ->> '$.personalized' AS personalized, i.payload ->> '$.extractor' AS extractor
        FROM labels l JOIN items i USING (item_id)
        LEFT JOIN prompts p ON p.dataset = i.dataset AND p.user_id = i.user_id AND p.prompt_index = i.prompt_index
        LEFT JOIN users u ON u.dataset = i.dataset AND u.user_id = i.user_id
        WHERE {' AND '.join(where)}
        ORDER BY i.dataset, i.stage, item_id, l.rater, l.condition""", params).df()


def file_meta_value(path: str | Path, key: str) -> list[tuple[Any, ...]] | None:
    """The ``meta`` rows of ``key`` in a DuckDB file opened read-only as it is (no schema check, no migration).

    Returns:
        The rows (``[]`` when the key is absent); None when the file cannot be opened or has no ``meta`` table.
    """
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        return [tuple(r) for r in con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()]
    except duckdb.Error:
        return None
    finally:
        con.close()
