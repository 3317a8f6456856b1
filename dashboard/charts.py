"""Altair chart builders: pure functions from DataFrames to charts (no Streamlit, no I/O)."""

from __future__ import annotations

from typing import cast

import altair as alt
import pandas as pd

from personagap.analysis.diagnosis import JudgeScore


def judge_frame(judges: list[JudgeScore]) -> pd.DataFrame:
    """One row per judge score with a display key unique within a stage."""
    return pd.DataFrame([{
        "judge": f"{j.judge} · {j.dataset}", "stage": j.stage, "dataset": j.dataset, "n": j.n,
        "kappa": j.kappa, "ci_low": j.kappa_ci[0], "ci_high": j.kappa_ci[1], "accuracy": j.accuracy,
        "human_yes_rate": j.human_yes_rate, "judge_yes_rate": j.judge_yes_rate,
        "over_selection": j.over_selection,
    } for j in judges])


def kappa_chart(judges: list[JudgeScore], ceiling: float | None = None) -> alt.LayerChart | alt.FacetChart:
    """Cohen's kappa per judge with 95% CI bars; a dashed rule marks the human ceiling when known."""
    frame = judge_frame(judges)
    y = alt.Y("judge:N", sort="-x", title=None, axis=alt.Axis(labelLimit=360))
    tooltip = ["judge", "n", alt.Tooltip("kappa:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".2f"),
               alt.Tooltip("ci_high:Q", format=".2f")]
    bars = alt.Chart(frame).mark_rule(strokeWidth=2).encode(
        x=alt.X("ci_low:Q", title="Cohen's kappa vs humans (95% CI)", scale=alt.Scale(domain=[-0.2, 1])),
        x2="ci_high:Q", y=y, tooltip=tooltip)
    points = alt.Chart(frame).mark_point(filled=True, size=90).encode(x="kappa:Q", y=y, tooltip=tooltip)
    layers: list[alt.Chart] = [bars, points]
    if ceiling is not None:
        rule = alt.Chart(pd.DataFrame({"ceiling": [ceiling], "what": ["human–human mean kappa"]}))
        layers.append(rule.mark_rule(strokeDash=[6, 4], color="#d62728").encode(x="ceiling:Q", tooltip=["what",
                      alt.Tooltip("ceiling:Q", format=".3f")]))
    return alt.layer(*layers).properties(height=max(90, 34 * len(frame)))


def yes_rate_chart(judges: list[JudgeScore]) -> alt.Chart:
    """Human vs judge yes-rate on the same items, per (binary) judge."""
    rows = []
    for j in judges:
        if j.binary:
            key = f"{j.judge} · {j.dataset}"
            rows += [{"judge": key, "who": "humans", "rate": j.human_yes_rate},
                     {"judge": key, "who": "judge", "rate": j.judge_yes_rate}]
    frame = pd.DataFrame(rows, columns=["judge", "who", "rate"])
    # altair's mark_* methods are typed through a signature-copying decorator that mypy sees as Any.
    return cast(alt.Chart, alt.Chart(frame).mark_bar().encode(
        x=alt.X("rate:Q", title="share labelled yes", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("who:N", title=None), color=alt.Color("who:N", title=None),
        row=alt.Row("judge:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left", labelLimit=360)),
        tooltip=["judge", "who", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(height=40, width=420))


def confusion_chart(judge: JudgeScore) -> alt.LayerChart | alt.FacetChart:
    """Confusion heatmap of one judge: human label (rows) x judge label (columns), with counts."""
    rows = [{"human": h, "judge": j, "n": judge.confusion[a][b]}
            for a, h in enumerate(judge.categories) for b, j in enumerate(judge.categories)]
    frame = pd.DataFrame(rows)
    base = alt.Chart(frame).encode(x=alt.X("judge:N", title="judge said"), y=alt.Y("human:N", title="humans said"))
    rect = base.mark_rect().encode(color=alt.Color("n:Q", scale=alt.Scale(scheme="blues"), legend=None),
                                   tooltip=["human", "judge", "n"])
    text = base.mark_text(fontSize=14).encode(text="n:Q", color=alt.value("black"))
    return alt.layer(rect, text).properties(title=f"{judge.judge} · {judge.dataset}", width=220, height=160)


def bias_chart(frame: pd.DataFrame, factor: str) -> alt.Chart:
    """Yes-rate (or first-answer rate) by bucket of ``factor``, one line per rater."""
    part = frame[frame["factor"] == factor]
    return cast(alt.Chart, alt.Chart(part).mark_line(point=True).encode(
        x=alt.X("bucket:N", title=factor), y=alt.Y("rate:Q", title="share yes / first answer",
                                                     scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("rater:N", title=None), tooltip=["rater", "bucket", "n", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(height=260))


def matrix_chart(matrix: pd.DataFrame, overlap: pd.DataFrame,
                 groups: dict[str, str]) -> alt.LayerChart | alt.FacetChart:
    """Pairwise kappa heatmap; blank where a pair shares too few items."""
    order = list(matrix.index)
    rows = [{"a": a, "b": b, "kappa": None if pd.isna(matrix.loc[a, b]) else float(matrix.loc[a, b]),
             "items": int(overlap.loc[a, b]), "group_a": groups.get(a, ""), "group_b": groups.get(b, "")}
            for a in order for b in order]
    frame = pd.DataFrame(rows)
    base = alt.Chart(frame).encode(
        x=alt.X("b:N", sort=order, title=None, axis=alt.Axis(labelAngle=-40, labelLimit=220)),
        y=alt.Y("a:N", sort=order, title=None, axis=alt.Axis(labelLimit=220)))
    rect = base.mark_rect().encode(
        color=alt.Color("kappa:Q", scale=alt.Scale(scheme="redyellowgreen", domain=[-0.2, 1]), title="kappa"),
        tooltip=["a", "group_a", "b", "group_b", alt.Tooltip("kappa:Q", format=".3f"), "items"])
    text = base.mark_text(fontSize=11).encode(text=alt.Text("kappa:Q", format=".2f"))
    side = max(260, 42 * len(order))
    return alt.layer(rect, text).properties(width=side, height=side)
