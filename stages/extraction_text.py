"""Stage 1's report as plain-text tables for the terminal."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from personagap.analysis.agreement import ci_text
from personagap.analysis.ci_rule import CI_METHOD, ci_cell, ci_note_lines
from personagap.analysis.origins import origin_lines, where
from personagap.analysis.panel import extras_lines, panel_lines
from personagap.analysis.weighting import gap_lines, weight_note
from personagap.stages.extraction_records import ExtractionReport
from personagap.text import NOT_AVAILABLE_PADDED, number

if TYPE_CHECKING:
    pass

# Right-aligned table columns: an absent figure keeps the column's width.
_num = functools.partial(number, missing=NOT_AVAILABLE_PADDED)
_ci = functools.partial(ci_cell, missing=NOT_AVAILABLE_PADDED)


def render_extraction(report: ExtractionReport, *, categories: bool = True) -> str:
    """Render the report as plain-text tables for the terminal.

    Args:
        report: The report.
        categories: Include per-category precision/recall rows.
    """
    lines = [f"Stage 1 — attribute extraction (95% CIs: {CI_METHOD}; no CI below {report.min_users_for_ci} users)",
             weight_note(report.weight) + (" Agreement among humans, acceptance rates and matching pool items."
                                           if report.weight == "users" else ""),
             f"Majority rule (verifiers vs humans): {report.majority_rule}."]
    lines += ["", "Human–human agreement on verdicts (ok / bad / unsure, nominal):"]
    if not report.human_agreement:
        lines.append("  (no dataset with two or more human raters on the same attributes)")
    for h in report.human_agreement:
        lines += [f"  {where(h.dataset, h.origin)}: {h.annotators} annotators, {h.items} attributes rated by >= 2, "
                  f"{h.users} users",
                  f"    Krippendorff's alpha (nominal): {_num(h.alpha)} {ci_text(ci=h.alpha_ci, n_users=h.users)}",
                  f"    Fleiss' kappa on {h.fleiss_items} attributes rated by {h.fleiss_raters_per_item}: "
                  f"{_num(h.fleiss)} {ci_text(ci=h.fleiss_ci, n_users=h.fleiss_users)}",
                  f"    mean pairwise Cohen's kappa over {h.rater_pairs} pairs: {_num(h.mean_pairwise_kappa)} "
                  f"{ci_text(ci=h.mean_pairwise_kappa_ci, n_users=h.users)}",
                  f"    {'annotator':<22}{'n':>5}{'ok':>7}{'bad':>7}{'unsure':>8}"]
        for r in h.per_annotator:
            lines.append(f"    {r.rater[:21]:<22}{r.n:>5}{_num(r.ok, 2):>7}{_num(r.bad, 2):>7}{_num(r.unsure, 2):>8}")
    lines += ["", "Acceptance of extracted attributes (ok = accepted precision; bad = over-generalised/unsupported):"]
    if not report.acceptance:
        lines.append("  (no verdicts on extracted attributes)")
    else:
        head = (f"  {'dataset':<18}{'extractor':<30}{'rater':<34}{'n':>5}{'users':>6}{'fail':>5}  {'ok':<20}"
                f"{'bad':<20}{'unsure':<6}")
        lines += [head, "  " + "-" * (len(head) - 2)]
        for r in report.acceptance:
            lines.append(f"  {r.dataset[:17]:<18}{r.extractor[:29]:<30}{r.rater[:33]:<34}{r.n:>5}{r.n_users:>6}"
                         f"{r.failures:>5}  {_num(r.ok, 2)} {_ci(r.ok_ci, r.n_users):<15}{_num(r.bad, 2)} "
                         f"{_ci(r.bad_ci, r.n_users):<15}"
                         f"{_num(r.unsure, 2)}")
    if report.verifiers:
        lines += ["", "Verifiers vs the human majority (3-class Cohen's kappa; ties dropped):"]
        for v in report.verifiers:
            kappa_ci = ci_text(ci=v.kappa_ci, n_users=v.n_users, undefined=v.undefined_resamples)
            lines.append(f"  {where(v.dataset, v.origin)}: {v.verifier}: n {v.n}, kappa {_num(v.kappa)} "
                         f"{kappa_ci}, accuracy {_num(v.accuracy)} "
                         f"{ci_text(ci=v.accuracy_ci, n_users=v.n_users)}")
            lines.extend(ci_note_lines(v.ci_notes))
        lines += ["", "Prevalence-robust panel (same items and users as kappa):"]
        lines += panel_lines((f"{v.verifier} ({where(v.dataset, v.origin)})", v) for v in report.verifiers)
        lines += gap_lines((f"{v.verifier} ({where(v.dataset, v.origin)})", v) for v in report.verifiers)
        lines += origin_lines(report.origin_comparison)
    lines += extras_lines(report.alt_test, report.estimates)
    lines += ["", "Gold preferences:"]
    if not report.gold:
        lines.append("  (none imported: personagap import laps PATH, or gold in an extraction JSONL)")
    for g in report.gold:
        lines.append(f"  {g.dataset} [{g.split}]: {g.users} users, {g.units} histories, {g.sessions} sessions "
                     f"({g.sessions_without_gold} with no stated preference), {g.gold} preferences in "
                     f"{g.categories} categories")
    if report.extractors:
        lines += ["", "Extractor runs (only histories whose every chunk parsed are scored):"]
        for e in report.extractors:
            reasons = ", ".join(f"{k} {v}" for k, v in e.failure_reasons.items())
            lines.append(f"  {e.dataset}: {e.extractor}: {e.units_complete}/{e.units_attempted} histories complete, "
                         f"{e.attributes} attributes, {e.chunk_failures} failed chunks" + (f" ({reasons})" if reasons
                                                                                          else ""))
    lines += ["", f"Extraction vs gold ({report.matcher_note}):"]
    if not report.matching:
        lines.append("  (no extractor output on users with gold; run `personagap judge extraction --judge extract` "
                     "or import an extraction JSONL)")
    else:
        head = (f"  {'dataset':<14}{'extractor':<30}{'matcher':<22}{'split':<7}{'category':<26}{'users':>6}"
                f"{'attrs':>6}{'gold':>6}  {'precision':<20}{'recall':<20}{'F1':<20}")
        lines += [head, "  " + "-" * (len(head) - 2)]
        for m in report.matching:
            if m.category != "all" and not categories:
                continue
            cat = m.category if m.category == "all" else "  " + m.category
            lines.append(f"  {m.dataset[:13]:<14}{m.extractor[:29]:<30}{m.matcher[:21]:<22}{m.split[:6]:<7}"
                         f"{cat[:25]:<26}{m.users:>6}{m.attributes:>6}{m.gold:>6}  "
                         f"{_num(m.precision, 2)} {_ci(m.precision_ci, m.users):<15}{_num(m.recall, 2)} "
                         f"{_ci(m.recall_ci, m.users):<15}{_num(m.f1, 2)} {_ci(m.f1_ci, m.users):<15}")
    return "\n".join(lines)
