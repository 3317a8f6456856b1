"""The diagnosis in words: per-stage messages and notes, the verdict's sentences, and the terminal text.

Pure text over :mod:`personagap.analysis.diagnosis_records`; which stage the verdict names is decided in
:func:`personagap.analysis.diagnosis.diagnose` (the CI of the difference of two stages' gaps), and said here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from personagap.analysis.agreement import ci_text
from personagap.analysis.diagnosis_records import (
    MIN_ITEMS_FOR_RANKING,
    MIN_PAIR_OVERLAP,
    MIN_PAIR_USERS,
    STAGES,
    CeilingGap,
    DatasetBest,
    Diagnosis,
    HumanCeiling,
    JudgeScore,
    SelectedGap,
    StageComparison,
    StageDiagnosis,
    finite,
)
from personagap.analysis.headline import NAMES, headline_name
from personagap.analysis.origins import REAL, where
from personagap.analysis.panel import panel_lines
from personagap.analysis.weighting import weight_note


def fmt(v: float | None, digits: int = 2) -> str:
    """A figure to two decimals, or 'n/a'."""
    return "n/a" if not finite(v) else f"{v:.{digits}f}"


def kappa_text(j: JudgeScore) -> str:
    """A judge's headline agreement with its CI (weighted kappa first on ordinal scales)."""
    kappa = f"kappa {fmt(j.kappa)} {ci_text(ci=j.kappa_ci, n_users=j.n_users, undefined=j.undefined_resamples)}"
    if j.metric == "weighted_kappa":
        return (f"{headline_name(j.metric)} {fmt(j.weighted_kappa)} "
                f"{ci_text(ci=j.weighted_kappa_ci, n_users=j.n_users)} (ordinal scale; unweighted {kappa})")
    return kappa


_METRIC_NAMES = NAMES


def ceiling_text(c: HumanCeiling) -> str:
    """A ceiling with its CI, dataset and pairs."""
    pooled = " pooling items" if "alpha" in c.item_weighted else ""
    alpha = ("" if c.alpha is None else
             f", Krippendorff's alpha (ordinal{pooled}) {fmt(c.alpha)} {ci_text(ci=c.alpha_ci, n_users=c.n_users)}")
    return (f"mean pairwise {_METRIC_NAMES[c.metric]} {fmt(c.mean_kappa)} {ci_text(ci=c.ci, n_users=c.n_users)} "
            f"({where(c.dataset, c.origin)}, {c.n_raters} blind humans, {c.n_pairs} pairs{alpha})")


def gap_text(g: CeilingGap) -> str:
    """One judge's own gap to its dataset's ceiling."""
    return (f"{g.judge} on {where(g.dataset, g.origin)}: mean {_METRIC_NAMES[g.metric]} with each blind human "
            f"{fmt(g.judge_kappa)} "
            f"vs their own {fmt(g.ceiling)}, gap {fmt(g.gap)} "
            f"{ci_text(ci=g.gap_ci, n_users=g.n_users, undefined=g.undefined_resamples)}")


def stage_message(status: str, stage: str, best: JudgeScore | None, ceiling: HumanCeiling | None) -> str:
    """One stage's summary line: its best judge, or what it lacks."""
    number = STAGES.index(stage) + 1
    humans = f" Blind humans among themselves: {ceiling_text(ceiling)}." if ceiling else ""
    if status == "no_data":
        return f"No stage-{number} data yet: import a human-label release or run a {stage} judge."
    if status == "no_reference":
        return f"Stage {number} has items but no blind human labels to compare judges with." + humans
    if status == "no_judges":
        return f"Stage {number} has human labels but no judge labels yet." + humans
    assert best is not None
    return (f"Best judge {best.judge} ({where(best.dataset, best.origin)}): {kappa_text(best)} against humans."
            + humans)


def ceiling_reason(ds: str, row: Any, others: list[str]) -> str:
    """Why dataset ``ds`` has no blind human ceiling, in one line (``row``: its human counts, or None)."""
    blind = int(row.blind_raters) if row is not None else 0
    anchored = int(row.anchored_raters) if row is not None else 0
    n_labels = int(row.blind_labels) if row is not None else 0
    text = (f"{ds}: no human ceiling: that needs two blind humans who labelled at least {MIN_PAIR_OVERLAP} of "
            f"the same items, and {ds} has too few blind labels ({blind} individual blind annotator"
            f"{'s' if blind != 1 else ''}, {n_labels} labels)")
    if anchored and row is not None:
        text += (f"; the {int(row.anchored_labels)} labels of {anchored} anchored annotators (they saw an LLM "
                 "label first) are reported apart and are not a ceiling")
    if others:
        text += f"; the ceiling of {', '.join(others)} belongs to another dataset and is not used for it"
    return text + "."


def human_counts_by_dataset(stage: str, counts: pd.DataFrame) -> dict[str, Any]:
    """Dataset -> its row of human counts (``blind_raters``, ``blind_labels``, ...) for one stage."""
    stage_counts = counts[counts["stage"] == stage] if not counts.empty else counts
    return {str(r.dataset): r for r in stage_counts.itertuples()} if not stage_counts.empty else {}


