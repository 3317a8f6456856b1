"""The stage pages' prevalence-robust panel, built from the diagnosis instead of a reload of every label.

Computing the panel from the stage's tidy labels (the per-label oracle ``panel_rows`` in
``tests/support/oracles.py``) would mean loading all of them at 10^6 labels (seconds). The diagnosis the Overview
caches has already scored every judge on the same per-user confusion tables (users sorted by id) with the one CI
rule (:func:`~personagap.analysis.agreement.cluster_estimate`): its
:class:`~personagap.analysis.diagnosis.JudgeScore`
carries the panel.
This module reuses those figures and asks SQL only for what the diagnosis does not keep:

* the base-rate row (a judge always giving the humans' most common label) needs every reference item of the
  dataset, per user and class: one ``GROUP BY``;
* ``panel_rows`` codes all judges of a dataset over one label set, the union of the reference labels and
  every judge's labels. Where a judge's own set is smaller (a PRISM judge that never says "tie" on an A/B/tie
  dataset), AC1 and PABAK depend on the number of classes, so that dataset's judges are recomputed from
  per-user counts (another ``GROUP BY``) over the dataset's label set, exactly as ``panel_rows`` does.

Which labels are compared stays :mod:`personagap.analysis.comparable`'s rule: the diagnosis and both queries
select through its SQL predicates. The figures are the ones ``panel_rows`` gives (the dashboard tests compare
them row by row on the real releases; ``benchmarks/dashboard_stage_render.py`` on a 10^6-label store).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from personagap.analysis.agreement import FloatArray, ci_list, estimate
from personagap.analysis.comparable import judge_display
from personagap.analysis.diagnosis import Diagnosis, JudgeScore
from personagap.analysis.panel import PANEL_METRICS
from personagap.analysis.robust import (
    BASE_RATE_JUDGE,
    PANEL_POINT_ONLY,
    base_rate_tables,
    code_labels,
    panel_fields,
)

_FIELDS = ("kappa", "kappa_ci", *(f for m in PANEL_METRICS for f in (m, f"{m}_ci")), *PANEL_POINT_ONLY)


def dataset_categories(reference: pd.DataFrame, scales: dict[str, list[str]]) -> dict[str, list[str]]:
    """Per dataset with a blind reference, the categories its tables are coded over: the diagnosis's scale.

    Args:
        reference: Per-user reference counts (``dataset``, ``user_id``, ``human``, ``n``).
        scales: :func:`personagap.analysis.diagnosis.stage_scales` (comparable.categories_for's one rule).
    """
    return {str(ds): scales[str(ds)] for ds in sorted(set(reference["dataset"].astype(str))) if str(ds) in scales}


def needs_recount(diagnosis: Diagnosis, stage: str, categories: dict[str, list[str]], *, level: float) -> list[str]:
    """Datasets whose judges' panel figures cannot be taken from the diagnosis.

    Those where some judge was scored over another label set than the panel's (AC1 and PABAK would differ), or
    all of them when the diagnosis used another confidence level.
    """
    if diagnosis.ci_level != level:
        return sorted(categories)
    return sorted({j.dataset for j in diagnosis.stage(stage).judges if j.categories != categories.get(j.dataset)})


def _tables(users: pd.Series, human: pd.Series, judge: pd.Series, counts: pd.Series,
            categories: list[str]) -> FloatArray:
    # Per-user confusion tables (U, K, K), users in sorted id order as robust.user_tables codes them, so the
    # rows match the diagnosis's tables user for user.
    ids, index = np.unique(users.astype(str).to_numpy(), return_inverse=True)
    h, j = code_labels(categories, human.astype(str), judge.astype(str))
    k = len(categories)
    flat = (index.astype(np.int64) * k + h) * k + j
    # With weights bincount returns float64 (numpy's stubs say integer).
    tables = cast(FloatArray, np.bincount(flat, weights=counts.to_numpy(dtype=float), minlength=len(ids) * k * k))
    return tables.reshape(len(ids), k, k)


def _row(judge: str, rater: str, kind: str, condition: str, dataset: str, tables: FloatArray,
         level: float) -> dict[str, Any]:
    kappa = estimate(tables, "kappa", level=level)
    return {"judge": judge, "rater": rater, "rater_kind": kind, "condition": condition, "dataset": dataset,
            "humans": "blind", "n": int(tables.sum()), "n_users": int(tables.shape[0]), "kappa": kappa.value,
            "kappa_ci": ci_list(kappa), **panel_fields(tables, level=level)}


def _score_row(j: JudgeScore) -> dict[str, Any]:
    return {"judge": j.judge, "rater": j.rater, "rater_kind": j.rater_kind, "condition": j.condition,
            "dataset": j.dataset, "humans": "blind", "n": j.n, "n_users": j.n_users,
            **{f: getattr(j, f) for f in _FIELDS}}


def panel_from_diagnosis(diagnosis: Diagnosis, stage: str, datasets: Iterable[str], reference: pd.DataFrame,
                         scales: dict[str, list[str]], pair_counts: pd.DataFrame | None = None, *,
                         level: float = 0.95) -> list[dict[str, Any]]:
    """The rows ``panel_rows`` gives for ``datasets`` (blind humans), from the diagnosis and aggregate counts.

    Args:
        diagnosis: The store's diagnosis (its judge scores carry kappa and the panel).
        stage: Pipeline stage.
        datasets: Datasets to cover, in order.
        reference: :func:`personagap.dashboard.queries.panel_reference`'s per-user reference counts.
        scales: Per dataset, the categories the diagnosis scores it over (``panel_reference``'s second part).
        pair_counts: :func:`personagap.dashboard.queries.panel_pair_counts` for at least the datasets that
            :func:`needs_recount` names .
        level: Confidence level.

    Returns:
        Per dataset, one row per judge in (rater, kind, condition) order, then the base-rate row; the keys of
        the per-label oracle ``panel_rows`` (``tests/support/oracles.py``).
    """
    s = diagnosis.stage(stage)
    categories = dataset_categories(reference, scales)
    recount = set(needs_recount(diagnosis, stage, categories, level=level))
    out: list[dict[str, Any]] = []
    for ds in datasets:
        if ds not in categories:
            continue  # no reference: panel_rows gives nothing either
        cats = categories[ds]
        if ds in recount:
            if pair_counts is None:
                raise ValueError(f"dataset {ds!r} needs per-user pair counts (its judges' label sets differ)")
            part = pair_counts[pair_counts["dataset"] == ds]
            for (rater, kind, condition), g in part.groupby(["rater", "rater_kind", "condition"], sort=True):
                tables = _tables(g["user_id"], g["human"], g["label"], g["n"], cats)
                out.append(_row(judge_display(str(rater), str(condition)), str(rater), str(kind), str(condition), ds,
                                tables, level))
        else:
            # panel_rows' order: judges grouped by (rater, kind, condition), sorted.
            scores = [j for j in s.judges if j.dataset == ds]
            out += [_score_row(j) for j in sorted(scores, key=lambda j: (j.rater, j.rater_kind, j.condition))]
        ref = reference[reference["dataset"] == ds]
        tables = _tables(ref["user_id"], ref["human"], ref["human"], ref["n"], cats)
        base, _ = base_rate_tables(tables)
        out.append(_row(BASE_RATE_JUDGE, BASE_RATE_JUDGE, "base-rate", "", ds, base, level))
    return out


def stage_panel(db: str | Path, diagnosis: Diagnosis, stage: str, datasets: Iterable[str], *,
                level: float = 0.95) -> list[dict[str, Any]]:
    """:func:`panel_from_diagnosis` with its counts read from ``db`` (read-only, two short batches at most)."""
    from personagap.dashboard import queries

    datasets = list(datasets)
    if not datasets:
        return []
    reference, scales = queries.panel_reference(db, stage)
    categories = dataset_categories(reference, scales)
    wanted = [ds for ds in needs_recount(diagnosis, stage, categories, level=level) if ds in datasets]
    pairs = queries.panel_pair_counts(db, stage, wanted) if wanted else None
    return panel_from_diagnosis(diagnosis, stage, datasets, reference, scales, pairs, level=level)
