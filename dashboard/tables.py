"""Diagnosis and report rows as display tables and forest-plot frames (pure: no Streamlit)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from personagap.analysis.diagnosis import STAGES, HumanCeiling, JudgeScore, StageDiagnosis
from personagap.analysis.headline import headline_metric
from personagap.analysis.origins import origin_comparison, where
from personagap.dashboard.display import MISSING, ci, md, missing, num, text


def alt_test_table(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[str]]:
    """The alternative-annotator test per judge as display text (blind and anchored humans on separate rows).

    A "not applicable" verdict stays short in the table (``not applicable (note N)``): the reasons are
    sentences a table cell would cut off, so they come back as notes, each reason once with the rows it
    explains, to be shown in full under the table.

    Returns:
        The table, and the notes in the order of their numbers (Markdown, imported text escaped).
    """
    out = []
    notes: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        dataset = where(str(r.get("dataset")), str(r.get("origin", "real")))
        humans = text(r.get("humans", "blind"))
        if r.get("applicable", True):
            # The alt-test's own verdict: "passed" only when a constant judge does not pass too and the humans
            # were blind (analysis/alt_test.py); the bare winning-rate criterion would overstate it.
            verdict = text(r.get("verdict"))
            detail = {"winning rate": num(r.get("winning_rate")), "advantage probability":
                      num(r.get("advantage_probability")), "items": f"{r.get('n_items', 0):,}",
                      "annotators": str(r.get("n_annotators", MISSING))}
        else:
            key = (dataset, humans, text(r.get("reason")).rstrip("."))
            notes.setdefault(key, []).append(text(r.get("judge")))
            verdict = f"not applicable (note {list(notes).index(key) + 1})"
            detail = {"winning rate": MISSING, "advantage probability": MISSING, "items": MISSING,
                      "annotators": MISSING}
        out.append({"judge": text(r.get("judge")), "dataset": dataset, "humans": humans, "verdict": verdict,
                    **detail})
    lines = [f"{md(dataset)}, {md(humans)} humans ({md(', '.join(judges))}): not applicable because {md(reason)}."
             for (dataset, humans, reason), judges in notes.items()]
    return pd.DataFrame(out), lines


def _estimate_ci(row: dict[str, Any], key: str) -> str:
    # A row without CIs says why (estimates' ci_note: too few users, the one CI rule) instead of "(no CI)".
    note = row.get("ci_note")
    return f"({note})" if note else ci(row.get(key))


def estimates_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Each judge's naive rate beside the corrected estimates of the human rate, as display text."""
    return pd.DataFrame([{
        "judge": text(r.get("judge")), "dataset": where(str(r.get("dataset")), str(r.get("origin", "real"))),
        "humans": text(r.get("humans", "blind")), "quantity": text(r.get("quantity")),
        "judge's own rate": f"{num(r.get('naive'))} {_estimate_ci(r, 'naive_ci')}",
        "Rogan–Gladen": f"{num(r.get('rogan_gladen'))} {_estimate_ci(r, 'rogan_gladen_ci')}",
        "PPI++": f"{num(r.get('ppi'))} {_estimate_ci(r, 'ppi_ci')}",
        "humans only": f"{num(r.get('human_only'))} {_estimate_ci(r, 'human_only_ci')}",
        "n human / judge": f"{r.get('n_human', 0):,} / {r.get('n_judge', 0):,}"} for r in rows])


def stage_ceilings(s: StageDiagnosis) -> list[HumanCeiling]:
    """Every dataset's own human ceiling of a stage (never one dataset's ceiling drawn beside another's judges)."""
    found = list(getattr(s, "ceilings", None) or [])
    if not found and s.ceiling is not None:
        found = [s.ceiling]
    return found


def headline(j: JudgeScore) -> tuple[str, float, list[float]]:
    """A judge row's headline figure: weighted kappa (with its CI) on an ordinal scale, else Cohen's kappa.

    Unweighted kappa counts a 4 given for a 5 as wrong as a 1 given for a 5; on ordered levels the weighted
    kappa the diagnosis computes is the figure that answers "does the judge agree with humans".

    Returns:
        The figure's name, its value and its CI.
    """
    if headline_metric(j.scale) == "weighted_kappa" and j.weighted_kappa is not None:
        return "weighted kappa", j.weighted_kappa, j.weighted_kappa_ci or [float("nan"), float("nan")]
    return "kappa", j.kappa, j.kappa_ci