def stage_notes(stage: str, judges: list[JudgeScore], ceilings: list[HumanCeiling], counts: pd.DataFrame) -> list[str]:
    """Say plainly why a judged dataset has no ceiling, and that another dataset's ceiling is not used."""
    have = {c.dataset for c in ceilings}
    by_ds = human_counts_by_dataset(stage, counts)
    notes = []
    for ds in sorted({j.dataset for j in judges} | set(by_ds)):
        if ds in have:
            continue
        row = by_ds.get(ds)
        blind = int(row.blind_raters) if row is not None else 0
        anchored = int(row.anchored_raters) if row is not None else 0
        if blind == 0 and anchored == 0 and ds not in {j.dataset for j in judges}:
            continue
        notes.append(ceiling_reason(ds, row, sorted(have)))
    return notes


def no_gap_reason(ds: str, best: JudgeScore) -> str:
    """Why a dataset with a ceiling has no gap for its best judge, in one line."""
    return (f"{ds}: no gap to the ceiling for {best.judge}: it shares fewer than {MIN_PAIR_OVERLAP} items over "
            f"{MIN_PAIR_USERS} users with any of the blind humans who set the ceiling.")


def dataset_lines(b: DatasetBest) -> list[str]:
    """One dataset's block: its best (and worst) judge, its own ceiling and that judge's gap, or why not."""
    judges = f"{b.n_judges} judge{'s' if b.n_judges != 1 else ''}" if b.n_judges else "no judges"
    lines = [f"  {where(b.dataset, b.origin)} ({b.scale} scale, headline {headline_name(b.metric)}; {judges}):"]
    if b.best is not None:
        lines.append(f"    best judge:  {b.best.judge} ({where(b.dataset, b.origin)}, n={b.best.n}): "
                     f"{kappa_text(b.best)}")
        if b.worst is not None:
            lines.append(f"    worst judge: {b.worst.judge} ({where(b.dataset, b.origin)}, n={b.worst.n}): "
                         f"{kappa_text(b.worst)}")
        lines += [f"    robust panel, {line.strip()}" for line in panel_lines([(f"best {b.best.judge}", b.best)])]
    if b.ceiling is not None:
        lines.append(f"    human ceiling: {ceiling_text(b.ceiling)}")
    if b.gap is not None:
        lines.append(f"    best judge's gap to it: {gap_text(b.gap)}")
    if b.note:
        lines.append(f"    note: {b.note}")
    return lines


def stage_name(s: StageDiagnosis) -> str:
    """'stage N (name)'."""
    return f"stage {STAGES.index(s.stage) + 1} ({s.stage})"


_JUDGE_COMMANDS = {"extraction": "personagap judge extraction --judge verify --model M",
                   "relevance": "personagap judge relevance --model M",
                   "response": "personagap judge response --judge pairwise --model M"}


def next_steps(stages: list[StageDiagnosis], *, overlap: bool) -> list[str]:
    """Per stage, the data that would let the verdict tell (a ceiling, a judge, labels, or narrower CIs)."""
    steps = []
    for s in stages:
        if s.selected_gap is not None:
            if overlap:
                ds = s.selected_gap.dataset
                steps.append(f"{stage_name(s)}: a narrower gap CI from more blind-labelled users on {ds} "
                             f"(`personagap plan --stage {s.stage} --dataset {ds}` says how many)")
        elif s.best is not None:
            ds = s.best.dataset
            steps.append(f"{stage_name(s)}: label at least two blind humans per item on {ds}, at least "
                         f"{MIN_ITEMS_FOR_RANKING} items the judge labelled (the dashboard's Annotate page; "
                         f"`personagap plan --stage {s.stage} --dataset {ds}` says how many)")
        elif s.status == "no_judges":
            steps.append(f"{stage_name(s)}: a judge on its human-labelled items (`{_JUDGE_COMMANDS[s.stage]}`)")
        elif s.status == "no_reference":
            steps.append(f"{stage_name(s)}: at least two blind humans per item on its items (the dashboard's Annotate "
                         "page)")
        else:
            steps.append(f"{stage_name(s)}: human and judge labels (`personagap import labels FILE --stage {s.stage} "
                         "--dataset NAME`, docs/formats.md)")
    return steps


def synthetic_note(stages: list[StageDiagnosis]) -> str:
    """Say which stages' best judges are scored on synthetic personas, not real users."""
    flagged = []
    for s in stages:
        best = s.gap if s.gap is not None else s.best
        if best is not None and best.origin != REAL:
            flagged.append(f"{stage_name(s)}'s best judge {best.judge} is scored on {best.origin} personas "
                           f"({best.dataset})")
    if not flagged:
        return ""
    return (" On synthetic data: " + "; ".join(flagged) + ". Those figures are on synthetic personas, not real "
            "users: compare them with the same judges on real users' data before trusting them.")


def ranked_on(s: StageDiagnosis) -> str:
    """Say that a stage's best judge is the best of one dataset only, when the stage has judges on several."""
    judged = [b for b in s.datasets if b.best is not None]
    if len(judged) < 2:
        return ""
    return (f" (the dataset the stage is ranked on, of its {len(judged)} judged ones, chosen by design, not by "
            "figures; each dataset's own best judge is listed apart)")


