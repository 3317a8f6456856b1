"""A stage's page: judges vs humans, robust panel, replace-the-humans tests, calibration, yes-rates, biases."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from personagap.analysis.ci_rule import CI_METHOD
from personagap.analysis.comparable import judge_display
from personagap.analysis.diagnosis import STAGE_TITLES, JudgeScore
from personagap.dashboard import charts, confidence, data
from personagap.dashboard.data import db_path
from personagap.dashboard.display import MISSING, ci, md, missing, num, text
from personagap.dashboard.shell import require_data
from personagap.dashboard.tables import (
    alt_test_table,
    estimates_table,
    forest_frames,
    forest_title,
    judges_table,
    origin_table,
)
from personagap.store import StoreError


def _replace_humans_section(db: str, stage: str) -> None:
    report = data.stage_report(db, stage)
    tests, estimates = report.get("alt_test") or [], report.get("estimates") or []
    if tests:
        st.subheader("Can the judge replace a human annotator? (alternative-annotator test)")
        table, notes = alt_test_table(tests)
        st.dataframe(table, hide_index=True, width="stretch")
        if notes:
            # Numbered like the verdict column's "(note N)"; whole sentences, wrapped to the page's width.
            st.markdown("**Why a test is not applicable**\n\n" + "\n".join(f"{i}. {note}" for i, note in
                                                                         enumerate(notes, 1)))
        st.caption("Calderon, Reichart & Dror (ACL 2025): leave one annotator out, score the judge and that "
                   "annotator against the remaining humans, one-sided t-test against epsilon, Benjamini–Yekutieli "
                   "over annotators. Passes when it beats at least half the annotators. Anchored humans saw an LLM "
                   "label first: their row is not a blind verdict.")
    if estimates:
        st.subheader("Corrected estimates of the human rate")
        st.dataframe(estimates_table(estimates), hide_index=True, width="stretch")
        st.caption("A judge's naive rate is biased by its errors; Rogan–Gladen corrects it with the judge's "
                   "sensitivity and specificity on human-labelled items, PPI++ combines both, 'humans only' uses the "
                   "human labels alone (95% CIs).")


def stage_page(stage: str) -> None:
    """A stage's page: judges vs humans, robust panel, yes-rates, confusion heatmaps and biases."""
    st.title(STAGE_TITLES[stage])
    if require_data() is None:
        return
    db = db_path()
    s = data.diag().stage(stage)
    if s.status == "no_data":
        st.info(f"No data yet for {STAGE_TITLES[stage].lower()}: nothing in the store has stage '{stage}'. "
                "Import a release or run a judge for this stage, then press Refresh.")
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("Items", f"{s.n_items:,}")
    c2.metric("Human labels", f"{s.n_human_labels:,}")
    c3.metric("Judge labels", f"{s.n_judge_labels:,}")
    (st.warning if s.best is None else st.success)(md(s.message))
    if s.judges:
        judges, ceilings = forest_frames([s])
        st.subheader(f"{forest_title(judges).replace(' vs humans', ' per judge')}")
        if not judges.empty:
            st.altair_chart(charts.forest_chart(judges, ceilings, title=forest_title(judges)), width="stretch")
            st.caption("Red tick and band: the human ceiling of the judge's own dataset (mean pairwise kappa "
                       "among humans, 95% CI).")
        st.dataframe(judges_table(s.judges), hide_index=True, width="stretch")
        _origin_section(s.judges)
        _robust_section(db, stage, tuple(sorted({j.dataset for j in s.judges})))
        _replace_humans_section(db, stage)
        # Only a Cohen's-kappa ceiling is a kappa target (an ordinal dataset's ceiling is a weighted kappa).
        _calibration_section(db, stage, {c.dataset: c.mean_kappa for c in s.ceilings if c.metric == "kappa"})
        binary = [j for j in s.judges if j.binary]
        if binary:
            st.subheader("Human vs judge yes-rates (same items)")
            rows = pd.DataFrame([{"judge": f"{j.judge} · {j.dataset}", "who": who, "rate": rate}
                                 for j in binary for who, rate in (("humans", j.human_yes_rate),
                                                                   ("judge", j.judge_yes_rate))])
            st.altair_chart(charts.yes_rate_chart(rows), width="stretch")
        st.subheader("Confusion heatmaps")
        per_row = 3
        for start in range(0, len(s.judges), per_row):
            for col, j in zip(st.columns(per_row), s.judges[start:start + per_row], strict=False):
                col.markdown(f"**{md(j.judge)}** · {md(j.dataset)} (n={j.n:,})")
                col.altair_chart(charts.confusion_chart(j.categories, j.confusion), width="content")
    if stage == "extraction":
        _extraction_section(db)
    elif stage == "relevance":
        _relevance_bias_section(db, stage)
        _pilot_section(db)
    else:
        _response_bias_section(db)
    with st.expander("What is stored for this stage"):
        inventory = data.stage_inventory(db, stage)
        st.dataframe(inventory.astype(object).where(inventory.notna(), MISSING), hide_index=True, width="stretch")


