"""Stage 1 (attribute extraction): what extractors find, what humans and verifiers accept, how it meets gold.

The report (:func:`extraction_report`, pure) reads stored stage-1 items and labels (kinds in
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

Every CI is the one CI rule (a user-clustered jackknife-t). The I/O entry points (:func:`import_laps`,
:func:`import_extraction`, :func:`report_extraction`, :func:`judge_extraction`) are what the
CLI calls; they are plain functions usable from Python.

The pieces: records (:mod:`.extraction_records`), building the report (:mod:`.extraction_build`), its text
(:mod:`.extraction_text`), running judges (:mod:`.extraction_judge`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.datasets import dataset_records
from personagap.stages.extraction_build import complete_units, extraction_report, items_frame, load_items, unit_gold
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

if TYPE_CHECKING:
    from personagap.human_data.extraction import ExtractionImport
    from personagap.human_data.laps import LapsImport

__all__ = ["ATTRIBUTE_KINDS", "CALIBRATION_NOTE", "PILOT_EXTRACTOR", "VERIFIER_KINDS", "ExtractionReport",
           "ExtractorRun", "GoldSummary", "HumanAgreement", "MatchRow", "VerdictRow", "VerifierAgreement",
           "complete_units", "extraction_report", "import_extraction", "import_laps", "items_frame",
           "judge_extraction", "load_items", "materialise_extractions", "render_extraction", "report_extraction",
           "unit_gold"]


def report_extraction(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES,
                      seed: int = DEFAULT_SEED) -> ExtractionReport:
    """Build the stage-1 report from a database (read-only).

    Each dataset's scale is its record's (:func:`personagap.datasets.dataset_records`, the one reader).
    """
    from personagap.labels_api import dataset_origins

    with opened(db, read_only=True) as con:
        items = load_items(con)
        labels = load_labels(con, stage="extraction")
        origins = dataset_origins(con)
        scales = {ds: r.scale for (stage, ds), r in dataset_records(con).items() if stage == "extraction"}
    return extraction_report(items, labels, n_resamples=n_resamples, seed=seed, origins=origins, scales=scales)


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


