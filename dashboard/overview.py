"""The Overview page: which stage of the pipeline fails by human verdict, then whether the judges can tell.

The judges' part: the diagnosis verdict, a per-stage scorecard, and every judge against its dataset's human ceiling.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import streamlit as st

from personagap.analysis.agreement import DEFAULT_SEED, MIN_USERS_FOR_CI
from personagap.analysis.ci_rule import CI_METHOD
from personagap.analysis.comparable import SYSTEM_KINDS
from personagap.analysis.diagnosis import Diagnosis
from personagap.analysis.diagnosis_records import DatasetBest
from personagap.analysis.diagnosis_text import stage_message
from personagap.analysis.headline import headline_name
from personagap.analysis.origins import where
from personagap.analysis.pipeline import HEADLINE, STAGE_NAMES, pipeline_db
from personagap.analysis.pipeline_records import PipelineRow, PipelineView
from personagap.analysis.pipeline_text import TITLE, figure
from personagap.dashboard import access, charts, data, prefetch
from personagap.dashboard.display import ci, ci_phrase, md, num
from personagap.dashboard.shell import require_data
from personagap.dashboard.tables import forest_frames, forest_title, judges_table

JUDGES_TITLE = "Can your judges tell you? Judge–human agreement per stage"
_ROWS_SHOWN = 4
"""Systems listed per stage on the first screen (every row is in ``personagap diagnose --json``)."""
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="personagap-pipeline")


_lock = threading.Lock()
_views: dict[str, tuple[tuple[int, int], float, Future[PipelineView]]] = {}


def _compute_view(db: str) -> PipelineView:
    with access.reading():
        return pipeline_db(db)


def _compute(db: str, view: Future[PipelineView], diagnosis: Future[Diagnosis]) -> None:
    # The pipeline view and the diagnosis from one set of per-user counts (diagnose_store), as the server's prefetch
    # does: the view is handed to the page as soon as it is ready, the diagnosis to whichever page asks first
    # (prefetch.take_shared). pipeline_db here read the counts a second time for the diagnosis.
    from personagap.analysis.diagnosis_store import diagnose_store

    try:
        with access.reading():
            result = diagnose_store(db, on_view=view.set_result, seed=DEFAULT_SEED)
    except BaseException as exc:  # whatever it is, the pages waiting on either future must hear of it
        if not view.done():
            view.set_exception(exc)  # the Overview shows it and retries on its next run
        diagnosis.set_exception(exc)  # the first page to ask recomputes and shows its own error
        raise
    else:
        diagnosis.set_result(result.diagnosis)


def pipeline(db: str) -> Future[PipelineView]:
    """The pipeline view of ``db``: the server's prefetch (:func:`prefetch.view`), else computing in a worker thread.

    The worker computes the diagnosis after the view, from the same counts, for :func:`data.diag` to take.

    Reused for :data:`data.TTL_SECONDS` while the file is unchanged (a failed computation is retried on the next
    call).
    """
    now = time.monotonic()
    stamp = prefetch.stamp(db)
    with _lock:
        hit = _views.get(db)
        if hit is not None and hit[0] == stamp and now - hit[1] < data.TTL_SECONDS and not (
                hit[2].done() and hit[2].exception() is not None):
            return hit[2]
        early = prefetch.view(db) if hit is None else None  # the prefetch is adopted once, by the first page
        if early is not None and early[0] == stamp and not (early[1].done() and early[1].exception() is not None):
            future: Future[PipelineView] = early[1]
        elif prefetch.computed(db, DEFAULT_SEED) == stamp:
            future = _POOL.submit(_compute_view, db)  # the cache holds this state's diagnosis: the view alone
        else:
            future = Future()
            diagnosis: Future[Diagnosis] = Future()
            prefetch.share(db, DEFAULT_SEED, stamp, diagnosis)
            _POOL.submit(_compute, db, future, diagnosis)
        _views[db] = (stamp, now, future)
        return future


def overview() -> None:
    """Overview: which stage fails by human verdict, then the judges against humans.

    A session's first Overview comes in two script runs: the pipeline view, then (once the browser has drawn it)
    the judges' part. In one run, the judges' metrics, chart and table reached a fresh browser with the pipeline
    view and nothing was drawn until their code had loaded: at 10^6 labels the answer appeared 0.2-0.5 s later.
    """
    st.title("Overview — which stage of your pipeline fails?")
    state = require_data()
    if state is None:
        return
    # The pipeline table is sent to the browser before the diagnosis is awaited: it is the first thing to read.
    pipeline_section(pipeline(data.db_path()).result())
    st.header(JUDGES_TITLE)
    if not st.session_state.get(_JUDGES_SHOWN):
        _judges_next()
        return
    judges_section(state)


_JUDGES_SHOWN = "personagap.overview.judges_shown"
_NEXT_SECONDS = 0.1
"""The browser asks for the judges' part this long after it has taken in the pipeline view (its own timer)."""


