"""Altair chart builders: pure functions from DataFrames to charts (no Streamlit, no I/O).

Every chart has an explicit pixel height of at least :data:`MIN_HEIGHT`: a chart sized by its
container alone can collapse to a sliver inside Streamlit columns (the old confusion heatmaps).
"""

from __future__ import annotations

from typing import Any, cast

import altair as alt
import pandas as pd

MIN_HEIGHT = 180
#: One colour per pipeline stage, the same on every chart.
STAGE_COLOURS = {"extraction": "#1f77b4", "relevance": "#ff7f0e", "response": "#2ca02c"}
HUMAN_COLOUR = "#d62728"
ROW = 30
#: Room for the x axis and its title: Streamlit fits the whole chart (axes included) into the height.
AXES = 70


def _stage_scale() -> alt.Scale:
    return alt.Scale(domain=list(STAGE_COLOURS), range=list(STAGE_COLOURS.values()))


def forest_chart(judges: pd.DataFrame, ceilings: pd.DataFrame, *,
                 title: str = "Cohen's kappa vs humans (95% CI)") -> alt.LayerChart | alt.FacetChart:
    """Forest plot: one row per judge (kappa and its CI), coloured by stage, with its dataset's human ceiling.

    Args:
        judges: ``stage``, ``dataset``, ``judge``, ``kind``, ``n``, ``kappa``, ``ci_low``, ``ci_high`` (and
            optionally ``figure``: the name of the figure in ``kappa``, e.g. weighted kappa on an ordinal scale).
        ceilings: ``stage``, ``dataset``, ``ceiling``, ``ceiling_low``, ``ceiling_high``, ``raters`` (one row per
            dataset with a human ceiling; datasets without one get no mark — nothing is borrowed).
        title: The x-axis title.
    """
    frame = judges.copy()
    frame["row"] = frame["stage"].map(lambda s: f"{list(STAGE_COLOURS).index(s) + 1}" if s in STAGE_COLOURS else "?") \
        + " · " + frame["dataset"] + " · " + frame["judge"]
    frame = frame.merge(ceilings, on=["stage", "dataset"], how="left")
    order = list(frame.sort_values(["row"])["row"])
    y = alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=420, labelOverlap=False))
    x_scale = alt.Scale(domain=[-0.2, 1])
    # Which figure a row shows (weighted kappa on an ordinal scale) is in the tooltip, beside its value.
    figure = ["figure"] if "figure" in frame.columns else []
    tooltip = ["stage", "dataset", "judge", "kind", "n", *figure, alt.Tooltip("kappa:Q", format=".3f"),
               alt.Tooltip("ci_low:Q", format=".2f"), alt.Tooltip("ci_high:Q", format=".2f"),
               alt.Tooltip("ceiling:Q", format=".3f", title="human ceiling")]
    base = alt.Chart(frame)
    band = base.transform_filter("isValid(datum.ceiling)").mark_bar(opacity=0.18, color=HUMAN_COLOUR, height=ROW - 8) \
        .encode(x=alt.X("ceiling_low:Q", scale=x_scale), x2="ceiling_high:Q", y=y)
    tick = base.transform_filter("isValid(datum.ceiling)").mark_tick(
        color=HUMAN_COLOUR, thickness=3, size=ROW - 6).encode(x=alt.X("ceiling:Q", scale=x_scale), y=y,
                                                             tooltip=tooltip)
    colour = alt.Color("stage:N", scale=_stage_scale(), title="stage")
    bars = base.mark_rule(strokeWidth=2).encode(
        x=alt.X("ci_low:Q", title=title, scale=x_scale), x2="ci_high:Q", y=y, color=colour, tooltip=tooltip)
    points = base.mark_point(filled=True, size=80).encode(x="kappa:Q", y=y, color=colour, tooltip=tooltip)
    zero = alt.Chart(pd.DataFrame({"x": [0.0]})).mark_rule(color="#999", strokeDash=[2, 2]).encode(x="x:Q")
    return alt.layer(band, zero, bars, points, tick).properties(height=max(MIN_HEIGHT, ROW * len(frame) + AXES))


