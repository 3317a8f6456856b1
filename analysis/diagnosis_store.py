"""``personagap diagnose`` from the store: the diagnosis and each best judge's rows, from one set of aggregates."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import duckdb
import pandas as pd

from personagap.analysis.aggregated import store_extras
from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.analysis.comparable import Reference, judge_display
from personagap.records import DatasetScale, ScaleKind
from personagap.store.aggregates import has_anchored_humans, label_counts

if TYPE_CHECKING:
    from personagap.analysis.diagnosis import Diagnosis, JudgeScore


def best_judge_extras(con: duckdb.DuckDBPyConnection, diagnosis: Diagnosis, *, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED, blind_counts: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                      item_humans: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """For each stage's best judge, its alternative-annotator test and corrected rate, from the store's aggregates.

    The rows of :func:`personagap.api.best_judge_vs_humans` (the stage reports' own rows, restricted to the judge
    ``diagnose`` names best, blind and anchored humans apart), without loading the dataset's labels.

    Args:
        con: An open store connection.
        diagnosis: The diagnosis whose best judges to test.
        n_resamples: Bootstrap resamples of the estimates' CIs.
        seed: Bootstrap seed.
        blind_counts: :func:`~personagap.store.aggregates.label_counts` of every stage (blind reference) when the
            caller has them (:func:`diagnose_from_store`); None: counted here for each best judge's dataset.
        item_humans: The caller's :func:`~personagap.store.aggregates.item_humans_table` (None: counted here).

    Returns:
        Stage -> ``{"alt_test": [...], "estimates": [...]}`` (stages without a best judge are left out).
    """
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for s in diagnosis.stages:
        if s.best is None:
            continue
        best, ds = s.best, s.best.dataset
        anchored = [ds] if has_anchored_humans(con, s.stage, ds) else []
        positive = "yes" if best.binary else None
        # Counts only where estimates are made (a yes/no best judge), of each reference the rows cover.
        references: list[Reference] = ["blind", "anchored"] if anchored else ["blind"]
        counts = {which: _of(blind_counts, s.stage, ds) if which == "blind" and blind_counts is not None
                  else label_counts(con, s.stage, which, ds) for which in references} if positive else {}
        tests, rates = store_extras(con, s.stage, [ds], positive=positive, counts=counts, anchored=anchored,
                                    n_resamples=n_resamples, seed=seed, scales={ds: _scored_scale(best)},
                                    item_humans=item_humans,
                                    judges=None if blind_counts is None else {ds: _of(blind_counts, s.stage, ds)[0]})
        # The judge's one display name is the join key (comparable.judge_display), as the per-label function.
        name = judge_display(best.rater, best.condition)
        out[s.stage] = {"alt_test": [t for t in tests if t["judge"] == name],
                        "estimates": [e for e in rates if e["judge"] == name]}
    return out


def _scored_scale(judge: JudgeScore) -> DatasetScale:
    # The scale diagnose scored the judge over (its dataset's record): read back from the row, not from the store.
    if judge.scale is None:
        raise ValueError(f"{judge.judge} on {judge.dataset}: the diagnosis row does not say its scale")
    return DatasetScale(kind=cast(ScaleKind, judge.scale), categories=tuple(judge.categories))


def _of(counts: tuple[pd.DataFrame, pd.DataFrame], stage: str, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    # One dataset's rows of label_counts over every stage.
    judges, reference = counts
    return (judges[(judges["stage"] == stage) & (judges["dataset"] == dataset)],
            reference[(reference["stage"] == stage) & (reference["dataset"] == dataset)])


def diagnose_from_store(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
                        ) -> tuple[Diagnosis, dict[str, dict[str, list[dict[str, Any]]]]]:
    """``personagap diagnose``: the diagnosis and each best judge's rows, from one set of DuckDB aggregates.

    :func:`personagap.analysis.diagnosis.diagnose_db` and :func:`best_judge_extras` share the per-user counts
    (:func:`personagap.store.aggregates.label_counts`, counted once): the same figures as the two computed apart.

    Args:
        db: The database (opened read-only).
        n_resamples: Bootstrap resamples for every CI.
        seed: Bootstrap seed.

    Returns:
        The diagnosis, and stage -> ``{"alt_test": [...], "estimates": [...]}`` of its best judges.
    """
    from personagap.analysis.diagnosis import dataset_scales, diagnose
    from personagap.labels_api import dataset_origins
    from personagap.store import diagnosis_inputs, opened

    with opened(db, read_only=True) as con:
        counts = label_counts(con, None, "blind")
        judges = counts[0]
        pairs = judges[judges["human"].notna()].drop(columns="judged", errors="ignore").reset_index(drop=True)
        inputs: dict[str, Any] = {**diagnosis_inputs(con, pairs=pairs), "scales": dataset_scales(con)}
        diagnosis = diagnose(**inputs, n_resamples=n_resamples, seed=seed, origins=dataset_origins(con))
        return diagnosis, best_judge_extras(con, diagnosis, n_resamples=n_resamples, seed=seed, blind_counts=counts)
