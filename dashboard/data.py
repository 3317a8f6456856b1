"""The dashboard's data: cached, read-only queries and reports (results are cached, never a connection)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.analysis.diagnosis import Diagnosis
from personagap.analysis.pairwise import pairwise_agreement
from personagap.dashboard import access, queries
from personagap.dashboard.display import ci, num
from personagap.store import DEFAULT_DB

DB_ENV = "PERSONAGAP_DB"
TTL_SECONDS = 60


def db_path() -> str:
    """The database this dashboard reads (``PERSONAGAP_DB``, set by ``personagap dashboard --db``)."""
    return os.environ.get(DB_ENV, DEFAULT_DB)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def db_state(db: str) -> dict[str, int]:
    """The store's row counts (:func:`queries.db_state`), cached; the first read the server's start-up made."""
    from personagap.dashboard import prefetch

    early = prefetch.take_state(db)  # read before the port opened (personagap.dashboard.serve); only once
    return queries.db_state(db) if early is None else early


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing agreement with humans…")
def _cached_diagnosis(db: str, n_resamples: int, seed: int) -> Diagnosis:
    """The diagnosis of every stage (the Overview's figures), cached; the server's prefetch when it has one."""
    from personagap.analysis.diagnosis_store import diagnose_store
    from personagap.dashboard import prefetch

    # Computed while the server booted (personagap.dashboard.serve, default resamples and seed); only the first
    # call can take it.
    early = prefetch.take(db, n_resamples, seed)
    if isinstance(early, Diagnosis):
        return early
    with access.reading():
        return diagnose_store(db, n_resamples=n_resamples, seed=seed).diagnosis


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
    from personagap.analysis.response import clustered_rate

    labels = queries.bias_labels(db, stage)
    rows: list[dict[str, Any]] = []
    if labels.empty:
        return pd.DataFrame(rows)
    # Length quartiles over the items' attribute lengths (the same cut for every rater).
    lengths = labels["length"].dropna()
    if lengths.nunique() >= 4:
        edges = np.unique(np.quantile(lengths, [0, 0.25, 0.5, 0.75, 1]))
        names = [f"length Q{i + 1} ({int(edges[i])}–{int(edges[i + 1])} chars)" for i in range(len(edges) - 1)]
        labels["length_q"] = pd.cut(labels["length"], edges, labels=names, include_lowest=True).astype(object)
    factors = {"position": "position", "length": "length_q"}
    for factor, column in factors.items():
        if column not in labels or labels[column].isna().all():
            continue
        part = labels.dropna(subset=[column])
        for (rater, who, bucket), g in part.groupby(["rater", "who", column], sort=True):
            if len(g) < 5:
                continue
            est = clustered_rate(g["hit"].to_numpy(bool), g["user_id"].to_numpy(), n_resamples=DEFAULT_RESAMPLES,
                                 seed=DEFAULT_SEED)
            label = f"position {int(bucket) + 1}" if factor == "position" else str(bucket)
            rows.append({"factor": factor, "bucket": label, "rater": rater, "who": who, "n": len(g),
                         "rate": est.value, "ci_low": est.ci[0], "ci_high": est.ci[1]})
    return pd.DataFrame(rows)


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
    rows = stage_panel(db, diag(), stage, datasets, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED)
    return pd.DataFrame(rows) if rows else None


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def matrix_choices(db: str) -> pd.DataFrame:
    """The (stage, dataset) pairs that have two raters on the same items, cached."""
    return queries.matrix_choices(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing pairwise agreement…")
def pairwise(db: str, stage: str, dataset: str) -> dict[str, Any]:
    """Pairwise kappa among every rater of a dataset: the matrix, shared item counts, groups and group means."""
    labels = queries.agreement_labels(db, stage, dataset)
    groups = {str(r): ("human majority" if k == "human_majority" else "human" if k == "human" else "judge")
              for r, k in labels[["rater", "rater_kind"]].drop_duplicates().itertuples(index=False)}
    result = pairwise_agreement(labels[["item_id", "rater", "label", "cluster"]].drop_duplicates(["item_id", "rater"]),
                                groups, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED)
    summary = pd.DataFrame([{"pairs": k, "mean kappa": num(g.mean_kappa.value), "95% CI": ci(list(g.mean_kappa.ci)),
                             "rater pairs": g.n_pairs}
                            for k, g in result.groups.items()])
    return {"matrix": result.matrix, "overlap": result.overlap, "groups": groups, "summary": summary}


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def pilot_report(db: str) -> dict[str, Any] | None:
    """Agreement among the relevance raters (blind humans first, else anchored ones), or None without any."""
    from personagap.stages.relevance import multi_rater_report
    from personagap.store import load_labels

    with queries.read_only(db) as con:
        datasets = [r[0] for r in con.execute(
            "SELECT DISTINCT i.dataset FROM labels l JOIN items i USING (item_id) "
            "WHERE i.stage = 'relevance' AND l.rater_kind = 'human' ORDER BY 1").fetchall()]
        frames = {ds: load_labels(con, dataset=ds, stage="relevance") for ds in datasets}
    # Blind humans first (the only agreement that may serve as a ceiling); else the anchored annotators', shown
    # as such. Never the two mixed.
    for which in ("blind", "anchored"):
        for ds, labels in frames.items():
            report = multi_rater_report(labels, ds, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED, which=which)
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
    """The diagnosis of the dashboard's database with the default resamples and seed (cached)."""
    return _cached_diagnosis(db_path(), DEFAULT_RESAMPLES, DEFAULT_SEED)
