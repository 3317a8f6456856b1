"""Stage 1 (attribute extraction): what extractors find, what humans and verifiers accept, how it meets gold.

The report (:func:`report_extraction`) reads stored stage-1 items and labels (kinds in
:mod:`personagap.judges.extraction`) and answers:

* **Human-human agreement** on verdicts (ok / bad / unsure, nominal): Krippendorff's alpha,
  Fleiss' kappa and mean pairwise Cohen's kappa, with per-annotator verdict rates
  (the Re-Centering pilot; any dataset with two or more human raters).
* **Acceptance**: per extractor, the share of its attributes humans accept (``ok``: the
  acceptance precision) and mark ``bad`` (unsupported or broader than the evidence: the
  over-generalisation rate); the same for each LLM verifier; verifier-human kappa against the
  per-item human majority.
* **Gold matching** (LAPS, or imported gold): precision, recall and F1 overall and per
  category, per split, with the offline matcher (threshold stated) and any LLM matcher.

Every CI is the one CI rule (a user-clustered jackknife-t). :func:`report_extraction` computes the report from
DuckDB's per-(dataset, extractor, rater, user) verdict counts (:func:`extraction_report_from_store`,
:mod:`personagap.store.extraction_counts`), the one path: the per-label computation over every label it replaced
lives on as a test oracle (``tests/oracles.py``), against which the equivalence tests check it.
The I/O entry points (:func:`import_laps`, :func:`import_extraction`, :func:`report_extraction`,
:func:`judge_extraction`) are what the CLI calls; they are plain functions usable from Python.

The pieces: records (:mod:`.extraction_records`), building the report (:mod:`.extraction_build`), its text
(:mod:`.extraction_text`), running judges (:mod:`.extraction_judge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pandas as pd

from personagap.analysis.alt_test import MIN_HUMANS_PER_ITEM
from personagap.analysis.comparable import roles
from personagap.analysis.panel import extras_rows
from personagap.analysis.weighting import Weight
from personagap.datasets import dataset_records
from personagap.records import DatasetScale
from personagap.stages.extraction_build import (
    assemble_report,
    complete_units,
    inferred_scales,
    items_frame,
    load_items,
    unit_gold,
)
from personagap.stages.extraction_judge import judge_extraction, materialise_extractions
from personagap.stages.extraction_records import (
    ATTRIBUTE_KINDS,
    CALIBRATION_NOTE,
    PILOT_EXTRACTOR,
    VERIFIER_KINDS,
    ExtractionReport,
    ExtractorRun,
    GoldSummary,
    HumanAgreement,
    MatchRow,
    VerdictRow,
    VerifierAgreement,
)
from personagap.stages.extraction_text import render_extraction
from personagap.store import gc_paused, load_labels, opened, write_batch
from personagap.store.aggregates import item_humans_table, multi_human_labels
from personagap.store.extraction_counts import (
    human_verdicts,
    side_items,
    side_labels,
    verdict_counts,
    verdict_item_ids,
)

if TYPE_CHECKING:
    from personagap.human_data.extraction import ExtractionImport
    from personagap.human_data.laps import LapsImport
    from personagap.vocabulary import HumanSet

__all__ = ["ATTRIBUTE_KINDS", "CALIBRATION_NOTE", "PILOT_EXTRACTOR", "VERIFIER_KINDS", "ExtractionReport",
           "ExtractorRun", "GoldSummary", "HumanAgreement", "MatchRow", "VerdictRow", "VerifierAgreement",
           "complete_units", "extraction_report_from_store", "import_extraction", "import_laps",
           "items_frame",
           "judge_extraction", "load_items", "materialise_extractions", "render_extraction", "report_extraction",
           "unit_gold"]


def report_extraction(db: str | Path, *, weight: Weight = "items") -> ExtractionReport:
    """Build the stage-1 report from a database (read-only).

    From DuckDB's aggregates (:func:`extraction_report_from_store`), without loading the verdicts. Each dataset's
    scale is its record's (:func:`personagap.datasets.dataset_records`, the one reader). ``weight``: what the
    verifier rows' table figures weigh equally (``items``, the default, or ``users``).
    """
    from personagap.store.dataset_reads import dataset_origins

    with opened(db, read_only=True) as con:
        origins = dataset_origins(con)
        scales = {ds: r.scale for (stage, ds), r in dataset_records(con).items() if stage == "extraction"}
        return extraction_report_from_store(con, origins=origins, scales=scales,
                                            weight=weight)


def extraction_report_from_store(con: duckdb.DuckDBPyConnection, *, origins: Mapping[str, str] | None = None,
                                 scales: Mapping[str, DatasetScale] | None = None,
                                 weight: Weight = "items") -> ExtractionReport:
    """The stage-1 report from an open store, computed from DuckDB's aggregates (issue 20).

    Acceptance, verifier-human agreement and the corrected estimates come from per-(dataset, extractor, rater,
    user) verdict counts (:func:`personagap.store.extraction_counts.verdict_counts`); agreement among humans reads
    the human verdicts of datasets with two or more human raters; the alternative-annotator test reads only items
    several humans labelled; extractor runs and gold matching read chunks, gold and the attributes of datasets
    that have them. Memory does not grow with the number of verdicts.

    Args:
        con: An open (read-only is enough) store connection.
        origins: Dataset -> ``real`` or ``synthetic``; datasets missing from it are real.
        scales: Dataset -> its scale (:func:`personagap.datasets.dataset_records`); a dataset missing from it is
            read the way the record reader infers one from its labels.
        weight: What the verifier rows' table figures weigh equally (``items`` or ``users``).
    """
    counts, reference = verdict_counts(con, unnamed_extractor=PILOT_EXTRACTOR)
    datasets = sorted({*map(str, counts["dataset"].unique()), *map(str, reference["dataset"].unique())})
    scales = dict(scales or {})
    for ds in (ds for ds in datasets if ds not in scales):  # no stored record: the reader's rule on its labels
        scales |= inferred_scales(load_labels(con, stage="extraction", dataset=ds))
    human_counts = counts[counts["rater_kind"] == "human"]
    several = [str(ds) for ds, n in human_counts.groupby("dataset")["rater"].nunique().items() if n >= 2]
    judges = counts[counts["rater_kind"].isin(VERIFIER_KINDS) & counts["label"].notna()].assign(condition="")

    def alt_labels(ds: str) -> pd.DataFrame:
        # The standard-protocol verdicts among the labels of items several humans labelled (as the verdicts the
        # per-label report hands the test).
        rows = multi_human_labels(con, "extraction", ds, min_humans=MIN_HUMANS_PER_ITEM)
        rows = rows[roles(rows).isin(["blind_human", "judge"]) & (rows["condition"].fillna("") == "")]
        return rows[rows["item_id"].isin(verdict_item_ids(con, rows["item_id"].astype(str).tolist()))]

    def of(ds: str, humans: HumanSet) -> tuple[pd.DataFrame, pd.DataFrame]:
        del humans  # blind only: stage-1 verdicts have no anchored protocol
        return judges[judges["dataset"] == ds], reference[reference["dataset"] == ds]

    with item_humans_table(con):  # the humans per item counted once for every dataset's test
        alt_test, estimates = extras_rows(datasets, alt_labels=alt_labels, counts=of, positive="ok",
                                          scales={ds: scales[ds] for ds in datasets})
    items = items_frame(side_items(con))
    labelled = items.loc[items["kind"].isin(["chunk", "match"]), "item_id"].astype(str).tolist()
    return assemble_report(counts, reference, human_verdicts(con, several), scales, alt_test, estimates,
                           items=items, side_labels=side_labels(con, labelled),
                           origins=origins, weight=weight)


@gc_paused()
def import_laps(path: str | Path, db: str | Path) -> LapsImport:
    """Validate LAPS release files and write them to ``db`` in one transaction (nothing on any error)."""
    from personagap.human_data.laps import load_laps

    result = load_laps(path)
    write_batch(db, result.batch)
    return result


@gc_paused()
def import_extraction(path: str | Path, db: str | Path) -> ExtractionImport:
    """Validate extraction JSONL file(s) and write them to ``db`` in one transaction (nothing on any error)."""
    from personagap.human_data.extraction import load_extraction

    result = load_extraction(path)
    write_batch(db, result.batch)
    return result


