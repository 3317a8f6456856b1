"""Judges' confidence figures in the stage reports (issue 23's output contract), merged where ``--json`` is printed.

The figures are :func:`personagap.analysis.confidence_report.confidence_figures`'s (calibration, coverage curve and
threshold chosen on some users and reported on the others); this module only opens the store, joins them to the
report's judge rows by (dataset, judge display name) and words them for the terminal. It sits beside the stage
reports, not inside them, so the reports' builders need not know about confidences.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from personagap.analysis.agreement import ci_text
from personagap.analysis.comparable import judge_display
from personagap.analysis.confidence_report import (
    JudgeConfidence,
    confidence_figures,
    confidence_json,
    read_confidence,
)
from personagap.store import opened
from personagap.store.confidence import has_blind_pairs
from personagap.text import number

JUDGE_ROWS: Mapping[str, tuple[str, ...]] = {"relevance": ("judges",), "response": ("judges",),
                                             "extraction": ("verifiers",)}
"""Per stage, the report JSON's lists whose rows are judges (each with ``dataset`` and ``judge`` or ``verifier``)."""


def stage_confidence(db: str | Path, stage: str, *, target_accuracy: float | None = None,
                     target_kappa: float | None = None, level: float = 0.95) -> list[JudgeConfidence]:
    """Every judge of ``stage`` whose labels carry a confidence: calibration, coverage curve, held-out threshold.

    Args:
        db: The store (read only).
        stage: Pipeline stage.
        target_accuracy: The accuracy a threshold must reach on the choosing users...
        target_kappa: ...or the kappa. Neither: the dataset's blind human ceiling (mean pairwise kappa among its
            blind humans, as ``diagnose`` computes it) is the kappa target; a dataset without one gets no threshold.
        level: Confidence level of every interval.

    Raises:
        ValueError: Both targets given.
    """
    with opened(db, read_only=True) as con:
        # The counts are read once, whichever target the threshold aims at.
        counts, scales = read_confidence(con, stage)
        # The ceilings are read only when some judge states a confidence and no target was given.
        ceilings = stage_ceilings(con, stage, level=level) if counts and target_accuracy is None \
            and target_kappa is None and has_blind_pairs(con, stage) else {}
    return confidence_figures(counts, scales, target_accuracy=target_accuracy, target_kappa=target_kappa,
                              ceilings=ceilings, level=level)


def stage_ceilings(con: duckdb.DuckDBPyConnection, stage: str, *, level: float = 0.95) -> dict[str, float]:
    """Dataset -> its blind human ceiling in kappa (``diagnose``'s :func:`human_ceiling_row`), where one exists.

    A dataset whose ceiling is a weighted kappa (an ordinal scale) is left out: the coverage curve's kappa is
    unweighted, so the two are not one figure.
    """
    from personagap.analysis.diagnosis_ceiling import human_ceiling_row, pair_tables
    from personagap.datasets import dataset_records
    from personagap.store import diagnosis_inputs

    # Only the humans' part is needed: an empty per-user count frame spares the judges' confusion counts.
    humans = diagnosis_inputs(con, pairs=pd.DataFrame())["humans"]
    humans = humans[humans["stage"] == stage]
    records = dataset_records(con)
    out = {}
    for dataset, rows in humans.groupby("dataset", sort=True):
        record = records.get((stage, str(dataset)))
        pt = pair_tables(rows, None, None if record is None else record.scale)
        ceiling = None if pt is None else human_ceiling_row(pt, level)
        if ceiling is not None and ceiling.metric == "kappa":
            out[str(dataset)] = ceiling.mean_kappa
    return out


def _row_judge(row: Mapping[str, Any]) -> str:
    # Relevance and response rows carry the display name; extraction's verifier rows the rater (one row per rater,
    # the standard condition's display name).
    if "judge" in row:
        return str(row["judge"])
    return judge_display(str(row.get("verifier", row.get("rater"))), str(row.get("condition") or ""))


CONFIDENCE_KEYS: tuple[str, ...] = ("calibration", "coverage_curve", "threshold")
"""A judge row's confidence figures (:func:`merge_confidence`): item-weighted whatever the row's estimand."""


def merge_confidence(report: dict[str, Any], stage: str, entries: list[JudgeConfidence]) -> dict[str, Any]:
    """``report`` (a stage report's JSON dict) with each judge row that has confidences gaining their entries.

    The row gains ``calibration``, ``coverage_curve``, ``threshold`` and the counts of
    :meth:`~personagap.analysis.confidence_report.JudgeConfidence.to_json`; rows without a confidence are unchanged.
    Changes ``report`` in place and returns it.
    """
    found = confidence_json(entries)
    for key in JUDGE_ROWS[stage]:
        for row in report.get(key) or []:
            extra = found.get((str(row.get("dataset")), _row_judge(row)), {})
            row.update(extra)
            if extra and row.get("estimand") == "users":
                # Calibration and the coverage curve pool items per confidence level: they stay item-weighted.
                row["item_weighted"] = [*row.get("item_weighted", []), *(k for k in CONFIDENCE_KEYS if k in extra)]
    return report


def confidence_lines(entries: list[JudgeConfidence]) -> list[str]:
    """One line per judge with a confidence: Brier, ECE and the held-out check of its threshold (or why none)."""
    lines = []
    for e in entries:
        head = f"{e.judge} ({e.dataset}, {e.with_confidence:,} of {e.labels:,} labels with a confidence"
        head += f" on {e.confidence_scale})" if e.confidence_scale else ")"
        if e.calibration is None:
            parts = [e.note or "no calibration"]
        else:
            cal = e.calibration
            parts = [f"Brier {number(cal.brier.value, 3)} {ci_text(cal.brier, digits=3)}",
                     f"ECE {number(cal.ece.value, 3)} {ci_text(cal.ece, digits=3)}"]
        parts.append(_threshold_text(e))
        lines.append(f"{head}: " + "; ".join(parts))
    return lines


def _threshold_text(e: JudgeConfidence) -> str:
    choice = e.threshold
    if choice is None:
        return "no threshold: no human ceiling to aim at (give --target-accuracy or --target-kappa)"
    target = f"{choice.target.metric} >= {choice.target.value:g}"
    if choice.min_confidence is None:
        return f"no confidence reaches {target} on the {len(choice.chosen_users)} choosing users"
    held = choice.held_out
    if held is None:
        return (f"at confidence >= {choice.min_confidence:g} (chosen for {target}): no held-out user has a label "
                "there")
    return (f"at confidence >= {choice.min_confidence:g} (chosen for {target} on {len(choice.chosen_users)} users): "
            f"accuracy {number(held.accuracy.value, 3)} {ci_text(held.accuracy, digits=3)} on held-out users, "
            f"keeping {held.coverage:.0%} of items")


def confidence_section(entries: list[JudgeConfidence]) -> str:
    """The text report's confidence section ("" when no judge states a confidence)."""
    if not entries:
        return ""
    return "\n".join(["", "Judges' confidence (calibration against the blind human reference; user-clustered CIs):",
                      *(f"  {line}" for line in confidence_lines(entries))])
