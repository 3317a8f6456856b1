"""Stage 3's report as plain-text tables for the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from personagap.analysis.agreement import ci_text
from personagap.analysis.ci_rule import CI_METHOD, ci_cell, ci_note_lines
from personagap.analysis.comparable import judge_display
from personagap.analysis.headline import headline_metric, headline_name
from personagap.analysis.origins import origin_lines, where
from personagap.analysis.panel import extras_lines, panel_lines
from personagap.analysis.weighting import gap_lines, weight_note
from personagap.scales import alpha_level
from personagap.stages.response_records import JudgeResult, ResponseReport, SingleResponseReport, condition_name
from personagap.text import number

if TYPE_CHECKING:
    pass


def render_response(report: ResponseReport) -> str:
    """Render the report as plain-text tables for the terminal."""
    lines = [f"Stage 3 — response judgment: judges vs humans (95% CIs: {CI_METHOD}; no CI below "
             f"{report.min_users_for_ci} users)", weight_note(report.weight),
             f"Human reference where several humans label an item: {report.majority_rule}.", ""]
    pairwise = [j for j in report.judges if j.first_position_rate is not None]
    if pairwise:
        head = (f"{'judge':<44}{'dataset':<16}{'n':>5}{'users':>6}{'fail':>5}{'acc':>7}  {'95% CI':<16}{'kappa':>6}"
                f"{'1st pos':>8}{'longer':>7}{'ties':>6}")
        lines += [head, "-" * len(head)]
        for j in pairwise:
            lines.append(f"{j.judge[:43]:<44}{j.dataset[:15]:<16}{j.n:>5}{j.n_users:>6}{j.failures:>5}"
                         f"{number(j.accuracy):>7}  {ci_cell(j.accuracy_ci, j.n_users):<16}{number(j.kappa, 2):>6}"
                         f"{number(j.first_position_rate, 2):>8}"
                         f"{number(j.longer_rate, 2):>7}{number(j.tie_rate, 2):>6}")
            if j.baselines:
                lines.append(f"{'':<4}baselines on the same items: {_baselines(j.baselines)}")
            # A judge a trivial rule matches (within the judge's CI) is not shown to do more than the rule.
            lines.extend(f"{'':<4}{flag.note}" for flag in j.baseline_flags)
            if j.failure_reasons:
                lines.append(f"{'':<4}failures: " + ", ".join(f"{k} {v}" for k, v in j.failure_reasons.items()))
            if j.undefined_resamples:
                # The jackknife counts users without whom kappa is undefined, and then gives no CI.
                lines.append(f"{'':<4}kappa undefined without {j.undefined_resamples} of the users (no CI)")
            lines.extend(ci_note_lines(j.ci_notes))
            if j.swap_pairs:
                lines.append(f"{'':<4}swap consistency {number(j.swap_consistency, 2)} on {j.swap_pairs} pairs")
        lines += ["", "1st pos = share of A/B verdicts naming the answer shown first; longer = share naming the "
                      "longer answer;", "baselines = accuracy of the trivial judges on the same items (the length "
                      "judges say A on equal lengths)."]
    elif not report.single_responses:
        lines.append("(no pairwise judge shares items with a human label; import prism-judge or personafeedback)")
    if report.humans:
        lines += ["", "Humans (the same biases, measured on the human labels):", ""]
        for h in report.humans:
            pos = (f"1st pos {number(h.first_position_rate, 2)} {ci_cell(h.first_position_ci)}"
                   if h.first_position_rate is not None else "1st pos n/a (order not shown to humans)")
            lines.append(f"  {h.dataset}: n {h.n} ({h.n_users} users), {pos}, longer {number(h.longer_rate, 2)} "
                         f"{ci_cell(h.longer_ci, h.n_users)}, "
                         f"ties {number(h.tie_rate, 2)}; baselines {_baselines(h.baselines)}")
    if report.profile_gaps:
        lines += ["", "With vs without the profile (same judge; a paired gap uses only the items judged both ways):",
                  ""]
        for g in report.profile_gaps:
            lines.append(f"  {g.rater} on {g.dataset}: {condition_name(g.with_condition)} {number(g.accuracy_with)} "
                         f"vs {condition_name(g.without_condition)} {number(g.accuracy_without)} on the {g.n} items "
                         f"both conditions "
                         f"judged (of {g.n_with} judged with the profile, {g.n_without} without): gap "
                         f"{g.gap:+.3f} {ci_text(ci=g.gap_ci, n_users=g.n_users)}")
    elif report.profile_gap_note:
        lines += ["", report.profile_gap_note]
    groups = [j for j in pairwise if j.by_group]
    if groups:
        lines += ["", "Accuracy by split / tier:", ""]
        for j in groups:
            lines.append(f"  {j.judge} ({j.dataset}): " + ", ".join(
                f"{k} {number(v.accuracy)} (n {v.n})" for k, v in j.by_group.items()))
    if report.generic_vs_personalized:
        lines += ["", "Generic vs personalised answers: share where the personalised one is judged no better:", ""]
        for gp in report.generic_vs_personalized:
            lines.append(f"  {judge_display(gp.rater, gp.condition)} ({gp.dataset}): {number(gp.no_better_rate)} "
                         f"{ci_text(ci=gp.no_better_ci, n_users=gp.n_users)} on {gp.n} pairs, "
                         f"{gp.failures} failures")
    for section in report.single_responses:
        lines += _single_lines(section, [j for j in report.judges if j.dataset == section.dataset
                                         and j.first_position_rate is None])
    if report.judges:
        lines += ["", "Prevalence-robust panel (same items and users as kappa):"]
        lines += panel_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in report.judges)
    lines += gap_lines((f"{j.judge} ({where(j.dataset, j.origin)})", j) for j in report.judges)
    if report.weight == "users" and any(j.item_weighted for j in report.judges):
        lines += ["", "Weighting users: kappa, accuracy and the panel weigh each user once; position, length and tie "
                      "rates, the baselines, swap consistency and the split/tier accuracies weigh items, as do the "
                      "humans' biases, profile gaps, agreement among raters and the corrected estimates."]
    lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    return "\n".join(lines)


def _baselines(baselines: dict[str, float]) -> str:
    """``always A 0.500, always B 0.400, ...``: each baseline's accuracy, named as the flag lines name it."""
    return ", ".join(f"{k.replace('-', ' ')} {number(v, 3)}" for k, v in baselines.items())