def selected_gap_text(g: SelectedGap) -> str:
    """The selection-aware gap with what it rests on."""
    how = (f"the judge with the smallest gap on one half of the users ({g.chosen[0]}, {g.chosen[1]}), measured on "
           f"the other half, both ways, among {g.n_judges} judges" if g.method == "cross-fit" else
           f"{g.chosen[0]}, the only judge with {MIN_ITEMS_FOR_RANKING}+ items")
    return (f"{fmt(g.gap)} {ci_text(ci=g.gap_ci, n_users=g.n_users, undefined=g.undefined_resamples)} on "
            f"{where(g.dataset, g.origin)} ({how})")


def comparison_text(c: StageComparison, level: float) -> str:
    """One stage-difference line: the difference of the two gaps and its CI."""
    shared = f", {c.n_shared_users} shared" if c.n_shared_users else ""
    return (f"{c.stage} minus {c.other}: {fmt(c.difference)} "
            f"{ci_text(ci=c.ci, n_users=c.n_users, undefined=c.undefined_resamples)}{shared}")


def verdict_text(stages: list[StageDiagnosis], ranking: list[str], comparisons: list[StageComparison],
                 worst_stage: str | None, level: float) -> str:
    """The verdict's sentences: the stage named (when every difference CI with it excludes 0), or why not."""
    pct = f"{level:.0%}"
    by_name = {s.stage: s for s in stages}
    ranked = [by_name[name] for name in ranking]
    without = [s for s in stages if s.selected_gap is None and s.best is not None]
    unranked = ""
    if without:
        unranked = (" Not ranked, for want of a selection-aware gap to a blind human ceiling on the dataset their "
                    "judges were scored on (a ceiling is never borrowed from another dataset): "
                    + "; ".join(f"{stage_name(s)}, best judge {s.best.judge} on "
                                f"{where(s.best.dataset, s.best.origin)}{ranked_on(s)}, {kappa_text(s.best)}"
                                for s in without if s.best is not None) + ".")
    unranked += synthetic_note(stages)
    if not ranked:
        if not any(s.best is not None for s in stages):
            return "No stage has both judge and human labels yet, so no stage can be diagnosed."
        return ("Cannot tell which stage fails most: no stage has a judge scored on a dataset with its own "
                "human ceiling." + unranked)
    gap_lines = "; ".join(f"{stage_name(s)}: {selected_gap_text(s.selected_gap)}" for s in ranked
                          if s.selected_gap is not None)
    top = ranked[0]
    if len(ranked) == 1:
        return (f"Cannot tell which stage fails most: only {stage_name(top)} can be compared with a human ceiling "
                f"of its own dataset (gap {gap_lines})." + unranked)
    differences = "; ".join(comparison_text(c, level) for c in comparisons)
    if worst_stage is not None:
        return (f"Automated evaluation is furthest below humans at {stage_name(top)}: the {pct} CI of the difference "
                f"between its best judge's gap to the human ceiling of the same dataset and every other stage's "
                f"excludes 0 ({differences}). Gaps: {gap_lines}." + unranked)
    return (f"Cannot tell which stage fails most: the {pct} CI of the difference between the largest gap and "
            f"another stage's includes 0 (or is missing) ({differences}). Gaps: {gap_lines}." + unranked)


def render_diagnosis(d: Diagnosis) -> str:
    """Render the diagnosis as plain text for the terminal."""
    # The one header sentence every report prints about what its figures weigh (weighting.weight_note).
    lines = [f"Diagnosis ({d.ci_level:.0%} CIs: user-clustered, one user left out at a time; no CI below "
             f"{d.min_users_for_ci} users; halves of users for the best-judge gap seeded {d.seed})",
             weight_note(d.estimand) + (" Each user counts once in every rater pair of a ceiling or gap; the "
                                        "pipeline view's failure shares, the ordinal ceilings' Krippendorff's alpha, "
                                        "the alternative-annotator test and the corrected estimates pool items."
                                        if d.estimand == "users" else ""), ""]
    for s in d.stages:
        lines.append(f"{s.title}: {s.n_items} items, {s.n_human_labels} human labels, {s.n_judge_labels} judge labels")
        if len(s.datasets) > 1:
            lines.append("  Per dataset, each with its own best judge and its own human ceiling (datasets are not "
                         "ranked against each other):")
        for b in s.datasets:
            lines += dataset_lines(b)
        shown = {b.note for b in s.datasets}
        if s.selected_gap is not None:
            lines.append(f"  best-judge gap, judge chosen on other users: {selected_gap_text(s.selected_gap)}")
        for note in s.notes:
            if note not in shown:
                lines.append(f"  note: {note}")
        if s.best is None:  # the status alone: each dataset's ceiling is in its block above
            lines.append(f"  {stage_message(s.status, s.stage, None, None) if s.datasets else s.message}")
        lines.append("")
    lines.append(d.verdict)
    return "\n".join(lines)
