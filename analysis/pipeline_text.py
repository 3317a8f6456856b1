"""The pipeline view as text: one compact table per stage, the verdict, oracle inputs, the cascade, missing verdicts."""

from __future__ import annotations

import math

from personagap.analysis.ci_rule import MIN_LABELLED_USERS
from personagap.analysis.pipeline import HEADLINE, STAGE_NAMES
from personagap.analysis.pipeline_records import JudgeRate, PipelineRow, PipelineView

TITLE = "Which stage of your pipeline fails (by human verdict)"
JUDGES_SHOWN = 3
"""Judges named on a table line (every judge is in ``--json``)."""

_COLUMNS = {
    1: [("rejected_attributes", "rejected"), ("unsure", "unsure")],
    2: [("irrelevant_selected", "irrelevant"), ("missed_relevant", "missed"), ("over_selection", "over-sel.")],
    3: [("no_better_than_generic", "no better"), ("worse_than_generic", "worse")],
}
_WHAT = {1: "extracted attributes humans reject (bad; unsure apart)",
         2: "per selector: selected attributes humans call irrelevant, relevant ones missed, selected ÷ relevant",
         3: "per generator and input: personalised answers humans judge no better than the generic one, or worse"}
_HEAD = {1: "extractor", 2: "selector", 3: "generator · input"}
_UPSTREAM = {2: "irrelevant share of its selection over every extracted attribute minus over those humans accepted "
                "at stage 1",
             3: "no-better share with the pipeline's input minus with the human-selected input"}


def figure(value: float | None, ci: list[float | None] | None, *, ratio: bool = False) -> str:
    """A share as ``35% [28, 42]`` (a ratio as ``2.1× [1.8, 2.5]``); ``—`` without a figure, no bracket without a CI.

    Args:
        value: The figure (None: no human verdict).
        ci: Its interval (None bounds: none).
        ratio: Print a ratio, not a percentage.
    """
    if value is None or math.isnan(value):
        return "—"
    text = f"{value:.2f}×" if ratio else f"{100 * value:.0f}%"
    lo, hi = ci if ci is not None else (None, None)
    if lo is None or hi is None:
        return text
    return text + (f" [{lo:.2f}, {hi:.2f}]" if ratio else f" [{100 * lo:.0f}, {100 * hi:.0f}]")


def judges_text(judges: list[JudgeRate], *, ratio: bool = False) -> str:
    """``judge says 20% (corrected 55% [40, 70])`` for the first :data:`JUDGES_SHOWN` judges, then how many more."""
    parts = []
    for j in judges[:JUDGES_SHOWN]:
        corrected = "" if j.corrected is None else f" (corrected {figure(j.corrected, j.corrected_ci, ratio=ratio)})"
        parts.append(f"{j.judge} says {figure(j.naive, None, ratio=ratio)}{corrected}")
    more = len(judges) - JUDGES_SHOWN
    return "; ".join(parts) + (f"; +{more} more judges (--json)" if more > 0 else "")


def _system(r: PipelineRow) -> str:
    name = r.system or "unnamed"
    if r.stage == 3:
        return f"{name} · {r.input_condition or 'input not recorded'}"
    return f"{name} · accepted attrs only" if r.input_condition else name


def stage_table(rows: list[PipelineRow], stage: int) -> list[str]:
    """One stage's compact table: a line per dataset and system, the human figures, users, then what judges say."""
    mine = [r for r in rows if r.stage == stage]
    if not mine:
        return []
    by_key: dict[tuple[str, str], dict[str, PipelineRow]] = {}
    for r in mine:
        by_key.setdefault((r.dataset, _system(r)), {})[r.quantity] = r
    cols = _COLUMNS[stage]
    lines = [f"Stage {stage} — {STAGE_NAMES[stage]}: {_WHAT[stage]}",
             f"  {'dataset':<28}{_HEAD[stage]:<42}" + "".join(f"{name:<20}" for _, name in cols) + "users  judges"]
    for (dataset, system), quantities in by_key.items():
        first = quantities[cols[0][0]]
        cells = []
        for q, _ in cols:
            if q == "unsure":
                cells.append(figure(first.unsure, first.unsure_ci))
            else:
                row = quantities.get(q)
                cells.append(figure(row.human, row.human_ci, ratio=q == "over_selection") if row else "—")
        lines.append(f"  {dataset[:27]:<28}{system[:41]:<42}" + "".join(f"{c:<20}" for c in cells)
                     + f"{first.n_users:<7}{judges_text(first.judges)}")
    if any(r.human is not None and r.n_users < MIN_LABELLED_USERS for r in mine):
        lines.append(f"  (no CI where fewer than {MIN_LABELLED_USERS} users have human verdicts: a rate measured on "
                     "so few users' labels undercovers)")
    return lines


def render_pipeline(view: PipelineView) -> str:
    """The pipeline section of ``diagnose``: the tables, the verdict, oracle inputs, the cascade, missing verdicts."""
    if not view.rows:
        return (f"{TITLE}\n  No pipeline outputs with human verdicts or linked answers are stored "
                "(stage-1 verifications, stage-2 selections, stage-3 generic-vs-personalised pairs).")
    lines = [TITLE, ""]
    for stage in (1, 2, 3):
        table = stage_table(view.rows, stage)
        lines += table + ([""] if table else [])
    lines.append(view.verdict)
    for u in view.upstream:
        if u.quantity != HEADLINE[u.stage]:
            continue
        said = "; ".join(f"{j['judge']} {_points(j['naive_difference'])} {_ci_points(j['naive_difference_ci'])}"
                         for j in u.judges[:JUDGES_SHOWN])
        human = f"humans {_points(u.human)} {_ci_points(u.human_ci)}" if u.human is not None else "no human verdict"
        lines.append(f"Caused upstream ({u.dataset} · {u.system or 'unnamed'}): {_UPSTREAM[u.stage]}: {human}, "
                     f"{u.n_users} users" + (f"; judges say {said}" if said else ""))
    for c in view.cascade:
        if not c.n_flagged and not c.n_linked:
            continue
        traced = (f"; {c.n_failures_traced} of the {c.n_failures} answers humans judge no better trace to them"
                  if c.n_failures else "")
        lines.append(f"Over-personalisation ({c.dataset} · {c.system or 'unnamed'} · "
                     f"{c.input_condition or 'input not recorded'}): {c.n_flagged} of {c.n_linked} answers used an "
                     f"attribute humans rejected ({c.n_rejected}) or judged irrelevant for the prompt "
                     f"({c.n_irrelevant}){traced}")
    lines += view.missing + view.counted_once
    return "\n".join(lines)


def _points(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:+.0f} pts"


def _ci_points(ci: list[float | None]) -> str:
    lo, hi = ci
    return "(no CI)" if lo is None or hi is None else f"[{100 * lo:+.0f}, {100 * hi:+.0f}]"