def _single_lines(s: SingleResponseReport, judges: list[JudgeResult]) -> list[str]:
    """One single-response dataset's section, titled with its question."""
    level = alpha_level(s.scale)
    lines = ["", s.question,
             f"  {where(s.dataset, s.origin)}: {s.n_items} responses from {s.n_users} users, {s.scale} scale "
             f"{'/'.join(s.categories)}; raters " + ", ".join(f"{r} ({n})" for r, n in s.raters.items()),
             f"  Among raters: Krippendorff's alpha ({level}) {number(s.alpha)} {ci_cell(s.alpha_ci, s.n_users)}, "
             f"Fleiss' kappa {number(s.fleiss)} {ci_cell(s.fleiss_ci, s.n_users)}; human reference: "
             + ", ".join(f"{c} {number(v, 2)}" for c, v in s.reference_rates.items()),
             "  per rater: " + ", ".join(f"{r} mean kappa with others {number(k, 2)}"
                                         for r, k in s.rater_mean_kappa.items())]
    for a in s.aspects:
        lines.append(f"  Also rated: {a.question} ({a.scale} {'/'.join(a.categories)}): Krippendorff's alpha "
                     f"{number(a.alpha)} {ci_cell(a.alpha_ci, s.n_users)} on {a.n_items} responses")
    if not judges:
        lines.append("  (no judge has labelled these responses yet)")
        return lines
    lines.append("  judges vs the human majority (n items, users, kappa with 95% CI"
                 + (f", {headline_name(head)}" if (head := headline_metric(s.scale)) != "kappa" else "") + "):")
    for j in judges:
        weighted = (f", weighted kappa {number(j.weighted_kappa)} {ci_cell(j.weighted_kappa_ci, j.n_users)}"
                    if j.weighted_kappa is not None else "")
        lines.append(f"    {j.judge}: n {j.n}, {j.n_users} users, accuracy {number(j.accuracy)}, "
                     f"kappa {number(j.kappa)} {ci_cell(j.kappa_ci, j.n_users)}{weighted}, {j.failures} failures")
        if j.undefined_resamples:
            lines.append(f"      kappa undefined without {j.undefined_resamples} of the users (no CI)")
        lines.extend(ci_note_lines(j.ci_notes, " " * 6))
    others = [v for v in s.judges if v.rater != "majority"]
    if others:
        lines.append("  judges vs each rater (Cohen's kappa): " + "; ".join(
            f"{v.judge} vs {v.rater} {number(v.kappa, 2)} (n {v.n})" for v in others))
    return lines
