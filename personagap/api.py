"""The library API behind the CLI: import, report, demo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.human_data.recenter import Coverage, load_recenter
from personagap.stages.relevance import RelevanceReport, relevance_report
from personagap.store import StoreError, gc_paused, load_labels, opened, write_batch

if TYPE_CHECKING:
    from personagap.judges.runner import LMConfig, RunSummary


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


@gc_paused()
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


def relevance_items(db: str | Path, datasets: tuple[str, ...] = ("recenter-stage2",)) -> pd.DataFrame:
    """Relevance items with their prompt text, in a stable order (user, prompt, attribute)."""
    with opened(db, read_only=True) as con:
        return con.execute("""
            SELECT i.item_id, i.dataset, i.user_id, i.prompt_index, i.attribute, p.prompt_text
            FROM items i JOIN prompts p USING (dataset, user_id, prompt_index)
            WHERE i.stage = 'relevance' AND i.dataset IN (SELECT unnest(?)) AND p.prompt_text IS NOT NULL
            ORDER BY i.dataset, i.user_id, i.prompt_index, i.attribute
        """, [list(datasets)]).df()


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
