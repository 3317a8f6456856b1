"""The pipeline view and the judges' diagnosis from one set of per-user counts, the pipeline view first.

``diagnose`` and the dashboard show both. Counted apart, each paid for the blind reference and the pass over every
judge label (at 10^7 labels the pipeline view alone took 11 s of ``diagnose``'s 23 s): here
:func:`personagap.store.aggregates.label_counts` runs once on one connection, and the pipeline view (what a reader
sees first) is handed over as soon as it is ready, before the diagnosis is computed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from personagap.analysis.diagnosis import Diagnosis
    from personagap.analysis.pipeline_records import PipelineView

Extras = dict[str, dict[str, list[dict[str, Any]]]]


def pipeline_and_diagnosis(db: str | Path, *, n_resamples: int | None = None, seed: int | None = None,
                           extras: bool = True, on_view: Callable[[PipelineView], None] | None = None
                           ) -> tuple[PipelineView, Diagnosis, Extras]:
    """The pipeline view, the diagnosis and (``extras``) each best judge's rows, counted once from ``db``.

    The same figures as :func:`personagap.analysis.pipeline.pipeline_db`,
    :func:`personagap.analysis.diagnosis.diagnose_db` and
    :func:`personagap.analysis.diagnosis_store.diagnose_from_store` computed apart (a test compares them).

    Args:
        db: The database (opened read-only).
        n_resamples: Kept for the diagnosis' signature (the one CI rule draws no resample); None: the project's
            default (:data:`personagap.analysis.agreement.DEFAULT_RESAMPLES`).
        seed: Kept for the diagnosis' signature; None: :data:`personagap.analysis.agreement.DEFAULT_SEED`.
        extras: Also each stage's best judge's alternative-annotator test and corrected rate (``diagnose``).
        on_view: Called with the pipeline view as soon as it is ready (the dashboard shows it first).

    Returns:
        The pipeline view, the diagnosis and stage -> ``{"alt_test": [...], "estimates": [...]}`` (empty without
        ``extras``).
    """
    # The store's modules first, and the costly count at once: DuckDB runs it off the interpreter lock while the
    # dashboard's server imports what it needs (scipy, streamlit); the analysis modules are imported after it.
    from personagap.analysis.pipeline_sql import reference_table
    from personagap.store import diagnosis_inputs, opened
    from personagap.store.aggregates import item_humans_table, label_counts

    with opened(db, read_only=True) as con, reference_table(con) as reference:
        # The blind reference once, for the judges' counts here and every query of the pipeline view.
        counts = label_counts(con, None, "blind", reference_table=reference)
        judges = counts[0]
        from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
        from personagap.analysis.diagnosis import dataset_scales, diagnose
        from personagap.analysis.diagnosis_store import best_judge_extras
        from personagap.analysis.pipeline import pipeline_view
        from personagap.labels_api import dataset_origins

        n_resamples = DEFAULT_RESAMPLES if n_resamples is None else n_resamples
        seed = DEFAULT_SEED if seed is None else seed
        view = pipeline_view(con, judges)
        if on_view is not None:
            on_view(view)
        pairs = judges[judges["human"].notna()].reset_index(drop=True)
        # The humans per item once, for the ceiling's items and the alternative-annotator test's (after the view:
        # the dashboard shows it first).
        with item_humans_table(con) as humans:
            inputs: dict[str, Any] = {**diagnosis_inputs(con, pairs=pairs, judge_counts=judges, item_humans=humans),
                                      "scales": dataset_scales(con)}
            diagnosis = diagnose(**inputs, n_resamples=n_resamples, seed=seed, origins=dataset_origins(con))
            tests = best_judge_extras(con, diagnosis, n_resamples=n_resamples, seed=seed,
                                      blind_counts=counts, item_humans=humans) if extras else {}
    return view, diagnosis, tests