def yes_rate_chart(rows: pd.DataFrame) -> alt.Chart:
    """Human vs judge yes-rate on the same items, per binary judge.

    Args:
        rows: ``judge``, ``who`` ('humans' | 'judge'), ``rate``.
    """
    judges = rows["judge"].nunique()
    # altair's mark_* methods are typed through a signature-copying decorator that mypy sees as Any.
    return cast(alt.Chart, alt.Chart(rows).mark_bar(height=10).encode(
        x=alt.X("rate:Q", title="share labelled yes", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("judge:N", title=None, axis=alt.Axis(labelLimit=360, labelOverlap=False)),
        yOffset=alt.YOffset("who:N", sort=["humans", "judge"]),
        color=alt.Color("who:N", title=None, sort=["humans", "judge"],
                        scale=alt.Scale(domain=["humans", "judge"], range=[HUMAN_COLOUR, "#4c78a8"])),
        tooltip=["judge", "who", alt.Tooltip("rate:Q", format=".3f")],
    ).properties(height=max(MIN_HEIGHT, 34 * judges + AXES)))


def confusion_chart(categories: list[str], confusion: list[list[int]]) -> alt.LayerChart | alt.FacetChart:
    """Confusion heatmap of one judge: human label (rows) x judge label (columns), with counts.

    ``autosize: pad``: the width and height are the cells' area and the axes are added around it (Streamlit's
    default ``fit`` squeezes axes, titles and padding into the box, leaving the cells a few pixels tall).
    The judge's name is left to the page (as text that wraps instead of a clipped chart title).
    """
    rows = [{"human": h, "judge": j, "n": confusion[a][b]}
            for a, h in enumerate(categories) for b, j in enumerate(categories)]
    frame = pd.DataFrame(rows)
    top = max(1, int(frame["n"].max()))
    side = max(MIN_HEIGHT, 64 * len(categories))
    base = alt.Chart(frame).encode(
        x=alt.X("judge:N", sort=categories, title="judge said", axis=alt.Axis(labelAngle=0, orient="top")),
        y=alt.Y("human:N", sort=categories, title="humans said", axis=alt.Axis(labelAngle=0)))
    rect = base.mark_rect().encode(color=alt.Color("n:Q", scale=alt.Scale(scheme="blues", domain=[0, top]),
                                                   legend=None), tooltip=["human", "judge", "n"])
    # Dark cells get white digits: the count stays readable on every shade.
    text = base.mark_text(fontSize=15).encode(
        text="n:Q", color=alt.condition(f"datum.n > {top / 2}", alt.value("white"), alt.value("black")))
    return alt.layer(rect, text).properties(width=side, height=side, autosize=alt.AutoSizeParams(type="pad"))


def rate_ci_chart(frame: pd.DataFrame, *, x_title: str,
                  reference: float | None = None) -> alt.LayerChart | alt.FacetChart:
    """Rates with CI bars, one row per rater, the humans' row first and in the human colour.

    Args:
        frame: ``rater``, ``who`` ('humans' | 'judge'), ``n``, ``rate``, ``ci_low``, ``ci_high``; optional
            ``bucket`` (then one small panel row per bucket is stacked via the y label).
        x_title: What the rate is.
        reference: A dashed rule (e.g. 0.5 = no position preference).
    """
    frame = frame.copy()
    frame["row"] = (frame["bucket"].astype(str) + " · " if "bucket" in frame else "") + frame["rater"]
    frame["humans_first"] = (frame["who"] != "humans").astype(int)
    keys = ["bucket", "humans_first", "rater"] if "bucket" in frame else ["humans_first", "rater"]
    order = list(frame.sort_values(keys)["row"])
    y = alt.Y("row:N", sort=order, title=None, axis=alt.Axis(labelLimit=360, labelOverlap=False))
    colour = alt.Color("who:N", title=None,
                       scale=alt.Scale(domain=["humans", "judge"], range=[HUMAN_COLOUR, "#4c78a8"]))
    tooltip = ["rater", "n", alt.Tooltip("rate:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".2f"),
               alt.Tooltip("ci_high:Q", format=".2f")] + (["bucket"] if "bucket" in frame else [])
    base = alt.Chart(frame)
    layers: list[Any] = [
        base.mark_rule(strokeWidth=2).encode(x=alt.X("ci_low:Q", title=x_title, scale=alt.Scale(domain=[0, 1])),
                                             x2="ci_high:Q", y=y, color=colour, tooltip=tooltip),
        base.mark_point(filled=True, size=70).encode(x="rate:Q", y=y, color=colour, tooltip=tooltip),
    ]
    if reference is not None:
        layers.insert(0, alt.Chart(pd.DataFrame({"x": [reference]})).mark_rule(color="#999", strokeDash=[4, 3])
                      .encode(x="x:Q"))
    return alt.layer(*layers).properties(height=max(MIN_HEIGHT, 26 * len(frame) + AXES))


def precision_recall_chart(frame: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Extraction precision and recall vs gold with CIs, one row per (extractor, split, matcher).

    Args:
        frame: ``row``, ``metric`` ('precision' | 'recall'), ``value``, ``ci_low``, ``ci_high``.
    """
    y = alt.Y("row:N", title=None, axis=alt.Axis(labelLimit=420, labelOverlap=False))
    colour = alt.Color("metric:N", title=None)
    offset = alt.YOffset("metric:N")
    base = alt.Chart(frame)
    rule = base.mark_rule(strokeWidth=2).encode(
        x=alt.X("ci_low:Q", title="share (95% CI)", scale=alt.Scale(domain=[0, 1])), x2="ci_high:Q", y=y,
        yOffset=offset, color=colour)
    point = base.mark_point(filled=True, size=70).encode(
        x="value:Q", y=y, yOffset=offset, color=colour,
        tooltip=["row", "metric", alt.Tooltip("value:Q", format=".3f"), alt.Tooltip("ci_low:Q", format=".2f"),
                 alt.Tooltip("ci_high:Q", format=".2f")])
    return alt.layer(rule, point).properties(height=max(MIN_HEIGHT, 44 * frame["row"].nunique() + AXES))


def verdict_mix_chart(frame: pd.DataFrame) -> alt.Chart:
    """Stacked shares of verdicts (ok / bad / unsure) per extractor and rater group.

    Args:
        frame: ``row``, ``verdict``, ``share``, ``n``.
    """
    return cast(alt.Chart, alt.Chart(frame).mark_bar().encode(
        x=alt.X("share:Q", title="share of verdicts", stack="normalize", scale=alt.Scale(domain=[0, 1])),
        y=alt.Y("row:N", title=None, axis=alt.Axis(labelLimit=420, labelOverlap=False)),
        color=alt.Color("verdict:N", title=None, sort=["ok", "unsure", "bad"],
                        scale=alt.Scale(domain=["ok", "unsure", "bad"], range=["#2ca02c", "#bbbbbb", "#d62728"])),
        order=alt.Order("verdict:N"),
        tooltip=["row", "verdict", alt.Tooltip("share:Q", format=".3f"), "n"],
    ).properties(height=max(MIN_HEIGHT, 36 * frame["row"].nunique() + AXES)))


def matrix_chart(matrix: pd.DataFrame, overlap: pd.DataFrame,
                 groups: dict[str, str]) -> alt.LayerChart | alt.FacetChart:
    """Pairwise kappa heatmap; blank where a pair shares too few items. Every rater is labelled on both axes."""
    order = list(matrix.index)
    rows = [{"a": a, "b": b, "kappa": None if pd.isna(matrix.loc[a, b]) else float(matrix.loc[a, b]),
             "items": int(overlap.loc[a, b]), "group_a": groups.get(a, ""), "group_b": groups.get(b, "")}
            for a in order for b in order]
    frame = pd.DataFrame(rows)
    # labelOverlap False: Vega-Lite otherwise hides every other label when they crowd.
    base = alt.Chart(frame).encode(
        x=alt.X("b:N", sort=order, title=None,
                axis=alt.Axis(labelAngle=-45, labelLimit=240, labelOverlap=False, labelFontSize=11)),
        y=alt.Y("a:N", sort=order, title=None, axis=alt.Axis(labelLimit=240, labelOverlap=False, labelFontSize=11)))
    rect = base.mark_rect().encode(
        color=alt.Color("kappa:Q", scale=alt.Scale(scheme="redyellowgreen", domain=[-0.2, 1]), title="kappa"),
        tooltip=["a", "group_a", "b", "group_b", alt.Tooltip("kappa:Q", format=".3f"), "items"])
    # Blank cells stay blank (Vega would print "null").
    text = base.transform_filter("isValid(datum.kappa)").mark_text(fontSize=11).encode(
        text=alt.Text("kappa:Q", format=".2f"))
    side = max(MIN_HEIGHT, 52 * len(order))
    # autosize pad: the cells get the whole side; the axis labels are added around it (see confusion_chart).
    return alt.layer(rect, text).properties(width=side, height=side, autosize=alt.AutoSizeParams(type="pad"))
