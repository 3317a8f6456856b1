"""The dashboard's data: cached, read-only queries and reports (results are cached, never a connection)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from personagap.analysis.agreement import DEFAULT_SEED
from personagap.analysis.diagnosis import Diagnosis
from personagap.dashboard import access, queries
from personagap.store import DEFAULT_DB
from personagap.vocabulary import HUMAN_SETS

DB_ENV = "PERSONAGAP_DB"
TTL_SECONDS = 60
DIAGNOSES_KEPT = 2
"""Diagnoses kept, one per store state: the current one and the one before the last write (a page may still be
drawing it); Refresh clears them."""


def db_path() -> str:
    """The database this dashboard reads (``PERSONAGAP_DB``, set by ``personagap dashboard --db``)."""
    return os.environ.get(DB_ENV, DEFAULT_DB)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def db_state(db: str) -> dict[str, int]:
    """The store's row counts (:func:`queries.db_state`), cached; the first read the server's start-up made."""
    from personagap.dashboard import prefetch

    early = prefetch.take_state(db)  # read before the port opened (personagap.dashboard.serve); only once
    return queries.db_state(db) if early is None else early


@st.cache_data(max_entries=DIAGNOSES_KEPT, show_spinner="Computing agreement with humans…")
def _cached_diagnosis(db: str, seed: int, state: tuple[int, int]) -> Diagnosis:
    """The diagnosis of every stage (the Overview's figures) for the store as of ``state``, cached.

    Keyed on the file's change marker (:func:`prefetch.stamp`), not on a time to live: the Overview and every stage
    page share one diagnosis per store state, however long a reader stays on a page (with the minute's TTL a page
    opened more than a minute after the Overview computed it again: ~13 s of the Stage 2 page at 10^7 labels). A
    write changes the marker; Refresh clears it.
    """
    from personagap.analysis.diagnosis_store import diagnose_store
    from personagap.dashboard import prefetch

    # Computed while the server booted (personagap.dashboard.serve, default seed); only the first call can take it.
    found = prefetch.take(db, seed)
    if not isinstance(found, Diagnosis):
        # Computed by the Overview's pipeline worker from the counts of its pipeline view (overview.pipeline).
        found = prefetch.take_shared(db, seed)
    if not isinstance(found, Diagnosis):
        with access.reading():
            found = diagnose_store(db, seed=seed).diagnosis
    # The Overview's worker then reads its pipeline view alone for this state instead of a second diagnosis.
    prefetch.note_computed(db, seed, state)
    return found


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def filter_options(db: str) -> dict[str, list[str]]:
    """The Disagreements page's filter choices (stages, datasets, judges), cached."""
    return queries.filter_options(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def stage_inventory(db: str, stage: str) -> pd.DataFrame:
    """What the store holds for ``stage``, per dataset and rater, cached."""
    return queries.stage_inventory(db, stage)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing position and length bias…")
def relevance_bias(db: str, stage: str) -> pd.DataFrame:
    """Share labelled yes per rater by the attribute's list position and by length quartile, with user-clustered CIs."""
    from personagap.analysis.response import rate_from_counts
    from personagap.store.dashboard_reads import bias_counts

    # Counted per (rater, user, position, length, yes) in the store: no row per label (issue 31).
    with queries.read_only(db) as con:
        labels = bias_counts(con, stage)
    rows: list[dict[str, Any]] = []
    if labels.empty:
        return pd.DataFrame(rows)
    # Length quartiles over the items' attribute lengths (the same cut for every rater), each label counted.
    known = labels.dropna(subset=["length"])
    if known["length"].nunique() >= 4:
        per_length = known.groupby("length", sort=True)["n"].sum()
        edges = np.unique(_count_quantiles(per_length.index.to_numpy(), per_length.to_numpy(),
                                           np.array([0, 0.25, 0.5, 0.75, 1])))
        names = [f"length Q{i + 1} ({int(edges[i])}–{int(edges[i + 1])} chars)" for i in range(len(edges) - 1)]
        labels["length_q"] = pd.cut(labels["length"], edges, labels=names, include_lowest=True).astype(object)
    factors = {"position": "position", "length": "length_q"}
    for factor, column in factors.items():
        if column not in labels or labels[column].isna().all():
            continue
        part = labels.dropna(subset=[column])
        for (rater, who, bucket), g in part.groupby(["rater", "who", column], sort=True):
            n = int(g["n"].sum())
            if n < 5:
                continue
            est = rate_from_counts(g["user_id"].to_numpy(), g["hit"].to_numpy() * g["n"].to_numpy(), g["n"].to_numpy())
            label = f"position {int(bucket) + 1}" if factor == "position" else str(bucket)
            rows.append({"factor": factor, "bucket": label, "rater": rater, "who": who, "n": n,
                         "rate": est.value, "ci_low": est.ci[0], "ci_high": est.ci[1]})
    return pd.DataFrame(rows)


def _count_quantiles(values: np.ndarray[Any, Any], counts: np.ndarray[Any, Any],
                     q: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``np.quantile(np.repeat(values, counts), q)`` (its default, linear method) without the array of every label.

    ``values`` sorted. At 10^7 labels the repeated array was 10^7 entries for five edges. The order statistics
    either side of each quantile's position are found in the cumulative counts; the interpolation between them is
    numpy's, and exact here (q's positions are multiples of 1/4).
    """
    cum = np.cumsum(counts)
    total = int(cum[-1])
    pos = (total - 1) * q
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, total - 1)
    below, above = values[np.searchsorted(cum, lo, side="right")], values[np.searchsorted(cum, hi, side="right")]
    return np.asarray(below + (above - below) * (pos - lo), dtype=float)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the stage-3 report…")
def response_report(db: str) -> dict[str, Any]:
    """The stage-3 report (as `personagap report response` builds it) as plain data, cached."""
    from personagap.stages.response import report_response

    with access.reading():
        return report_response(db).model_dump()


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the stage-1 report…")
def extraction_report(db: str) -> dict[str, Any]:
    """The stage-1 report (as `personagap report extraction` builds it) as plain data, cached."""
    from personagap.stages.extraction import report_extraction

    with access.reading():
        return report_extraction(db).model_dump()


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the stage-2 report…")
def _relevance_report(db: str) -> dict[str, Any]:
    """The stage-2 report (as `personagap report relevance` builds it) as plain data, cached."""
    from personagap.stages.relevance import report_relevance

    with access.reading():
        return report_relevance(db).model_dump()


def stage_report(db: str, stage: str) -> dict[str, Any]:
    """The stage's own report (the same figures as `personagap report STAGE`), cached."""
    if stage == "relevance":
        return _relevance_report(db)
    return response_report(db) if stage == "response" else extraction_report(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the robust agreement panel…")
def robust_panel(db: str, stage: str, datasets: tuple[str, ...]) -> pd.DataFrame | None:
    """The prevalence-robust agreement panel of a stage's datasets (None when it has no row), cached."""
    from personagap.dashboard.robust_panel import stage_panel

    # The diagnosis (cached, shared with the Overview) has scored every judge already: only the base-rate row
    # and datasets whose label set differs from a judge's own need counts from the file, never every label.
    rows = stage_panel(db, diag(), stage, datasets)
    return pd.DataFrame(rows) if rows else None


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def matrix_choices(db: str) -> pd.DataFrame:
    """The (stage, dataset) pairs that have two raters on the same items, cached."""
    return queries.matrix_choices(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def pilot_report(db: str) -> dict[str, Any] | None:
    """Agreement among the relevance raters (blind humans first, else anchored ones), or None without any."""
    from personagap.stages.relevance import multi_rater_report
    from personagap.store import load_labels
    from personagap.store.dashboard_reads import human_rater_counts
    from personagap.store.dataset_reads import datasets_with_human_labels

    with queries.read_only(db) as con:
        # Only a dataset with two human raters can give a report: the others' labels are never read (issue 31).
        raters = human_rater_counts(con, "relevance")
        datasets = [ds for ds in datasets_with_human_labels(con, "relevance") if raters.get(ds, 0) >= 2]
        frames = {ds: load_labels(con, dataset=ds, stage="relevance") for ds in datasets}
    # Blind humans first (the only agreement that may serve as a ceiling); else the anchored annotators', shown
    # as such. Never the two mixed.
    for which in HUMAN_SETS:
        for ds, labels in frames.items():
            report = multi_rater_report(labels, ds, which=which)
            if report is not None:
                return {**report.model_dump(), "which": which}
    return None


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def count_disagreements(db: str, f: queries.DisagreementFilter) -> int:
    """How many judge labels match the Disagreements filter, cached."""
    return queries.count_disagreements(db, f)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def disagreements_page(db: str, f: queries.DisagreementFilter, limit: int, offset: int) -> pd.DataFrame:
    """One page of judge labels matching the Disagreements filter, cached."""
    return queries.disagreements_page(db, f, limit=limit, offset=offset)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def case(db: str, item_id: str) -> dict[str, Any] | None:
    """One item whole (payload, profile, every label), or None when it is gone, cached."""
    return queries.case_detail(db, item_id)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def runs(db: str) -> pd.DataFrame:
    """Every run's metadata with its label count, cached."""
    return queries.runs(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def best_run_pair(db: str) -> tuple[str, str] | None:
    """The two runs sharing the most items (the comparison's default), cached."""
    return queries.best_run_pair(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def compare(db: str, a: str, b: str) -> dict[str, Any]:
    """Two runs' labels on their shared items: summary, cross-table and differences, cached."""
    return queries.compare_runs(db, a, b)


def diag() -> Diagnosis:
    """The diagnosis of the dashboard's database with the default seed (cached)."""
    from personagap.dashboard import prefetch

    db = db_path()
    return _cached_diagnosis(db, DEFAULT_SEED, prefetch.stamp(db))
