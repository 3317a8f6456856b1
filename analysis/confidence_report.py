"""Per (dataset, judge, condition) with confidences: calibration, coverage curve and a held-out threshold.

The output contract of issue 23 for ``report STAGE --json`` judge rows: :func:`judge_confidence` returns, keyed by
(dataset, judge display name -- :func:`personagap.analysis.comparable.judge_display`, the key every report joins
judge rows by), the entries to merge into that row: ``calibration`` (:mod:`personagap.analysis.calibration`),
``coverage_curve`` and ``threshold`` (:mod:`personagap.analysis.coverage`), plus what was left out. Computed from
the per-(judge, user, confidence) counts DuckDB builds in one pass with each judge's labels without a confidence
(:func:`personagap.store.confidence.confidence_counts_by_judge`, read a judge at a time), never from per-label frames.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import pandas as pd

from personagap.analysis.agreement import json_safe_dict
from personagap.analysis.calibration import DEFAULT_BINS, Calibration, calibration
from personagap.analysis.comparable import judge_display
from personagap.analysis.coverage import CoveragePoint, Target, ThresholdChoice, choose_threshold, coverage_curve
from personagap.confidence import UNSTATED
from personagap.datasets import dataset_records
from personagap.records import DatasetScale
from personagap.store.confidence import JudgeCounts, any_confidence, confidence_counts_by_judge


@dataclass(frozen=True)
class JudgeConfidence:
    """One judge's confidence figures on one dataset."""

    dataset: str
    rater: str
    rater_kind: str
    condition: str
    confidence_scale: str | None
    calibration: Calibration | None
    coverage_curve: tuple[CoveragePoint, ...]
    threshold: ThresholdChoice | None
    labels: int
    with_confidence: int
    confidence_failures: int
    note: str | None = None

    @property
    def judge(self) -> str:
        """The judge's display name (the key report rows are joined by)."""
        return judge_display(self.rater, self.condition)

    def to_json(self) -> dict[str, Any]:
        """The entries merged into the judge's report row (NaN as null)."""
        return json_safe_dict({
            "confidence_scale": self.confidence_scale,
            "calibration": None if self.calibration is None else self.calibration.to_json(),
            "coverage_curve": [p.to_json() for p in self.coverage_curve],
            "threshold": None if self.threshold is None else self.threshold.to_json(),
            "labels": self.labels, "with_confidence": self.with_confidence,
            "confidence_failures": self.confidence_failures, "confidence_note": self.note})


def target_for(dataset: str, *, target_accuracy: float | None, target_kappa: float | None,
               ceilings: Mapping[str, float]) -> Target | None:
    """The threshold's target: a given accuracy or kappa, else the dataset's own blind human ceiling (kappa).

    Raises:
        ValueError: Both a target accuracy and a target kappa were given.
    """
    if target_accuracy is not None and target_kappa is not None:
        raise ValueError("give --target-accuracy or --target-kappa, not both")
    if target_accuracy is not None:
        return Target("accuracy", target_accuracy, "given")
    if target_kappa is not None:
        return Target("kappa", target_kappa, "given")
    ceiling = ceilings.get(dataset)
    return None if ceiling is None else Target("kappa", ceiling, "human ceiling")


def judge_confidence(con: duckdb.DuckDBPyConnection, stage: str, *, dataset: str | None = None,
                     target_accuracy: float | None = None, target_kappa: float | None = None,
                     ceilings: Mapping[str, float] | None = None, n_bins: int = DEFAULT_BINS,
                     level: float = 0.95) -> list[JudgeConfidence]:
    """Calibration, coverage curve and held-out threshold of every judge of ``stage`` whose labels carry a confidence.

    Args:
        con: An open store connection.
        stage: Pipeline stage.
        dataset: Only this dataset (None: every dataset of the stage).
        target_accuracy: Choose the threshold reaching this accuracy (else ``target_kappa``, else the ceiling).
        target_kappa: Choose the threshold reaching this kappa.
        ceilings: Dataset -> its blind human ceiling (mean pairwise kappa among its blind humans, from the
            diagnosis); used as the target where no target is given. A dataset without one gets no threshold.
        n_bins: Reliability bins.
        level: Confidence level of every interval.

    Returns:
        One entry per (dataset, judge, condition) with at least one confidence, sorted.
    """
    counts, scales = read_confidence(con, stage, dataset)
    return confidence_figures(counts, scales, target_accuracy=target_accuracy, target_kappa=target_kappa,
                              ceilings=ceilings, n_bins=n_bins, level=level)