@st.fragment(run_every=_NEXT_SECONDS)
def _judges_next() -> None:
    """A placeholder whose timer, in the browser, asks for the judges' part: the script runs again, in full.

    Called by the page once a session; from then on its Overview comes in one run, without this fragment, whose
    timer Streamlit then stops. Only the timer's own run of the fragment finds the flag already set.
    """
    if st.session_state.get(_JUDGES_SHOWN):
        st.rerun()
    st.session_state[_JUDGES_SHOWN] = True
    st.caption("Comparing every judge with the humans…")


def judges_section(state: dict[str, int]) -> None:
    """Can the judges tell: the diagnosis verdict, a scorecard per stage, every judge against the human ceiling."""
    d = data.diag()
    (st.error if d.worst_stage else st.info)(md(d.verdict))
    st.caption(f"{state['labels']:,} labels on {state['items']:,} items from {state['runs']} runs. "
               f"95% CIs: {CI_METHOD} (none below {MIN_USERS_FOR_CI} users); "
               "Every figure is its dataset's headline: quadratic-weighted kappa on an ordinal scale, Cohen's kappa "
               "otherwise; a judge's figure is against the blind human reference, the ceiling and the gap are "
               "mean pairwise figures with each blind human.")
    cols = st.columns(len(d.stages))
    for col, s in zip(cols, d.stages, strict=True):
        with col, st.container(border=True):
            marker = " ⚠️ fails most" if s.stage == d.worst_stage else ""
            st.subheader(s.title + marker)
            st.caption(f"{s.n_items:,} items · {s.n_human_labels:,} human labels · {s.n_judge_labels:,} judge labels")
            if s.best is None:
                st.write(md(stage_message(s.status, s.stage, None, None) if s.datasets else s.message))
            if len([b for b in s.datasets if b.best is not None]) > 1:
                st.caption("Each dataset with its own best judge and its own human ceiling: datasets are not ranked "
                           "against each other.")
            for b in s.datasets:
                dataset_card(b)
            shown = {b.note for b in s.datasets}
            for note in s.notes:
                if note not in shown:
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


def dataset_card(b: DatasetBest) -> None:
    """One dataset in a stage's card: its best judge, its own ceiling and that judge's gap, each of one kind."""
    name = headline_name(b.metric)
    st.markdown(f"**{md(where(b.dataset, b.origin))}** · {b.scale} scale · {name}")
    if b.best is not None:
        st.metric(f"Best judge: {name} vs the human reference", num(b.best.headline))
        st.caption(f"{md(b.best.judge)}, {ci_phrase(b.best.headline_ci)}, n={b.best.n}")
        if b.worst is not None:
            st.caption(f"Lowest of {b.n_judges} judges: {md(b.worst.judge)} {num(b.worst.headline)}, "
                       f"{ci_phrase(b.worst.headline_ci)}, n={b.worst.n}")
        if b.best.binary:
            st.write(f"Over-selection (best judge): **{num(b.best.over_selection)}×** "
                     f"{ci(b.best.over_selection_ci)} — judge yes {num(b.best.judge_yes_rate)} "
                     f"vs human yes {num(b.best.human_yes_rate)}")
    c = b.ceiling
    if c is not None:
        st.write(f"Human ceiling: **{num(c.mean_kappa)}** {ci(c.ci)}, the mean pairwise {name} of {c.n_raters} "
                 "blind humans")
    if b.gap is not None:
        g = b.gap
        st.write(f"Gap to it: **{num(g.gap)}** {ci(g.gap_ci)} — the best judge's mean pairwise {name} with each "
                 f"blind human {num(g.judge_kappa)} vs the humans' {num(g.ceiling)}")
    if b.note:
        st.caption(md(b.note))


