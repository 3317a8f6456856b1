"""The Calibration section's data and charts: reliability diagram and coverage curve of judges with a confidence.

Data: :func:`personagap.analysis.confidence_report.judge_confidence` (read-only, cached like every dashboard query).
Charts: pure Altair builders in the style of :mod:`personagap.dashboard.charts` (explicit heights, the human colour
for what people set).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from personagap.dashboard import access
from personagap.dashboard.charts import AXES, HUMAN_COLOUR, MIN_HEIGHT
from personagap.dashboard.data import TTL_SECONDS

JUDGE_COLOUR = "#4c78a8"


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing judges' calibration…")
def confidence_entries(db: str, stage: str, ceilings: tuple[tuple[str, float], ...],
                       target_accuracy: float | None) -> list[dict[str, Any]]:
    """Per judge with confidences: dataset, judge and the report entries (calibration, coverage curve, threshold)."""
    from personagap.analysis.confidence_report import judge_confidence
    from personagap.store import opened

    with access.reading(), opened(db, read_only=True) as con:
        entries = judge_confidence(con, stage, target_accuracy=target_accuracy, ceilings=dict(ceilings))
    return [{"dataset": e.dataset, "judge": e.judge, **e.to_json()} for e in entries]


def reliability_frame(bins: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per reliability bin: confidence, agreement and its CI bounds (None where no CI)."""
    frame = pd.DataFrame(bins, columns=["lo", "hi", "n", "confidence", "agreement", "agreement_ci", "n_users"])
    ci = frame["agreement_ci"].apply(lambda c: c if isinstance(c, list) else [None, None])
    return frame.assign(ci_low=[c[0] for c in ci], ci_high=[c[1] for c in ci]).drop(columns="agreement_ci")


def reliability_chart(frame: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Agreement with humans against stated confidence per bin (CI bars), with the diagonal of perfect calibration."""
    diagonal = alt.Chart(pd.DataFrame({"x": [0.0, 1.0], "y": [0.0, 1.0]})).mark_line(
        color="#999", strokeDash=[4, 3]).encode(x="x:Q", y="y:Q")
    axis_x = alt.X("confidence:Q", title="stated confidence (as a probability)", scale=alt.Scale(domain=[0, 1]))
    axis_y = alt.Y("agreement:Q", title="share agreeing with the human reference", scale=alt.Scale(domain=[0, 1]))
    tooltip = [alt.Tooltip("lo:Q", format=".3g"), alt.Tooltip("hi:Q", format=".3g"), "n:Q", "n_users:Q",
               alt.Tooltip("confidence:Q", format=".3f"), alt.Tooltip("agreement:Q", format=".3f")]
    base = alt.Chart(frame)
    bars = base.mark_rule(color=JUDGE_COLOUR).encode(x="confidence:Q", y="ci_low:Q", y2="ci_high:Q")
    points = base.mark_point(filled=True, color=JUDGE_COLOUR).encode(
        x=axis_x, y=axis_y, size=alt.Size("n:Q", title="items"), tooltip=tooltip)
    return alt.layer(diagonal, bars, points).properties(height=max(MIN_HEIGHT, 260 + AXES))


def coverage_frame(curve: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per threshold: coverage, kappa and accuracy with the accuracy CI bounds."""
    frame = pd.DataFrame(curve, columns=["min_confidence", "coverage", "n", "n_users", "accuracy", "accuracy_ci",
                                         "kappa", "kappa_ci"])
    ci = frame["accuracy_ci"].apply(lambda c: c if isinstance(c, list) else [None, None])
    return frame.assign(ci_low=[c[0] for c in ci], ci_high=[c[1] for c in ci])


def coverage_chart(frame: pd.DataFrame, *, ceiling: float | None, chosen_coverage: float | None,
                   metric: str = "kappa") -> alt.LayerChart | alt.FacetChart:
    """``metric`` (kappa or accuracy) on the items kept against the share kept, with the ceiling and the choice.

    Args:
        frame: :func:`coverage_frame` rows.
        ceiling: The dataset's blind human ceiling (kappa) as a horizontal rule in the human colour; None: none.
        chosen_coverage: The held-out coverage of the chosen threshold, as a vertical rule; None: none chosen.
        metric: ``kappa`` (comparable with the ceiling) or ``accuracy`` (drawn with its CI band).
    """
    tooltip = [alt.Tooltip("min_confidence:Q", format=".4g", title="min confidence"),
               alt.Tooltip("coverage:Q", format=".3f"), "n:Q", "n_users:Q", alt.Tooltip("accuracy:Q", format=".3f"),
               alt.Tooltip("kappa:Q", format=".3f")]
    base = alt.Chart(frame)
    x = alt.X("coverage:Q", title="share of the judge's items kept (coverage)", scale=alt.Scale(domain=[0, 1]))
    layers: list[Any] = []
    if metric == "accuracy":
        layers.append(base.mark_area(opacity=0.2, color=JUDGE_COLOUR).encode(x=x, y="ci_low:Q", y2="ci_high:Q"))
    layers.append(base.mark_line(point=True, color=JUDGE_COLOUR).encode(
        x=x, y=alt.Y(f"{metric}:Q", title=f"{metric} on the items kept"), tooltip=tooltip))
    if ceiling is not None:
        layers.append(alt.Chart(pd.DataFrame({"y": [ceiling]})).mark_rule(color=HUMAN_COLOUR, strokeDash=[6, 3])
                      .encode(y="y:Q"))
    if chosen_coverage is not None:
        layers.append(alt.Chart(pd.DataFrame({"x": [chosen_coverage]})).mark_rule(color="#333", strokeDash=[2, 2])
                      .encode(x="x:Q"))
    return alt.layer(*layers).properties(height=max(MIN_HEIGHT, 260 + AXES))
