"""Repeated judging (``judge --repeats K --temperature T``): K samples per item, their majority, self-agreement.

Sample ``k`` is its own run and rater (``JUDGE+sample-k/vN/MODEL``, :func:`personagap.judges.base.rater_name`) with
its own cached answers, so a rerun resumes each sample. The majority of the K samples of each item is stored as a
judge of its own (``JUDGE+majority-of-K/vN/MODEL``, a :mod:`personagap.judges.jury` of the samples under each
condition), and :func:`self_agreement_of` reports how often the samples agree (a ceiling on agreeing with people).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personagap.analysis.self_agreement import SelfAgreement, self_agreement
from personagap.judges.base import Judge, JudgeTask
from personagap.judges.jury import JuryResult, build_jury
from personagap.judges.lm import LMConfig
from personagap.judges.runner import run_judge
from personagap.judges.summary import RunSummary
from personagap.store import opened


def majority_rater(judge: Judge, model: str, repeats: int) -> str:
    """The rater key of the majority of ``repeats`` samples."""
    return f"{judge.name}+majority-of-{repeats}/v{judge.version}/{model}"


@dataclass(frozen=True)
class RepeatsResult:
    """The K sample runs, the majority rater stored per condition, and each condition's self-agreement."""

    samples: list[RunSummary]
    majority: list[JuryResult]
    self_agreement: dict[str, SelfAgreement]

    def render(self) -> str:
        """Lines for the terminal."""
        lines = [s.render() for s in self.samples] + [m.render() for m in self.majority]
        for condition, sa in self.self_agreement.items():
            ci = sa.agreement.ci
            lines.append(f"self-agreement [{condition or 'standard'}]: {sa.agreement.value:.3f} "
                         f"[{ci[0]:.3f}, {ci[1]:.3f}; {sa.agreement.n_clusters} users] over {sa.items} items "
                         f"(Fleiss' kappa {sa.fleiss_kappa:.3f} on {sa.fleiss_items} items with all {sa.samples})")
        return "\n".join(lines)


def run_repeats(db: str | Path, judge: Judge, tasks: Sequence[JudgeTask], lm: LMConfig, *, repeats: int,
                **run: Any) -> RepeatsResult:
    """Judge ``tasks`` ``repeats`` times, store the majority rater and measure self-agreement.

    Args:
        db: The DuckDB file.
        judge: The judge.
        tasks: Its tasks.
        lm: Model settings (``temperature`` above 0, or the samples can only agree).
        repeats: Samples per item (at least 2).
        **run: Passed on to :func:`personagap.judges.runner.run_judge` (concurrency, limit, progress, ...).

    Raises:
        ValueError: ``repeats`` below 2.
    """
    if repeats < 2:
        raise ValueError(f"--repeats needs at least 2 samples per item, got {repeats}")
    summaries = [run_judge(db, judge, tasks, lm, sample=k, **run) for k in range(1, repeats + 1)]
    raters = [s.rater for s in summaries]
    conditions = sorted({t.condition for t in tasks})
    majority = [build_jury(db, [(r, c) for r in raters], "majority", rater=majority_rater(judge, lm.model, repeats),
                           condition=c) for c in conditions]
    return RepeatsResult(summaries, majority,
                         {c: self_agreement_of(db, raters, c) for c in conditions})


def self_agreement_of(db: str | Path, raters: Sequence[str], condition: str) -> SelfAgreement:
    """:func:`~personagap.analysis.self_agreement.self_agreement` of the stored samples (one rater per sample)."""
    with opened(db, read_only=True) as con:
        samples = con.execute("""
            SELECT l.item_id, i.user_id, l.rater AS sample, l.label
            FROM labels l JOIN items i USING (item_id)
            WHERE l.rater IN (SELECT unnest($raters)) AND l.condition = $condition AND l.label IS NOT NULL
        """, {"raters": list(raters), "condition": condition}).df()
    return self_agreement(samples, len(raters))