def _calibration_section(db: str, stage: str, kappa_ceilings: dict[str, float]) -> None:
    target = st.number_input("Target accuracy for the threshold (optional; else the dataset's human ceiling)",
                             min_value=0.0, max_value=1.0, value=None, step=0.01, key=f"conf-target-{stage}")
    entries = confidence.confidence_entries(db, stage, tuple(sorted(kappa_ceilings.items())), target)
    if not entries:
        return
    st.subheader("Calibration: where may the judge decide? (judges that state a confidence)")
    for e in entries:
        st.markdown(f"**{md(e['judge'])}** · {md(e['dataset'])}: {e['with_confidence']:,} of {e['labels']:,} labels "
                    f"carry a confidence (scale {md(str(e['confidence_scale']))})"
                    + (f"; {e['confidence_failures']:,} stated confidences did not parse" if e["confidence_failures"]
                       else ""))
        if e["confidence_note"]:
            st.caption(md(e["confidence_note"]))
        left, right = st.columns(2)
        cal = e["calibration"]
        if cal is not None:
            left.markdown(f"Brier {num(cal['brier'])} {ci(cal['brier_ci'])} · ECE {num(cal['ece'])} "
                          f"{ci(cal['ece_ci'])} · {cal['n_users']:,} users"
                          + (f" ({cal['ece_note']})" if cal.get("ece_note") else ""))
            left.altair_chart(confidence.reliability_chart(confidence.reliability_frame(cal["bins"])),
                              width="stretch")
        threshold = e["threshold"]
        held = (threshold or {}).get("held_out") or None
        curve = confidence.coverage_frame(e["coverage_curve"])
        right.markdown(_threshold_text(threshold, kappa_ceilings.get(e["dataset"])))
        right.altair_chart(confidence.coverage_chart(
            curve, ceiling=kappa_ceilings.get(e["dataset"]), chosen_coverage=held["coverage"] if held else None,
            metric="kappa" if threshold is None or threshold["target"]["metric"] == "kappa" else "accuracy"),
            width="stretch")
    st.caption("Left: agreement with the blind human reference per confidence bin (95% CI, whole users left out), "
               "against the diagonal of a perfectly calibrated judge. Right: keep only the labels at or above a "
               "confidence; red dashed line: the dataset's human ceiling (kappa); black dotted line: the chosen "
               "threshold's coverage on held-out users. A threshold is chosen on half the users (by a hash of "
               "their id) and reported on the other half, never on the users it was chosen on.")


