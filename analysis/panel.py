"""The prevalence-robust panel, the alternative-annotator test and corrected estimates, as every report shows them.

:mod:`personagap.analysis.robust`, :mod:`personagap.analysis.alt_test` and
:mod:`personagap.analysis.estimates` compute the figures; this module is the one place that turns them
into report fields (judge rows gain :class:`PanelFields`; reports gain ``alt_test`` and ``estimates``
lists) and text, so the stage reports and ``diagnose`` cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

import personagap.analysis.robust as robust  # registers the panel's table metrics
from personagap.analysis.agreement import Estimate, FloatArray, ci_list
from personagap.analysis.agreement import estimates as agreement_estimates
from personagap.analysis.alt_test import DEFAULT_EPSILON, EPSILON_GUIDANCE, Scoring, alt_test_rows
from personagap.analysis.estimates import estimate_line
from personagap.analysis.weighting import Weight
from personagap.records import DatasetScale

# The scale coercion (defined in personagap.scales).
from personagap.scales import as_scale, on_scale
from personagap.vocabulary import HumanSet

PANEL_METRICS: tuple[str, ...] = robust.PANEL_METRICS
"""Panel figures with a CI (any number of classes)."""
BINARY_POINT_METRICS: tuple[str, ...] = robust.PANEL_POINT_ONLY
"""Panel figures for yes/no labels only, without a CI (prevalence and bias indices)."""
ORDINAL_METRICS: tuple[str, ...] = ("weighted_kappa", "alpha", "spearman", "mean_abs_diff")
"""Figures of ordered levels (registered in :mod:`personagap.analysis.agreement`), each with a CI."""
_NAN = float("nan")


def _nan_pair() -> list[float]:
    return [_NAN, _NAN]


class PanelFields(BaseModel):
    """Prevalence-robust agreement beside kappa (same items, same users)."""

    estimand: Weight = Field(
        default="items", description="What the row's table figures estimate: 'items' (pooled over items, heavy "
                                     "users count most) or 'users' (each user's table as proportions, each user "
                                     "once); see docs/methods.md.")
    ac1: float = Field(default=_NAN, description="Gwet's AC1.")
    ac1_ci: list[float] = Field(default_factory=_nan_pair)
    pabak: float = Field(default=_NAN, description="Prevalence- and bias-adjusted kappa.")
    pabak_ci: list[float] = Field(default_factory=_nan_pair)
    mcc: float = Field(default=_NAN, description="Matthews correlation.")
    mcc_ci: list[float] = Field(default_factory=_nan_pair)
    balanced_accuracy: float = Field(default=_NAN, description="Mean recall over the dataset's classes (undefined "
                                                                "when the humans never used one of them).")
    balanced_accuracy_ci: list[float] = Field(default_factory=_nan_pair)
    prevalence_index: float = Field(default=_NAN, description="(both yes - both no) / n; yes/no labels only.")
    bias_index: float = Field(default=_NAN, description="(judge yes - human yes) / n; yes/no labels only.")
    ci_notes: dict[str, str] = Field(
        default_factory=dict, description="Why a figure of this row has no interval, by figure, where the reason is "
                                          "not too few users nor an undefined leave-out (e.g. the figure sits at the "
                                          "edge of its range, or no user's absence moves it): the one CI rule never "
                                          "prints a zero-width interval.")
    scale: str | None = Field(default=None, description="The dataset's scale kind (nominal, ordinal or pairwise); "
                                                        "None where the report did not record it.")
    weighted_kappa: float | None = Field(default=None, description="Quadratic-weighted kappa; ordinal scales only.")
    weighted_kappa_ci: list[float] | None = None
    alpha: float | None = Field(default=None, description="Krippendorff's alpha (ordinal) of judge and reference; "
                                                          "ordinal scales only.")
    alpha_ci: list[float] | None = None
    spearman: float | None = Field(default=None, description="Spearman's rho (mid-ranks); ordinal scales only.")
    spearman_ci: list[float] | None = None
    mean_abs_diff: float | None = Field(default=None, description="Mean |judge - human| in levels; ordinal only.")
    mean_abs_diff_ci: list[float] | None = None


def panel_metrics(binary: bool) -> tuple[str, ...]:
    """The registered metric names to estimate for a judge row (binary-only ones only for yes/no labels)."""
    return PANEL_METRICS + (BINARY_POINT_METRICS if binary else ())


def scale_metrics(scale: DatasetScale) -> tuple[str, ...]:
    """Every registered figure a judge row of a dataset on ``scale`` gets, by the scale alone.

    Kappa, accuracy and the prevalence-robust panel on every scale (balanced accuracy is the macro mean over
    the human classes when there are more than two); the prevalence and bias indices only on two categories;
    quadratic-weighted kappa, ordinal alpha, Spearman and the mean absolute difference on ordinal scales.
    Stage figures (over-selection, precision/recall) are the stage's own, on top of these.
    """
    return ("kappa", "accuracy", *panel_metrics(scale.binary), *(ORDINAL_METRICS if scale.ordinal else ()))


def scale_estimates(human: pd.Series, judge: pd.Series, clusters: pd.Series, scale: DatasetScale | list[str],
                    metrics: tuple[str, ...] | None = None, *, level: float = 0.95) -> dict[str, Estimate]:
    """Registered metrics of a judge against the reference over the dataset's whole scale.

    What :func:`~personagap.analysis.agreement.agreement` computes (same per-user tables, users in sorted id
    order, the one CI rule :func:`~personagap.analysis.agreement.cluster_estimate`), except that the tables span
    the dataset's scale (:func:`personagap.datasets.dataset_records`), in the scale's order, instead of the labels
    this one judge happened to give: AC1 and PABAK depend on the number of categories, so every report scores a
    judge over the same K, and ordinal figures read the levels' values.

    Args:
        human: Reference labels.
        judge: The judge's labels, aligned with ``human``.
        clusters: User of each item.
        scale: The dataset's scale (a bare category list is read as nominal); every label must be on it.
        metrics: Registered metric names; None: :func:`scale_metrics` of the scale.
        level: Confidence level.
    """
    s = as_scale(scale)
    return agreement_estimates(scale_tables(human, judge, clusters, s),
                               scale_metrics(s) if metrics is None else metrics, level=level,
                               levels=s.levels() if s.ordinal else None)


def scale_tables(human: pd.Series, judge: pd.Series, clusters: pd.Series,
                 scale: DatasetScale | list[str]) -> FloatArray:
    """The per-user confusion tables :func:`scale_estimates` computes from: ``(U, K, K)`` over the whole scale.

    Args:
        human: Reference labels.
        judge: The judge's labels, aligned with ``human``.
        clusters: User of each item (users in sorted id order).
        scale: The dataset's scale (a bare category list is read as nominal); every label must be on it.
    """
    s = as_scale(scale)
    tables, _ = robust.user_tables(on_scale(human, s), on_scale(judge, s), clusters, list(s.categories))
    return tables


def alt_test_scoring(scale: DatasetScale) -> Scoring:
    """How the alternative-annotator test scores alignment on ``scale``.

    Negative RMSE on ordinal levels (the paper's choice for scores), accuracy on categories.
    """
    return "neg_rmse" if scale.ordinal else "accuracy"


def panel_values(estimates: Mapping[str, Estimate]) -> dict[str, Any]:
    """:class:`PanelFields` keyword arguments from estimates keyed by metric name (missing ones stay NaN)."""
    out: dict[str, Any] = {}
    for name in PANEL_METRICS + ORDINAL_METRICS:
        if name in estimates:
            out[name], out[f"{name}_ci"] = estimates[name].value, ci_list(estimates[name])
    for name in BINARY_POINT_METRICS:
        if name in estimates:
            out[name] = estimates[name].value
    notes = {name: e.reason for name, e in estimates.items() if e.reason}
    if notes:
        out["ci_notes"] = notes
    return out


def extras_rows(datasets: Iterable[str], *, alt_labels: Callable[[str], pd.DataFrame],
                counts: Callable[[str, HumanSet], tuple[pd.DataFrame, pd.DataFrame]], positive: str | None,
                anchored: Iterable[str] = (), rate_datasets: Iterable[str] | None = None,
                scales: Mapping[str, DatasetScale]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The one loop behind every report's ``alt_test`` and ``estimates``, whatever the labels are read from.

    Args:
        datasets: Datasets to cover (blind humans).
        alt_labels: Dataset -> the labels the alternative-annotator test reads (a frame holding at least every
            label on items several humans labelled, and each judge's labels there).
        counts: (dataset, blind or anchored) -> judge and reference counts
            (:func:`personagap.store.aggregates.label_counts`' columns) the estimates are computed from.
        positive: The label whose human rate the estimates correct (None: no estimates).
        anchored: Datasets to cover again with anchored humans, reported apart.
        rate_datasets: Only these get estimates (default: all).
        scales: Dataset -> its scale (every dataset covered must have one: a scale decides how the test scores;
            the alt-test scores an ordinal dataset by negative RMSE, :func:`alt_test_scoring`, and no rate of
            ``positive`` is estimated on an ordinal scale or one without that category).
    """
    from personagap.analysis.aggregated import estimate_rows_from_counts  # imports this module

    tests: list[dict[str, Any]] = []
    rates: list[dict[str, Any]] = []
    runs: list[tuple[str, HumanSet]] = [(ds, "blind") for ds in datasets] + [(ds, "anchored") for ds in anchored]
    rated = None if rate_datasets is None else set(rate_datasets)
    for ds, humans in runs:
        scale = scales[ds]
        tests += alt_test_rows(scored_labels(alt_labels(ds), scale), ds, humans=humans,
                               scoring=alt_test_scoring(scale))
        if scale.ordinal or positive not in scale.categories:
            continue
        if positive is not None and (rated is None or ds in rated):
            judges, reference = counts(ds, humans)
            # Pooled yes-counts over pooled items: these rates weigh items; no user-weighted version is offered.
            rates += [row | {"estimand": "items"} for row in estimate_rows_from_counts(
                judges, reference, ds, positive=positive, humans=humans)]
    return tests, rates


def scored_labels(labels: pd.DataFrame, scale: DatasetScale) -> pd.DataFrame:
    """The labels the alternative-annotator test scores on ``scale``: on an ordinal scale, a label off it is dropped.

    A label that is no level of the scale is no verdict on its question (the judge rows count it as a failure), so
    the test never reads it as a number (``n/a`` cannot be one; ``7`` on a 1-5 scale is not a rating). Missing
    labels (failed answers) stay, as the test treats them. Categories are compared as text and stay as they are.
    """
    if not scale.ordinal or labels.empty:
        return labels
    off = labels["label"].notna().to_numpy() & on_scale(labels["label"], scale, strict=False).isna().to_numpy()
    return labels[~off] if off.any() else labels


def _f(v: Any, digits: int = 2) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _ci(ci: list[Any] | None) -> str:
    if not ci or ci[0] is None or ci[1] is None or any(isinstance(c, float) and math.isnan(c) for c in ci):
        return ""
    return f" [{ci[0]:.2f}, {ci[1]:.2f}]"


def panel_lines(rows: Iterable[tuple[str, PanelFields]]) -> list[str]:
    """One text line per judge: AC1, PABAK, MCC and balanced accuracy with CIs, prevalence and bias indices."""
    out = []
    for name, p in rows:
        indices = ("" if math.isnan(p.prevalence_index) else
                   f", prevalence index {_f(p.prevalence_index)}, bias index {p.bias_index:+.2f}")
        out.append(f"  {name}: AC1 {_f(p.ac1)}{_ci(p.ac1_ci)}, PABAK {_f(p.pabak)}, MCC {_f(p.mcc)}{_ci(p.mcc_ci)}, "
                   f"balanced accuracy {_f(p.balanced_accuracy)}{_ci(p.balanced_accuracy_ci)}{indices}")
    return out


def extras_lines(alt_test: list[dict[str, Any]], estimates: list[dict[str, Any]]) -> list[str]:
    """Text for a report's alternative-annotator test and corrected estimates."""
    lines: list[str] = []
    if alt_test:
        lines += ["", f"Alternative-annotator test (can the judge replace a human? Calderon et al. 2025; epsilon "
                      f"{DEFAULT_EPSILON:g} unless stated):", f"  {EPSILON_GUIDANCE}"]
        for (dataset, humans), rows in _groups(alt_test).items():
            lines += alt_test_group_lines(dataset, humans, rows)
    if estimates:
        lines += ["", "Estimates of the human rate (the judge's own rate, then corrected with human labels):"]
        lines += [estimate_line(e) for e in estimates]
    return lines


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in rows:
        out.setdefault((str(t["dataset"]), str(t["humans"])), []).append(t)
    return out


def _sweep(values: list[Any]) -> str:
    return "/".join(_f(v) for v in values)


def alt_test_group_lines(dataset: str, humans: str, rows: list[dict[str, Any]]) -> list[str]:
    """One dataset's alternative-annotator rows (one kind of humans) as text: context, then one line per judge.

    The context line gives the humans' own agreement (to choose epsilon by) and the unit of the t-test; the
    constant judge's row (``rater_kind`` baseline) is shown like any judge; PASSED appears only for the verdict
    ``passed`` (a constant judge that passes too, or anchored humans, give another verdict).
    """
    lines = []
    tested = [t for t in rows if t.get("applicable")]
    if tested:
        first = tested[0]
        lines.append(f"  {dataset}, {humans} humans: {first['human_agreement_measure']} "
                     f"{_f(first['human_agreement'])}; unit of the t-test: {first['cluster_unit']}"
                     + (" (each annotator's items averaged per user)" if first["cluster_unit"] == "user" else "")
                     + ("; no verdict: these humans saw an LLM's label first" if humans == "anchored" else ""))
        lines += [f"    warning: {w}" for w in first["warnings"]]
    for t in rows:
        if not t.get("applicable"):
            lines.append(f"  {t['judge']} on {dataset} ({humans} humans): not applicable: {t['reason']}")
            continue
        name = t["judge"] + (" [baseline]" if t["rater_kind"] == "baseline" else "")
        verdict = "PASSED" if t["verdict"] == "passed" else t["verdict"]
        # Anchored rows share one reason, given on the context line; only whether the constant passes differs.
        constant_passes = bool(t.get("constant_judge") and t["constant_judge"]["passed"])
        why = t["verdict_reason"] if humans != "anchored" else "a constant judge passes too" if constant_passes else ""
        sweep = t["epsilon_sweep"]
        eps = "/".join(f"{e['epsilon']:.2f}" for e in sweep)
        constant = ("" if t.get("constant_judge") is None else
                    f" (constant judge {_sweep([e['constant_winning_rate'] for e in sweep])})")
        lines.append(f"    {name}: {verdict} at epsilon {t['epsilon']:g}{f' ({why})' if why else ''}: winning rate "
                     f"{_f(t['winning_rate'])}, advantage probability {_f(t['advantage_probability'])}, "
                     f"{t['n_items']} items, {t['n_annotators']} annotators; winning rate at epsilon {eps}: "
                     f"{_sweep([e['winning_rate'] for e in sweep])}{constant}")
    return lines


#: Public names of the text helpers, for other report sections (e.g. :mod:`personagap.analysis.origins`).
fmt = _f
ci_suffix = _ci
