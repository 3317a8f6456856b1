"""The library API behind the CLI: import, report, demo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.human_data.recenter import Coverage, load_recenter
from personagap.stages.relevance import RelevanceReport, relevance_report
from personagap.store import load_labels, opened, write_batch


@dataclass(frozen=True)
class ImportSummary:
    """What an import wrote and how the LLM files join the human labels."""

    db: str
    files: dict[str, int]
    written: dict[str, int]
    coverage: list[Coverage]
    unanswered: dict[str, int]

    def render(self) -> str:
        """Plain-text summary for the terminal."""
        lines = [f"Imported {len(self.files)} files into {self.db}:"]
        lines += [f"  {path}: {rows} rows" for path, rows in self.files.items()]
        lines.append("  written: " + ", ".join(f"{n} {table}" for table, n in self.written.items()))
        for path, n in self.unanswered.items():
            lines.append(f"  note: {path}: {n} judgments left unanswered (null) by the annotator; not imported")
        if self.coverage:
            lines.append("Join coverage (LLM pairs vs human-majority pairs, key = user_id, prompt_index, attribute):")
            for c in self.coverage:
                lines.append(f"  {c.dataset} / {c.rater}: {c.matched} matched, {c.llm_only} LLM-only, "
                             f"{c.human_only} human-only")
        return "\n".join(lines)


def import_recenter(path: str | Path, db: str | Path) -> ImportSummary:
    """Validate a Re-Centering release folder and write it to ``db`` in one transaction.

    Re-importing the same files replaces rows by their keys, so it never duplicates.

    Raises:
        personagap.human_data.DataError: The release deviates from its format; nothing is written.
    """
    result = load_recenter(path)
    written = write_batch(db, result.batch)
    return ImportSummary(db=str(db), files=result.files, written=written, coverage=result.coverage,
                         unanswered=result.unanswered)


def report_relevance(db: str | Path, *, n_resamples: int = DEFAULT_RESAMPLES,
                     seed: int = DEFAULT_SEED) -> RelevanceReport:
    """Build the stage-2 report from a database (read-only)."""
    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage="relevance")
    return relevance_report(labels, n_resamples=n_resamples, seed=seed)
