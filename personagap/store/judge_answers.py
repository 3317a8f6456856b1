"""Reads of stored judge answers: the answer cache, a run's parameters, repeated samples' labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import pandas as pd

CACHE_ROWS_SQL = "FROM judge_cache WHERE model = ? AND (judge = ? OR starts_with(judge, ?)) AND raw IS NOT NULL"
"""``judge_cache`` rows a run of a judge may reuse: the same model, the base judge's or any of its programs'
(``base@program``) rows, written by ``judge`` runs or earlier optimisations alike (one key scheme)."""


def cached_answers(con: duckdb.DuckDBPyConnection, keys: list[str]) -> list[tuple[str, str | None, Any]]:
    """(key, raw answer, usage) of the cache rows with these keys (usage: JSON text or a parsed value)."""
    rows = con.execute("SELECT key, raw, usage FROM judge_cache WHERE key IN (SELECT unnest(?))", [keys]).fetchall()
    return [(str(k), r, u) for k, r, u in rows]


def program_cache_count(con: duckdb.DuckDBPyConnection, model: str, judge: str) -> int:
    """How many cached answers of ``model`` a run of base judge ``judge`` (or one of its programs) may reuse."""
    row = con.execute(f"SELECT count(*) {CACHE_ROWS_SQL}", [model, judge, f"{judge}@"]).fetchone()
    return int(row[0]) if row else 0


def program_cache_rows(con: duckdb.DuckDBPyConnection, model: str, judge: str) -> list[tuple[str, str]]:
    """(key, raw answer) of every cached answer of ``model`` a run of base judge ``judge`` may reuse."""
    rows = con.execute(f"SELECT key, raw {CACHE_ROWS_SQL}", [model, judge, f"{judge}@"]).fetchall()
    return [(str(k), str(r)) for k, r in rows]


def run_parameters(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The stored run's parameters as JSON text; None when there is no such run or it has none."""
    row = con.execute("SELECT CAST(parameters AS TEXT) FROM runs WHERE run_id = ?", [run_id]).fetchall()
    return str(row[0][0]) if row and row[0][0] else None


def parsed_conditions(con: duckdb.DuckDBPyConnection, run_ids: list[str]) -> list[str]:
    """The conditions runs ``run_ids`` stored parsed labels under, sorted."""
    rows = con.execute("SELECT DISTINCT condition FROM labels WHERE run_id IN (SELECT unnest($runs)) "
                       "AND label IS NOT NULL ORDER BY condition", {"runs": run_ids}).fetchall()
    return [str(r[0]) for r in rows]


def sample_labels(con: duckdb.DuckDBPyConnection, raters: Sequence[str], condition: str) -> pd.DataFrame:
    """Parsed labels of ``raters`` under ``condition``: ``item_id``, ``user_id``, ``sample`` (the rater), ``label``."""
    return con.execute("""
        SELECT l.item_id, i.user_id, l.rater AS sample, l.label
        FROM labels l JOIN items i USING (item_id)
        WHERE l.rater IN (SELECT unnest($raters)) AND l.condition = $condition AND l.label IS NOT NULL
    """, {"raters": list(raters), "condition": condition}).df()