def forest_title(judges: pd.DataFrame) -> str:
    """The forest plot's axis title: names weighted kappa when some row shows it (an ordinal scale)."""
    if "figure" in judges.columns and (judges["figure"] == "weighted kappa").any():
        return "kappa vs humans, weighted on ordinal scales (95% CI)"
    return "Cohen's kappa vs humans (95% CI)"


def forest_frames(stages: list[StageDiagnosis]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The forest plot's judge rows (each judge's :func:`headline` figure) and per-dataset human-ceiling rows.

    The ``kappa`` column holds the headline figure and ``figure`` names it (weighted kappa on ordinal scales).
    """
    rows = []
    for s in stages:
        for j in s.judges:
            figure, value, bounds = headline(j)
            if not missing(value):
                rows.append({"stage": j.stage, "dataset": j.dataset, "judge": j.judge, "kind": j.rater_kind, "n": j.n,
                             "figure": figure, "kappa": value, "ci_low": bounds[0], "ci_high": bounds[1]})
    judges = pd.DataFrame(rows, columns=["stage", "dataset", "judge", "kind", "n", "figure", "kappa", "ci_low",
                                         "ci_high"])
    ceilings = pd.DataFrame([{
        "stage": s.stage, "dataset": c.dataset, "ceiling": c.mean_kappa, "ceiling_low": c.ci[0],
        "ceiling_high": c.ci[1], "raters": c.n_raters,
    } for s in stages for c in stage_ceilings(s)],
        columns=["stage", "dataset", "ceiling", "ceiling_low", "ceiling_high", "raters"])
    return judges, ceilings


def _headline_text(j: JudgeScore) -> str:
    figure, value, bounds = headline(j)
    text_ = f"{num(value)} {ci(bounds)}"
    return text_ if figure == "kappa" else f"{figure} {text_}"


def judges_table(judges: list[JudgeScore], *, full: bool = True) -> pd.DataFrame:
    """Judge scores as a display table of text (a dash where a figure does not apply, e.g. yes-rates of A/B).

    ``full=False`` keeps the columns that fit the Overview's width without horizontal scrolling.
    """
    rows = []
    for j in judges:
        row: dict[str, Any] = {} if full else {"stage": STAGES.index(j.stage) + 1 if j.stage in STAGES else j.stage}
        row |= {"dataset": where(j.dataset, j.origin), "judge": j.judge}
        if full:
            row |= {"kind": j.rater_kind}
        row |= {
            "n": j.n, "failures": j.failures, "kappa (95% CI)": _headline_text(j),
            "accuracy": num(j.accuracy),
            "yes-rate humans → judge": (f"{num(j.human_yes_rate)} → {num(j.judge_yes_rate)}"
                                        if j.binary else MISSING),
            "over-selection": f"{num(j.over_selection)}×" if j.binary and not missing(j.over_selection) else MISSING,
        }
        if full:
            row["precision / recall / F1"] = (f"{num(j.precision)} / {num(j.recall)} / {num(j.f1)}"
                                              if j.binary else MISSING)
        rows.append(row)
    return pd.DataFrame(rows)


def origin_table(judges: list[JudgeScore]) -> pd.DataFrame:
    """Judges scored on both synthetic-persona and real-user datasets of a stage, side by side (display text)."""
    rows = [{"judge": c.judge, "synthetic personas": f"{c.synthetic_dataset}: {num(c.synthetic_kappa)} "
                                                     f"{ci(c.synthetic_kappa_ci)} (n={c.synthetic_n:,})",
             "real users": f"{c.real_dataset}: {num(c.real_kappa)} {ci(c.real_kappa_ci)} (n={c.real_n:,})",
             "synthetic − real": num(c.difference)}
            for c in origin_comparison((j.judge, j) for j in judges)]
    return pd.DataFrame(rows)