_MEASURE = {"rejected_attributes": "rejected by humans", "irrelevant_selected": "selected but irrelevant",
            "no_better_than_generic": "no better than generic"}


def _order(r: PipelineRow) -> tuple[bool, int, str]:
    # A pipeline's own outputs first, then the systems with most users: an order fixed before any figure is read.
    return (r.system_kind not in SYSTEM_KINDS if r.stage == 2 else False, -r.n_users, r.system or "")


def _cells(r: PipelineRow) -> str:
    system = " · ".join(v for v in (r.system or "unnamed", r.input_condition) if v)
    judges = "; ".join(f"{md(j.judge)} {figure(j.naive, None)}"
                       + (f" (corrected {figure(j.corrected, None)})" if j.corrected is not None else "")
                       for j in r.judges[:2]) or "—"
    return f"{md(system)} ({md(r.dataset)}) | {figure(r.human, r.human_ci)} | {r.n_users} | {judges}"


def pipeline_section(view: PipelineView) -> None:
    """Which stage fails by human verdict: the verdict, then the stages' headline shares in one compact table.

    Per stage and system: the humans' share with its CI, the users, what judges say; then one line per set of
    outputs without a human verdict, and the over-personalised answers. The verdict is a warning box whatever it
    says (the error and info boxes below are the judges' diagnosis).
    """
    st.subheader(TITLE)
    st.warning(md(view.verdict))
    if not view.rows:
        st.caption("No pipeline outputs are stored yet: stage-1 verifications, stage-2 selections or stage-3 "
                   "generic-vs-personalised pairs.")
        return
    lines = ["| stage | system (dataset) | humans (95% CI) | users | judges say |", "|---|---|---|---|---|"]
    for stage in (1, 2, 3):
        rows = [r for r in view.rows if r.stage == stage and r.quantity == HEADLINE[stage]
                and (stage == 3 or r.input_condition is None)]  # stage 2's oracle rows: in diagnose
        judged = sorted((r for r in rows if r.n_human), key=_order)
        cells = [_cells(r) for r in judged[:_ROWS_SHOWN]]
        if len(judged) > _ROWS_SHOWN:
            cells.append(f"+{len(judged) - _ROWS_SHOWN} more (personagap diagnose --json) | | |")
        quiet = [r for r in rows if not r.n_human]
        if quiet:
            cells.append(f"{len(quiet)} without a human verdict ({sum(r.n_items for r in quiet):,} outputs; one line "
                         "each below) | no human verdict | |")
        name = f"{stage}. {STAGE_NAMES[stage]}: {_MEASURE[HEADLINE[stage]]}"
        for k, cell in enumerate(cells or ["no outputs stored | | |"]):
            lines.append(f"| {name if k == 0 else ''} | {cell} |")
    st.markdown("\n".join(lines))
    for line in view.missing:
        st.caption(md(line))
    for c in view.cascade:
        if c.n_flagged:
            st.caption(md(f"Over-personalisation: {c.n_flagged} of {c.n_linked} answers of {c.system or 'unnamed'} "
                          f"({c.input_condition or 'input not recorded'}) used an attribute humans rejected or judged "
                          "irrelevant — filter them on the Disagreements page."))