def read_confidence(con: duckdb.DuckDBPyConnection, stage: str,
                    dataset: str | None = None) -> tuple[list[JudgeCounts], dict[str, DatasetScale]]:
    """What :func:`confidence_figures` computes from: each judge's counts and the stage's dataset scales.

    Nothing is counted on a store where no label states a confidence (:func:`any_confidence`): no judges then.
    """
    if not any_confidence(con):
        return [], {}
    counts = confidence_counts_by_judge(con, stage, dataset)
    return counts, {ds: rec.scale for (st, ds), rec in dataset_records(con).items() if st == stage}


def confidence_figures(counts: list[JudgeCounts], scales: Mapping[str, DatasetScale], *,
                       target_accuracy: float | None = None, target_kappa: float | None = None,
                       ceilings: Mapping[str, float] | None = None, n_bins: int = DEFAULT_BINS,
                       level: float = 0.95) -> list[JudgeConfidence]:
    """:func:`judge_confidence` from counts already read (so a caller reads them once whatever target it picks).

    Args:
        counts: Each judge's counts (:func:`personagap.store.confidence.confidence_counts_by_judge`).
        scales: Dataset -> its scale (kappa and the coverage curve are scored over its categories).
        target_accuracy: As :func:`judge_confidence`.
        target_kappa: As :func:`judge_confidence`.
        ceilings: As :func:`judge_confidence`.
        n_bins: Reliability bins.
        level: Confidence level of every interval.

    Raises:
        ValueError: Both targets given.
    """
    out = []
    for judge in counts:
        rows = judge.rows
        base = JudgeConfidence(dataset=judge.dataset, rater=judge.rater, rater_kind=judge.rater_kind,
                               condition=judge.condition, confidence_scale=None, calibration=None, coverage_curve=(),
                               threshold=None, labels=judge.labels, with_confidence=judge.with_confidence,
                               confidence_failures=judge.confidence_failures)
        if len(judge.scales) > 1:
            out.append(replace(base, note=f"confidences on several scales ({', '.join(judge.scales)}): not "
                                          "comparable, so no calibration or curve"))
            continue
        (scale,) = judge.scales
        target = target_for(judge.dataset, target_accuracy=target_accuracy, target_kappa=target_kappa,
                            ceilings=ceilings or {})
        known = scale not in (UNSTATED, "")
        out.append(replace(
            base, confidence_scale=scale,
            calibration=calibration(rows, scale, n_bins=n_bins, level=level) if known else None,
            coverage_curve=tuple(coverage_curve(rows, scales[judge.dataset], level=level)),
            threshold=None if target is None else choose_threshold(rows, scales[judge.dataset], target, level=level),
            note=None if known else "the source states no confidence scale: a coverage curve, but no calibration"))
    return out


def confidence_json(entries: list[JudgeConfidence]) -> dict[tuple[str, str], dict[str, Any]]:
    """(dataset, judge display name) -> the entries to merge into that judge's report row."""
    return {(e.dataset, e.judge): e.to_json() for e in entries}


def frame(entries: list[JudgeConfidence]) -> pd.DataFrame:
    """One row per judge (dataset, judge, scale, Brier, ECE, labels with a confidence): for tables and pages."""
    return pd.DataFrame([{"dataset": e.dataset, "judge": e.judge, "scale": e.confidence_scale,
                          "brier": None if e.calibration is None else e.calibration.brier.value,
                          "ece": None if e.calibration is None else e.calibration.ece.value,
                          "with_confidence": e.with_confidence, "labels": e.labels} for e in entries])
