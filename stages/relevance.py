"""Stage 2 (relevance selection): judges vs the human majority, and pilot agreement among raters.

Which labels count is :mod:`personagap.analysis.comparable`'s rule: judges are scored against the blind
human reference only; the pilot's agreement among raters is computed from blind labels, and the labels
annotators gave after seeing an LLM's label (anchored) get their own, labelled section; rater kinds
(llm, trained, baseline) are separate groups.

The pieces: records (:mod:`.relevance_records`), the pilot's per-annotator agreement (:mod:`.relevance_labels`), the
text view (:mod:`.relevance_text`); this module computes the report from the store's aggregates, the one path (the
per-label report it replaced is a test oracle, ``tests/oracles.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import duckdb
import pandas as pd

from personagap.analysis.aggregated import store_extras
from personagap.analysis.comparable import (
    JUDGE_KINDS,
    YES_NO,
)
from personagap.analysis.weighting import Weight
from personagap.records import DatasetScale
from personagap.stages.relevance_labels import (
    assemble_report,
    dataset_scale,
    judge_agreements,
    judge_agreements_from_counts,
    multi_rater_report,
    pilot_reports,
)
from personagap.stages.relevance_records import (
    REFERENCE,
    STAGE,
    JudgeAgreement,
    RelevanceReport,
)
from personagap.stages.relevance_text import render_relevance
from personagap.store import load_labels
from personagap.store.aggregates import has_labels, judge_failures, label_counts
from personagap.vocabulary import HumanSet

__all__ = ["JUDGE_KINDS", "REFERENCE", "RelevanceReport", "dataset_scale", "judge_agreements",
           "multi_rater_report", "relevance_report_from_store", "render_relevance",
           "report_relevance"]


def relevance_report_from_store(con: duckdb.DuckDBPyConnection, *, pilot_dataset: str = "recenter-pilot",
                                origins: Mapping[str, str] | None = None,
                                scales: Mapping[str, DatasetScale], weight: Weight = "items") -> RelevanceReport:
    """The stage-2 report from an open store, computed from DuckDB's aggregates (issue 20): the one path.

    Judge rows and corrected estimates come from per-(dataset, judge, condition, user) counts; the
    alternative-annotator test reads only items several humans labelled; the pilot's agreement among raters
    (per item, per annotator) reads the pilot dataset's labels alone. Memory does not grow with the labels of
    the other datasets.

    Args:
        con: An open (read-only is enough) store connection.
        pilot_dataset: The dataset with per-annotator labels for the agreement table.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`); every dataset with labels.
        weight: What the judge rows' table figures weigh equally (``items`` or ``users``).
    """
    counts: dict[HumanSet, tuple[pd.DataFrame, pd.DataFrame]] = {
        "blind": label_counts(con, STAGE, "blind")}
    failures = judge_failures(con, STAGE)
    # A dataset without judge labels or a reference gives no row; the pilot's agreement among humans needs neither.
    datasets = sorted({*counts["blind"][0]["dataset"], *counts["blind"][1]["dataset"], *failures["dataset"],
                       *([pilot_dataset] if has_labels(con, STAGE, pilot_dataset) else [])})
    judge_rows = counts["blind"][0]  # every comparable judge's parsed labels: the alt-test's judges per dataset
    judges = [j for ds in datasets if ds != pilot_dataset
              for j in judge_agreements_from_counts(*counts["blind"], failures, ds, scale=scales[ds], weight=weight)]
    pilot = anchored = None
    notes: list[str] = []
    if pilot_dataset in datasets:
        counts["anchored"] = label_counts(con, STAGE, "anchored")
        # The pilot's judge rows from the same counts as every other dataset's (one judge-row path); its labels
        # are read for the agreement among raters, which needs each annotator's label per item.
        pilot_judges: dict[HumanSet, list[JudgeAgreement]] = {
            which: judge_agreements_from_counts(*counts[which], failures, pilot_dataset, scale=scales[pilot_dataset],
                                                which=which, weight=weight)
            for which in counts}
        pilot, anchored, notes = pilot_reports(load_labels(con, stage=STAGE, dataset=pilot_dataset), pilot_dataset,
                                                scale=scales[pilot_dataset], weight=weight, judges=pilot_judges)
    alt_test, estimates = store_extras(con, STAGE, datasets, positive="yes", counts=counts,
                                       anchored=[pilot_dataset] if pilot_dataset in datasets else [],
                                       rate_datasets=[ds for ds in datasets if scales[ds].categories == YES_NO],
                                       scales=scales,
                                       judges={ds: judge_rows[judge_rows["dataset"] == ds] for ds in datasets})
    return assemble_report(judges, pilot, anchored, notes, alt_test, estimates, origins=origins, weight=weight)


def report_relevance(db: str | Path, *, weight: Weight = "items") -> RelevanceReport:
    """Build the stage-2 report from a database (read-only), each dataset tagged real or synthetic.

    From DuckDB's aggregates (:func:`relevance_report_from_store`), without loading every label. ``weight``: what
    the judge rows' table figures weigh equally (``items``, the default, or ``users``).
    """
    from personagap.datasets import dataset_records
    from personagap.store import opened
    from personagap.store.dataset_reads import dataset_origins

    with opened(db, read_only=True) as con:
        origins = dataset_origins(con)
        scales = {ds: r.scale for (stage, ds), r in dataset_records(con).items() if stage == STAGE}
        return relevance_report_from_store(con, origins=origins, scales=scales,
                                           weight=weight)

