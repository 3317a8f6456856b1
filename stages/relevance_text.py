"""Stage 2's text report: the judge table, the pilot's agreement among raters, the panel and the extras."""

from __future__ import annotations

import math
from collections import Counter

from personagap.analysis.agreement import (
    CI_METHOD,
    MIN_USERS_FOR_CI,
    ci_text,
)
from personagap.analysis.ci_rule import ci_note_lines
from personagap.analysis.origins import origin_lines, where
from personagap.analysis.panel import (
    extras_lines,
    panel_lines,
)
from personagap.analysis.weighting import gap_lines, weight_note
from personagap.stages.relevance_records import (
    JudgeAgreement,
    MultiRaterReport,
    RelevanceReport,
)
from personagap.vocabulary import JUDGE_KINDS


def _missing(v: float | None) -> bool:
    return v is None or math.isnan(v)


def _fmt(v: float | None, digits: int = 3) -> str:
    return "  n/a" if v is None or math.isnan(v) else f"{v:.{digits}f}"


def _fmt_ci(ci: list[float]) -> str:
    return f"[{_fmt(ci[0], 2)}, {_fmt(ci[1], 2)}]"


def _kinds_text(raters: dict[str, str]) -> str:
    counts = Counter(raters.values())
    names = {"human": "humans", "llm": "LLMs", "trained": "trained models", "baseline": "baselines"}
    order = ["human", *JUDGE_KINDS, *sorted(set(counts) - set(names))]
    return ", ".join(f"{counts[k]} {names.get(k, k)}" for k in order if counts.get(k))


def _multi_rater_lines(p: MultiRaterReport) -> list[str]:
    title = "blind labels only" if p.protocol == "blind" else p.protocol
    lines = [f"Pilot agreement ({where(p.dataset, p.origin)}; {title}; {_kinds_text(p.raters)}; "
             f"{p.n_users} users): "
             "mean pairwise Cohen's kappa", ""]
    lines.append(f"{'pairs':<18}{'mean kappa':>11}  {'95% CI':<30}{'rater pairs':>11}")
    for g in p.groups:
        ci = ci_text(ci=g.ci, n_users=g.n_users, undefined=g.undefined_resamples)
        lines.append(f"{g.pair_type:<18}{_fmt(g.mean_kappa):>11}  {ci:<30}{g.n_pairs:>11}")
    lines += ["", f"Humans, Krippendorff's alpha ({p.alpha_level}): {_fmt(p.human_alpha)} "
                  f"{ci_text(ci=p.human_alpha_ci, n_users=p.n_users)}",
              f"Humans, Fleiss' kappa on {p.fleiss_items} items rated by {p.fleiss_raters_per_item} humans: "
              f"{_fmt(p.human_fleiss)} {ci_text(ci=p.human_fleiss_ci, n_users=p.fleiss_users)}"]
    if p.judges:
        which = "blind" if p.protocol == "blind" else "anchored"
        lines += ["", f"Pilot judges vs the pilot {which} human majority:", ""]
        lines += _judge_table(p.judges)
    return lines


def render_relevance(report: RelevanceReport) -> str:
    """Render the report as plain-text tables for the terminal."""
    lines = [f"Stage 2 — relevance selection: judges vs the blind human majority "
             f"(95% CIs: {CI_METHOD}; "
             f"no CI below {report.min_users_for_ci} users)",
             weight_note(report.weight) + (" Agreement among raters and the corrected estimates pool items."
                                           if report.weight == "users" else ""),
             f"Majority rule: {report.majority_rule}.", ""]
    lines += _judge_table(report.judges)
    if report.pilot is not None:
        lines += [""] + _multi_rater_lines(report.pilot)
    if report.pilot_anchored is not None:
        lines += ["", "Not blind — not a ceiling:"] + _multi_rater_lines(report.pilot_anchored)
    rows = [*report.judges, *(report.pilot.judges if report.pilot else [])]
    if rows:
        lines += ["", "Prevalence-robust panel (same items and users as kappa):"]
        lines += panel_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in rows)
    lines += gap_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in rows)
    lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    for note in report.notes:
        lines += ["", f"Note: {note}"]
    return "\n".join(lines)


def _judge_table(judges: list[JudgeAgreement]) -> list[str]:
    if not judges:
        return ["(no judge shares items with a human majority; import a release or run `personagap judge`)"]
    head = (f"{'judge':<46}{'kind':<9}{'n':>6}{'users':>6}{'fail':>6}{'human yes':>10}{'judge yes':>10}"
            f"{'over-sel':>9}{'kappa':>7}  {'95% CI':<16}{'prec':>6}{'recall':>7}{'F1':>6}")
    rows = [head, "-" * len(head)]
    for j in judges:
        ci = ci_text(ci=j.kappa_ci, n_users=j.n_users) if j.n_users < MIN_USERS_FOR_CI else _fmt_ci(j.kappa_ci)
        name = j.judge if j.origin == "real" else f"{j.judge} ({j.origin})"
        rows.append(
            f"{name[:45]:<46}{j.rater_kind[:8]:<9}{j.n:>6}{j.n_users:>6}{j.failures:>6}"
            f"{_fmt(j.human_yes_rate):>10}{_fmt(j.judge_yes_rate):>10}"
            f"{_fmt(j.over_selection, 2) + ('' if _missing(j.over_selection) else 'x'):>9}"
            f"{_fmt(j.kappa):>7}  {ci:<16}"
            f"{_fmt(j.precision, 2):>6}{_fmt(j.recall, 2):>7}{_fmt(j.f1, 2):>6}"
        )
        if j.weighted_kappa is not None:
            rows.append(f"{'':<4}{j.scale} scale: quadratic-weighted kappa {_fmt(j.weighted_kappa)} "
                        f"{_fmt_ci(j.weighted_kappa_ci or [math.nan, math.nan])}, Spearman {_fmt(j.spearman)}, "
                        f"Krippendorff's alpha (ordinal) {_fmt(j.alpha)}, mean absolute difference "
                        f"{_fmt(j.mean_abs_diff, 2)}")
        if j.undefined_resamples:
            # Jackknife: the count is of users without whom kappa is undefined, and then there is no CI.
            rows.append(f"{'':<4}kappa undefined without {j.undefined_resamples} of the users (no CI)")
        rows.extend(ci_note_lines(j.ci_notes))
        if j.failure_reasons:
            rows.append(f"{'':<4}failures by reason: " + ", ".join(f"{k} {v}" for k, v in j.failure_reasons.items()))
    return rows