def _threshold_text(threshold: dict[str, Any] | None, ceiling: float | None) -> str:
    if threshold is None:
        return ("No human ceiling on this dataset and no target given: no threshold chosen." if ceiling is None
                else "No threshold chosen.")
    target = threshold["target"]
    goal = f"{target['metric']} ≥ {num(target['value'])} ({target['source']})"
    held = threshold["held_out"]
    if threshold["min_confidence"] is None or held is None:
        return f"No confidence threshold reaches {goal} on the choosing users."
    return (f"Confidence ≥ {num(threshold['min_confidence'])} reaches {goal} on "
            f"{threshold['n_users_chosen_on']:,} users; on {held['n_users']:,} held-out users it keeps "
            f"{held['coverage']:.0%} of items ({held['n']:,}) with accuracy {num(held['accuracy'])} "
            f"{ci(held['accuracy_ci'])}, kappa {num(held['kappa'])} {ci(held['kappa_ci'])}.")


def _origin_section(judges: list[JudgeScore]) -> None:
    table = origin_table(judges)
    if table.empty:
        return
    st.subheader("Synthetic personas vs real users (same judge, Cohen's kappa with humans)")
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption("Judges tend to look better on synthetic personas than on real people: read the real-user column "
               "before trusting a judge.")


def _robust_section(db: str, stage: str, datasets: tuple[str, ...]) -> None:
    panel = data.robust_panel(db, stage, datasets)
    if panel is None or panel.empty:
        return
    st.subheader("Prevalence-robust agreement (95% CI)")
    table = pd.DataFrame({
        "dataset": panel["dataset"], "judge": panel["judge"], "n": panel["n"],
        "kappa": [f"{num(v)} {ci(c)}" for v, c in zip(panel["kappa"], panel["kappa_ci"], strict=True)],
        **{name: [f"{num(v)} {ci(c)}" for v, c in zip(panel[key], panel[f"{key}_ci"], strict=True)]
           for name, key in (("AC1", "ac1"), ("PABAK", "pabak"), ("MCC", "mcc"),
                             ("balanced accuracy", "balanced_accuracy")) if key in panel},
    })
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption("Gwet's AC1 and PABAK stay meaningful when one label dominates (where kappa can be near zero at "
               "high accuracy); the base-rate row is a judge that always gives the humans' most common label.")


def _relevance_bias_section(db: str, stage: str) -> None:
    st.subheader("Position and length bias")
    bias = data.relevance_bias(db, stage)
    if bias.empty:
        st.caption("No position or length information on this stage's labelled items.")
        return
    for factor, title in (("position", "Share labelled yes by the attribute's position in its list"),
                          ("length", "Share labelled yes by attribute length (quartiles of characters)")):
        part = bias[bias["factor"] == factor]
        if part.empty:
            continue
        st.markdown(f"**{title}**")
        st.altair_chart(charts.rate_ci_chart(part, x_title="share labelled yes (95% CI)"), width="stretch")
    st.caption("Humans (red) beside each judge, per bucket: a judge whose yes-rate climbs for early or short "
               "attributes while the humans' does not has a position or length bias. CIs: "
               + CI_METHOD + " over users.")


