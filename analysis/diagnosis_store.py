"""The one diagnosis of a store, :func:`diagnose_store`: ``diagnose``, the Overview, the demo and the API.

The judges' diagnosis, the pipeline view and each best judge's rows, from one set of DuckDB aggregates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pandas as pd

from personagap.analysis.aggregated import store_extras
from personagap.analysis.agreement import DEFAULT_SEED
from personagap.analysis.comparable import judge_display
from personagap.analysis.weighting import Weight
from personagap.records import DatasetScale
from personagap.scales import stored_scale
from personagap.store.aggregates import has_anchored_humans, label_counts
from personagap.vocabulary import HUMAN_SETS, HumanSet

if TYPE_CHECKING:
    from personagap.analysis.diagnosis import Diagnosis, JudgeScore
    from personagap.analysis.pipeline_records import PipelineView

Extras = dict[str, dict[str, list[dict[str, Any]]]]


def best_judge_extras(con: duckdb.DuckDBPyConnection, diagnosis: Diagnosis, *,
                      blind_counts: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                      item_humans: str | None = None) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """For each stage's best judge, its alternative-annotator test and corrected rate, from the store's aggregates.

    The rows of :func:`personagap.api.best_judge_vs_humans` (the stage reports' own rows, restricted to the judge
    ``diagnose`` names best, blind and anchored humans apart), without loading the dataset's labels.

    Args:
        con: An open store connection.
        diagnosis: The diagnosis whose best judges to test.
        blind_counts: :func:`~personagap.store.aggregates.label_counts` of every stage (blind reference) when the
            caller has them (:func:`diagnose_store`); None: counted here for each best judge's dataset.
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
        references: list[HumanSet] = list(HUMAN_SETS) if anchored else ["blind"]
        counts = {which: _of(blind_counts, s.stage, ds) if which == "blind" and blind_counts is not None
                  else label_counts(con, s.stage, which, ds) for which in references} if positive else {}
        tests, rates = store_extras(con, s.stage, [ds], positive=positive, counts=counts, anchored=anchored,
                                    scales={ds: _scored_scale(best)},
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
    return stored_scale(judge.scale, judge.categories)


def _of(counts: tuple[pd.DataFrame, pd.DataFrame], stage: str, dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    # One dataset's rows of label_counts over every stage.
    judges, reference = counts
    return (judges[(judges["stage"] == stage) & (judges["dataset"] == dataset)],
            reference[(reference["stage"] == stage) & (reference["dataset"] == dataset)])


@dataclass(frozen=True)
class StoreDiagnosis:
    """What :func:`diagnose_store` returns: the diagnosis, and what was asked for beside it."""

    diagnosis: Diagnosis
    view: PipelineView | None = None
    """The pipeline view (``view=True`` or ``on_view``), else None."""
    extras: Extras = field(default_factory=dict)
    """Stage -> ``{"alt_test": [...], "estimates": [...]}`` of each best judge (``extras=True``), else empty."""


def diagnose_store(db: str | Path, *, view: bool = False, extras: bool = False,
                   on_view: Callable[[PipelineView], None] | None = None, seed: int = DEFAULT_SEED,
                   weight: Weight = "items") -> StoreDiagnosis:
    """The one diagnosis of a store: ``personagap diagnose``, the dashboard's Overview, the demo and the API.

    Every figure comes from per-user counts DuckDB aggregates once (:func:`personagap.store.aggregates.label_counts`
    against the blind reference): the judges' scores, the ceilings and gaps (:func:`personagap.analysis.diagnosis.
    diagnose`, pure), and, when asked, the pipeline view (``view``; handed to ``on_view`` as soon as it is ready,
    before the diagnosis is computed: the dashboard shows it first) and each stage's best judge's
    alternative-annotator test and corrected rate (``extras``, :func:`best_judge_extras`).

    Args:
        db: The database (opened read-only, for one batch of queries).
        view: Also the pipeline view (:func:`personagap.analysis.pipeline.pipeline_view`) from the same counts.
        extras: Also each stage's best judge's alternative-annotator test and corrected rate.
        on_view: Called with the pipeline view as soon as it is ready (implies ``view``).
        seed: Seed of the halves of users the best-judge gap is cross-fitted on.
        weight: What the judges' scores, ceilings and gaps weigh equally (``diagnose --weight``): ``items`` (the
            default, what the Overview shows) or ``users``. The pipeline view and the best judges' extras pool
            items either way (the extras' rows say so in ``estimand``; the pipeline view's rows carry none).

    Raises:
        personagap.store.StoreError: The file is missing, not a PersonaGap store, or held by a writer too long.
    """
    # The store's modules first, and the costly count at once: DuckDB runs it off the interpreter lock while the
    # dashboard's server imports what it needs (scipy, streamlit); the analysis modules are imported after it.
    from personagap.analysis.pipeline_sql import reference_table
    from personagap.store import diagnosis_inputs, opened
    from personagap.store.aggregates import item_humans_table

    want_view = view or on_view is not None
    with opened(db, read_only=True) as con, reference_table(con) as reference:
        # The blind reference once, for the judges' counts here and every query of the pipeline view.
        counts = label_counts(con, None, "blind", reference_table=reference)
        judges = counts[0]
        from personagap.analysis.diagnosis import dataset_scales, diagnose
        from personagap.analysis.pipeline import pipeline_view
        from personagap.store.dataset_reads import dataset_origins

        seen = pipeline_view(con, judges) if want_view else None
        if on_view is not None and seen is not None:
            on_view(seen)
        pairs = judges[judges["human"].notna()].reset_index(drop=True)
        # The humans per item once, for the ceiling's items and the alternative-annotator test's.
        with item_humans_table(con) as humans:
            inputs: dict[str, Any] = {**diagnosis_inputs(con, pairs=pairs, judge_counts=judges, item_humans=humans),
                                      "scales": dataset_scales(con)}
            diagnosis = diagnose(**inputs, seed=seed, origins=dataset_origins(con), weight=weight)
            rows = best_judge_extras(con, diagnosis, blind_counts=counts,
                                     item_humans=humans) if extras else {}
    return StoreDiagnosis(diagnosis=diagnosis, view=seen, extras=rows)
