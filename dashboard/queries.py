"""Read-only reads behind the dashboard; plain functions over a DB path, no Streamlit and no SQL.

Each function opens the store read-only for one short batch of reads and closes it again, because DuckDB lets a
writer in only while no other process holds the file: a long judge run can then write between two dashboard
queries, and the dashboard retries briefly (:func:`personagap.store.connect`) while a batch lands. The SQL is the
store's (:mod:`personagap.store.dashboard_reads`: every filter a bound parameter, the text static).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from personagap.dashboard import access
from personagap.store import connect
from personagap.store import dashboard_reads as reads
from personagap.store.dashboard_reads import DISAGREEMENT_KINDS as DISAGREEMENT_KINDS
from personagap.store.dashboard_reads import DisagreementFilter as DisagreementFilter

#: How long a read waits for a writer (a judge run's batch, an import) to let go of the file.
READ_WAIT_SECONDS = 30.0


@contextlib.contextmanager
def read_only(db: str | Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the store read-only for one batch of queries, through this process's gate (see :mod:`.access`)."""
    with access.reading():
        con = connect(db, read_only=True, wait_seconds=READ_WAIT_SECONDS)
        try:
            yield con
        finally:
            con.close()


def db_state(db: str | Path) -> dict[str, int]:
    """Return row counts of the main tables (all zero for a fresh store)."""
    with read_only(db) as con:
        return reads.db_state(con)


def filter_options(db: str | Path) -> dict[str, list[str]]:
    """Distinct stages, datasets and judges present, for filter widgets."""
    with read_only(db) as con:
        return reads.filter_options(con)


def stage_inventory(db: str | Path, stage: str) -> pd.DataFrame:
    """Labels of one stage counted per dataset, rater kind, rater and condition."""
    with read_only(db) as con:
        return reads.stage_inventory(con, stage)


def bias_labels(db: str | Path, stage: str) -> pd.DataFrame:
    """Yes/no labels of every comparable judge and the blind human reference, with position and length.

    Rows: ``rater``, ``who`` ('humans' | 'judge'), ``user_id``, ``position`` (the attribute's place in
    its list, where the release keys by it), ``length`` (characters of the attribute) and ``hit`` (1 = yes).
    """
    with read_only(db) as con:
        return reads.bias_labels(con, stage)


def bias_counts(db: str | Path, stage: str) -> pd.DataFrame:
    """:func:`bias_labels` counted per (rater, who, user, position, length, hit): column ``n``."""
    with read_only(db) as con:
        return reads.bias_counts(con, stage)


def panel_reference(db: str | Path, stage: str) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """What the robust panel needs beyond the diagnosis, aggregated in SQL (no label is loaded one by one).

    Returns:
        ``reference``: per ``dataset``, ``user_id`` and blind reference label ``human``, the count ``n`` of the
        stage's items with that reference; ``scales``: per dataset, the categories its comparisons are scored
        over (:func:`personagap.analysis.diagnosis.stage_scales`, the diagnosis's own rule). Which labels count
        is :mod:`personagap.analysis.comparable`'s rule.
    """
    from personagap.analysis.diagnosis import stage_scales

    with read_only(db) as con:
        return reads.panel_reference(con, stage), stage_scales(con, stage)


def panel_pair_counts(db: str | Path, stage: str, datasets: list[str]) -> pd.DataFrame:
    """Per judge (rater, rater_kind, condition), user, reference label and judge label: the count of items.

    Only for ``datasets`` (the robust panel asks for those whose label set differs from a judge's own).

    Returns:
        Columns ``dataset``, ``rater``, ``rater_kind``, ``condition``, ``user_id``, ``human``, ``label``, ``n``.
    """
    with read_only(db) as con:
        return reads.panel_pair_counts(con, stage, datasets)


def agreement_labels(db: str | Path, stage: str, dataset: str) -> pd.DataFrame:
    """Long labels (item_id, rater, rater_kind, label, cluster) of one dataset for the pairwise matrix.

    Blind human labels and comparable judge labels only (:mod:`personagap.analysis.comparable`); failures
    are never verdicts.
    """
    with read_only(db) as con:
        return reads.agreement_labels(con, stage, dataset)


def matrix_choices(db: str | Path) -> pd.DataFrame:
    """(stage, dataset) pairs with at least two raters, with rater and label counts."""
    with read_only(db) as con:
        return reads.matrix_choices(con)


def count_disagreements(db: str | Path, f: DisagreementFilter) -> int:
    """Number of judge labels matching the filter."""
    with read_only(db) as con:
        return reads.count_disagreements(con, f)


def disagreements_page(db: str | Path, f: DisagreementFilter, *, limit: int = 50, offset: int = 0) -> pd.DataFrame:
    """One page of judge labels matching the filter, in a stable order (paged in SQL)."""
    with read_only(db) as con:
        return reads.disagreements_page(con, f, limit=limit, offset=offset)


def case_detail(db: str | Path, item_id: str) -> dict[str, Any] | None:
    """Everything about one item: the item, its prompt, the user's profile and every label on it.

    Returns:
        ``item`` (dict, payload decoded), ``prompt_text``, ``profile_text``, ``profile`` (attributes frame)
        and ``labels`` (frame), or None when the item does not exist.
    """
    with read_only(db) as con:
        rows = reads.case_rows(con, item_id)
    if rows is None:
        return None
    item = dict(rows.item)
    payload = item.get("payload")
    item["payload"] = json.loads(payload) if isinstance(payload, str) and payload else {}
    return {"item": item, "prompt_text": rows.prompt_text, "profile_text": rows.profile_text,
            "profile": rows.profile, "labels": rows.labels}


def runs(db: str | Path) -> pd.DataFrame:
    """Every run with how many labels it wrote, newest first."""
    from personagap.liveness import effective_status  # core, not judges/: the dashboard never loads DSPy

    with read_only(db) as con:
        frame = reads.runs(con)
    # A killed judge run never wrote its end: show it as 'interrupted' once its process is gone.
    frame["status"] = [effective_status(str(s), p) for s, p in zip(frame["status"], frame["parameters"], strict=True)]
    return frame


def best_run_pair(db: str | Path) -> tuple[str, str] | None:
    """The two runs that labelled the most items in common (the Runs page's default comparison)."""
    with read_only(db) as con:
        return reads.best_run_pair(con)


def compare_runs(db: str | Path, run_a: str, run_b: str) -> dict[str, Any]:
    """Compare the labels two runs wrote on the items both labelled.

    Returns:
        ``summary`` (one-row frame: labels of each run, shared items, agreeing items),
        ``crosstab`` (label of A x label of B counts) and ``differences`` (up to 200 differing items).
    """
    with read_only(db) as con:
        return dict(reads.compare_runs(con, run_a, run_b))