def _response_bias_section(db: str) -> None:
    st.subheader("Position and length bias (pairwise answers)")
    report = data.response_report(db)
    rows: list[dict[str, Any]] = []
    for h in report["humans"]:
        rows.append({"rater": f"humans · {h['dataset']}", "who": "humans", "n": h["n"],
                     "first": h["first_position_rate"], "first_ci": h["first_position_ci"],
                     "longer": h["longer_rate"], "longer_ci": h["longer_ci"]})
    for j in report["judges"]:
        name = judge_display(str(j["rater"]), str(j["condition"] or ""))
        rows.append({"rater": f"{name} · {j['dataset']}", "who": "judge", "n": j["n"],
                     "first": j["first_position_rate"], "first_ci": j["first_position_ci"],
                     "longer": j["longer_rate"], "longer_ci": j["longer_ci"]})
    shown = False
    for key, title, ref in (("first", "Share choosing the answer shown first", 0.5),
                            ("longer", "Share choosing the longer answer", None)):
        frame = pd.DataFrame([{"rater": r["rater"], "who": r["who"], "n": r["n"], "rate": r[key],
                               "ci_low": (r[f"{key}_ci"] or [None, None])[0],
                               "ci_high": (r[f"{key}_ci"] or [None, None])[1]}
                              for r in rows if not missing(r[key])])
        if frame.empty:
            continue
        shown = True
        st.markdown(f"**{title}** (decisive A/B verdicts)")
        st.altair_chart(charts.rate_ci_chart(frame, x_title="share (95% CI)", reference=ref), width="stretch")
    if shown:
        st.caption("Humans (red) beside each judge. 0.5 on the first chart means no position preference; a judge "
                   "far above the humans on the second prefers longer answers more than people do. CIs: "
                   + CI_METHOD + " over users/questions.")
    else:
        st.caption("No pairwise A/B verdicts with answer order or lengths on this stage yet.")


def _extraction_section(db: str) -> None:
    try:
        report = data.extraction_report(db)
    except (StoreError, ValueError, KeyError) as exc:
        st.caption(f"The stage-1 report could not be built: {md(exc)}")
        return
    matching = report["matching"]
    st.subheader("Extraction vs gold: precision and recall (95% CI)")
    if matching:
        frame = pd.DataFrame([{"row": " · ".join(str(m[k]) for k in ("extractor", "dataset", "split", "category")
                                                 if not missing(m[k]) and str(m[k])),
                               "metric": metric, "value": m[metric], "ci_low": m[f"{metric}_ci"][0],
                               "ci_high": m[f"{metric}_ci"][1]}
                              for m in matching for metric in ("precision", "recall")])
        st.altair_chart(charts.precision_recall_chart(frame), width="stretch")
        st.caption(md(report["matcher_note"]))
    else:
        st.caption("No extractor output matched against gold preferences yet (import an extractor's output with "
                   "`personagap import extraction`, or run `personagap judge extraction`).")
    st.subheader("Human verdict mix per extractor")
    acceptance = report["acceptance"]
    if acceptance:
        frame = pd.DataFrame([{"row": f"{a['extractor']} · {a['rater']} · {a['dataset']}", "verdict": v,
                               "share": a[v], "n": a["n"]} for a in acceptance for v in ("ok", "unsure", "bad")])
        st.altair_chart(charts.verdict_mix_chart(frame), width="stretch")
        st.caption("ok = the attribute is supported by the conversation; bad = unsupported or broader than the "
                   "evidence (over-generalisation).")
    else:
        st.caption("No human verdicts on extracted attributes yet.")


def _pilot_section(db: str) -> None:
    report = data.pilot_report(db)
    if report is None:
        return
    st.subheader(f"Agreement among raters ({md(report['dataset'])})")
    if report["which"] == "anchored":
        st.caption("These annotators saw an LLM's label before giving theirs (anchored): their agreement is "
                   "reported apart and is never a blind human ceiling.")
    groups = pd.DataFrame(report["groups"])
    for column in list(groups.columns):
        values = groups[column]
        if values.map(lambda v: isinstance(v, list | tuple)).any():
            groups[column] = values.map(lambda v: ci(list(v)) if isinstance(v, list | tuple) else text(v))
        elif pd.api.types.is_float_dtype(values):
            groups[column] = values.map(lambda v: num(v, 3))
    st.dataframe(groups.astype(object).where(groups.notna(), MISSING), hide_index=True)
    st.write(f"Humans, Krippendorff's alpha (nominal): **{num(report['human_alpha'])}** "
             f"{ci(report['human_alpha_ci'])}; Fleiss' kappa on {report['fleiss_items']} items rated by "
             f"{report['fleiss_raters_per_item']} humans: **{num(report['human_fleiss'])}** "
             f"{ci(report['human_fleiss_ci'])}")
