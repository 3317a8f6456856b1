"""Repeated judging (``judge --repeats K --temperature T``): K samples per item, their majority, self-agreement.

Sample ``k`` is its own run and rater (``JUDGE+sample-k/vN/MODEL``, :func:`personagap.judges.base.rater_name`) with
its own cached answers, so a rerun resumes each sample. The majority of the K samples of each item is stored as a
judge of its own (``JUDGE+majority-of-K/vN/MODEL``, a :mod:`personagap.judges.jury` of the samples under each
condition), and :func:`self_agreement_of` reports how often the samples agree (a ceiling on agreeing with people).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personagap.analysis.agreement import ci_text
from personagap.analysis.self_agreement import SelfAgreement, self_agreement
from personagap.judges.base import VERBAL_CONFIDENCE, Judge, JudgeTask
from personagap.judges.jury import JuryResult, build_jury
from personagap.judges.lm import LMConfig
from personagap.judges.runner import run_judge
from personagap.judges.sampling import as_sample
from personagap.judges.summary import RunSummary
from personagap.store import opened
from personagap.store.judge_answers import parsed_conditions, sample_labels


def majority_rater(judge: Judge, model: str, repeats: int, confidence: str = "none") -> str:
    """The rater key of the majority of ``repeats`` samples (of the verbal-confidence prompt when it asked for one)."""
    name = f"{judge.name}+{VERBAL_CONFIDENCE}" if confidence == "verbal" else judge.name
    return f"{name}+majority-of-{repeats}/v{judge.version}/{model}"


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
            lines.append(f"self-agreement [{condition or 'standard'}]: {sa.agreement.value:.3f} "
                         f"{ci_text(sa.agreement, digits=3)} over {sa.items} items "
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
    return repeat_runs(db, judge, lm, repeats, lambda: run_judge(db, judge, tasks, lm, **run))


def repeat_runs(db: str | Path, judge: Judge, lm: LMConfig, repeats: int,
                run_once: Callable[[], RunSummary]) -> RepeatsResult:
    """Run ``run_once`` as samples 1..``repeats``, then store the majority rater and measure self-agreement.

    ``run_once`` is one ordinary judge run (a stage's own judge function, say): inside
    :func:`~personagap.judges.sampling.as_sample` its ``run_judge`` call becomes sample ``k``, so every sample
    judges exactly the tasks a single run would.

    Args:
        db: The DuckDB file.
        judge: The judge ``run_once`` runs (names the majority rater).
        lm: Its model settings.
        repeats: Samples per item (at least 2).
        run_once: Starts one run of ``judge`` with ``lm`` and returns its summary.

    Raises:
        ValueError: ``repeats`` below 2.
    """
    if repeats < 2:
        raise ValueError(f"--repeats needs at least 2 samples per item, got {repeats}")
    summaries = []
    for k in range(1, repeats + 1):
        with as_sample(k):
            summaries.append(run_once())
    raters = [s.rater for s in summaries]
    conditions = _conditions(db, [s.run_id for s in summaries])
    majority = [build_jury(db, [(r, c) for r in raters], "majority",
                           rater=majority_rater(judge, lm.model, repeats, lm.confidence), condition=c)
                for c in conditions]
    return RepeatsResult(summaries, majority, {c: self_agreement_of(db, raters, c) for c in conditions})


def _conditions(db: str | Path, run_ids: list[str]) -> list[str]:
    # The conditions the samples' runs stored parsed labels under (cached answers are stored under the new run).
    with opened(db, read_only=True) as con:
        return parsed_conditions(con, run_ids)


def self_agreement_of(db: str | Path, raters: Sequence[str], condition: str) -> SelfAgreement:
    """:func:`~personagap.analysis.self_agreement.self_agreement` of the stored samples (one rater per sample)."""
    with opened(db, read_only=True) as con:
        samples = sample_labels(con, raters, condition)
    return self_agreement(samples, len(raters))
