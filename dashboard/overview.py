"""The Overview page: the verdict, a per-stage scorecard, and every judge against its dataset's human ceiling."""

from __future__ import annotations

import streamlit as st

from personagap.dashboard import charts, data
from personagap.dashboard.display import ci, ci_phrase, md, num
from personagap.dashboard.shell import require_data
from personagap.dashboard.tables import forest_frames, forest_title, judges_table, stage_ceilings


def overview() -> None:
    """Overview: the verdict, a per-stage scorecard, and every judge against its dataset's human ceiling."""
    st.title("Overview — where does automated evaluation part from humans?")
    state = require_data()
    if state is None:
        return
    d = data.diag()
    (st.error if d.worst_stage else st.info)(md(d.verdict))
    st.caption(f"{state['labels']:,} labels on {state['items']:,} items from {state['runs']} runs. "
               f"95% CIs: user-clustered bootstrap ({d.n_resamples} resamples, seed {d.seed}); "
               "kappa = Cohen's kappa against the blind human reference.")
    cols = st.columns(len(d.stages))
    for col, s in zip(cols, d.stages, strict=True):
        with col, st.container(border=True):
            marker = " ⚠️ fails most" if s.stage == d.worst_stage else ""
            st.subheader(s.title + marker)
            st.caption(f"{s.n_items:,} items · {s.n_human_labels:,} human labels · {s.n_judge_labels:,} judge labels")
            if s.best is not None and s.worst is not None:
                st.metric("Best judge: kappa vs humans", num(s.best.kappa))
                st.caption(f"{md(s.best.judge)} ({md(s.best.dataset)}), {ci_phrase(s.best.kappa_ci)}, n={s.best.n}")
                st.metric("Worst judge: kappa vs humans", num(s.worst.kappa))
                st.caption(f"{md(s.worst.judge)} ({md(s.worst.dataset)}), {ci_phrase(s.worst.kappa_ci)}, "
                           f"n={s.worst.n}")
                if s.best.binary:
                    st.write(f"Over-selection (best judge): **{num(s.best.over_selection)}×** "
                             f"{ci(s.best.over_selection_ci)} — judge yes {num(s.best.judge_yes_rate)} "
                             f"vs human yes {num(s.best.human_yes_rate)}")
            else:
                st.write(md(s.message))
            gap = getattr(s, "gap", None)
            if gap is not None:
                st.write(f"Gap to the human ceiling (best judge, {md(gap.dataset)}): **{num(gap.gap)}** "
                         f"{ci(gap.gap_ci)}")
            for c in stage_ceilings(s):
                st.write(f"Human ceiling ({md(c.dataset)}): **{num(c.mean_kappa)}** {ci(c.ci)}, the mean pairwise "
                         f"kappa of {c.n_raters} humans")
            for note in getattr(s, "notes", None) or []:
                st.caption(md(note))
    judges, ceilings = forest_frames(d.stages)
    if not judges.empty:
        st.subheader("Every judge against humans")
        st.altair_chart(charts.forest_chart(judges, ceilings, title=forest_title(judges)), width="stretch")
        st.caption("Dots: a judge's kappa (weighted kappa on an ordinal scale) with its 95% CI, coloured by stage. "
                   "Red tick and band: the human ceiling "
                   "(mean pairwise kappa among humans, with its CI) of that judge's own dataset; datasets where "
                   "fewer than two humans labelled the same items have none.")
        st.dataframe(judges_table([j for s in d.stages for j in s.judges], full=False), hide_index=True,
                     width="stretch")
