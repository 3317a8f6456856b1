"""The library API behind the CLI: import, report, demo; `import_labels` / `load_labels` for notebooks (issue 14).

Every stage report is reachable: :func:`report_extraction`, :func:`report_relevance`, :func:`report_response` (the
CLI's own report functions); :func:`load_labels` gives a frame :func:`import_labels` takes back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from personagap.analysis.comparable import ANCHORED_MAJORITY, CONVERTED_SHOWN_LLM
from personagap.analysis.weighting import Weight
from personagap.human_data.recenter import Coverage, load_recenter
from personagap.labels_api import dataset_origins as dataset_origins
from personagap.labels_api import import_labels as import_labels
from personagap.labels_api import load_labels as load_labels
from personagap.stages.relevance import RelevanceReport
from personagap.stages.relevance import report_relevance as stage_relevance_report
from personagap.store import StoreError, WriteSummary, gc_paused, opened, write_batch
from personagap.store.item_reads import relevance_prompt_items

if TYPE_CHECKING:
    from personagap.analysis.diagnosis import Diagnosis
    from personagap.judges.runner import LMConfig, RunSummary
    from personagap.stages.extraction_records import ExtractionReport
    from personagap.stages.response_records import ResponseReport


@dataclass(frozen=True)
class ImportSummary:
    """What an import read, what it changed in the database, and how the LLM files join the human labels."""

    db: str
    files: dict[str, int]
    written: WriteSummary
    """Rows inserted / updated / removed / unchanged per table."""
    coverage: list[Coverage]
    unanswered: dict[str, int]
    undecided: dict[str, int] = field(default_factory=dict)
    converted: dict[str, int] = field(default_factory=dict)
    anchored_majorities: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        lines = [f"Imported {len(self.files)} files into {self.db}:"]
        lines += [f"  {path}: {rows} rows" for path, rows in self.files.items()]
        lines.append("  database: " + self.written.render())
        for path, n in self.unanswered.items():
            lines.append(f"  note: {path}: {n} judgments left unanswered (null) by the annotator; not imported")
        for path, n in self.converted.items():
            lines.append(f"  note: {path}: {n} judgments copied from task 2 (given after seeing an LLM's label): "
                         f"stored as anchored ({CONVERTED_SHOWN_LLM!r}), not blind")
        for path, n in self.undecided.items():
            lines.append(f"  note: {path}: {n} human majorities are ties: undecided, no majority label stored "
                         "(rule: the unique most frequent label; a tie is no majority)")
        for path, n in self.anchored_majorities.items():
            lines.append(f"  note: {path}: {n} human majorities include anchored votes: stored as "
                         f"{ANCHORED_MAJORITY!r}, not as the blind reference")
        if self.coverage:
            lines.append("Join coverage (LLM pairs vs human-majority pairs, key = user_id, prompt_index, attribute):")
            for c in self.coverage:
                lines.append(f"  {c.dataset} / {c.rater}: {c.matched} matched, {c.llm_only} LLM-only, "
                             f"{c.human_only} human-only")
        return "\n".join(lines)


@gc_paused()
def import_recenter(path: str | Path, db: str | Path) -> ImportSummary:
    """Validate a Re-Centering release folder and write it to ``db`` in one transaction.

    Re-importing replaces what the same files wrote before: rows are matched by their keys (never
    duplicated), and labels a file no longer holds are removed in the same transaction.

    Raises:
        personagap.human_data.DataError: The release deviates from its format; nothing is written.
        StoreError: The database cannot be opened or written; nothing is written.
    """
    result = load_recenter(path)
    written = write_batch(db, result.batch)
    return ImportSummary(db=str(db), files=result.files, written=written, coverage=result.coverage,
                         unanswered=result.unanswered, undecided=result.undecided, converted=result.converted,
                         anchored_majorities=result.anchored_majorities)


def report_relevance(db: str | Path, *, weight: Weight = "items") -> RelevanceReport:
    """Build the stage-2 report from a database (read-only), with each dataset's origin (real/synthetic).

    ``weight``: what the judge rows' table figures weigh equally, ``items`` (the default) or ``users``
    (:mod:`personagap.analysis.weighting`).
    """
    return stage_relevance_report(db, weight=weight)


def report_response(db: str | Path, *, weight: Weight = "items") -> ResponseReport:
    """Build the stage-3 report from a database (read-only): what ``personagap report response`` prints.

    The CLI's own function (:func:`personagap.stages.response.report_response`); ``to_json_dict()`` is its
    ``--json`` output without the confidence figures. ``weight``: what the judge rows' table figures weigh equally,
    ``items`` (the default) or ``users`` (:mod:`personagap.analysis.weighting`).
    """
    from personagap.stages.response import report_response as stage_response_report

    return stage_response_report(db, weight=weight)


def report_extraction(db: str | Path, *, weight: Weight = "items") -> ExtractionReport:
    """Build the stage-1 report from a database (read-only): what ``personagap report extraction`` prints.

    The CLI's own function (:func:`personagap.stages.extraction.report_extraction`); ``to_json_dict()`` is its
    ``--json`` output without the confidence figures. ``weight`` as in :func:`report_response`.
    """
    from personagap.stages.extraction import report_extraction as stage_extraction_report

    return stage_extraction_report(db, weight=weight)


def relevance_items(db: str | Path, datasets: tuple[str, ...] = ("recenter-stage2",)) -> pd.DataFrame:
    """Relevance items with their prompt text, in a stable order (user, prompt, attribute)."""
    with opened(db, read_only=True) as con:
        return relevance_prompt_items(con, datasets)


def judge_relevance(db: str | Path, judge_name: str, lm: LMConfig, *, datasets: tuple[str, ...] = ("recenter-stage2",),
                    concurrency: int = 8, limit: int | None = None, max_retries: int = 4,
                    progress: bool = True) -> RunSummary:
    """Run a stage-2 judge over the imported relevance items of ``datasets``.

    Raises:
        StoreError: The database has no relevance items with prompt text for those datasets.
    """
    from personagap.judges import get_judge
    from personagap.judges.relevance import relevance_tasks
    from personagap.judges.runner import run_judge

    items = relevance_items(db, datasets)
    if items.empty:
        raise StoreError(f"{db}: no relevance items with prompt text in {', '.join(datasets)}; "
                         "import a release first (personagap import recenter PATH)")
    judge = get_judge(judge_name)
    tasks = relevance_tasks(judge, items)
    return run_judge(db, judge, tasks, lm, concurrency=concurrency, limit=limit, max_retries=max_retries,
                     progress=progress, source=",".join(datasets))


def best_judge_vs_humans(db: str | Path, diagnosis: Diagnosis) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """For each stage's best judge: can it replace a human (alternative-annotator test), and its corrected rate.

    The same rows as the stage reports' ``alt_test`` and ``estimates`` (one shared implementation,
    :func:`personagap.analysis.panel.extras_rows`), restricted to the judge ``diagnose`` names best, on its
    dataset; blind and anchored humans on separate rows when the dataset has anchored labels.

    Args:
        db: The database (opened read-only).
        diagnosis: The diagnosis whose best judges to test.

    Returns:
        Stage -> ``{"alt_test": [...], "estimates": [...]}`` (stages without a best judge are left out).
    """
    from personagap.analysis.diagnosis_store import best_judge_extras

    with opened(db, read_only=True) as con:
        return best_judge_extras(con, diagnosis)
