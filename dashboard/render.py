"""The dashboard's pages as ``render_*`` functions over cached, read-only queries.

Caching holds query *results*, never a connection: every cache miss opens the file
read-only for one batch and closes it, so a judge run writing in short transactions
gets the file between two reads. The Refresh button clears the caches.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.analysis.diagnosis import STAGE_TITLES, STAGES, Diagnosis, JudgeScore, diagnose_db
from personagap.analysis.pairwise import pairwise_agreement
from personagap.dashboard import charts, queries
from personagap.store import DEFAULT_DB, StoreError

DB_ENV = "PERSONAGAP_DB"
TTL_SECONDS = 60
PAGE_SIZE = 25
JUDGE_KINDS = ("llm", "trained", "baseline")

GUIDANCE = """
**Get data into PersonaGap first**, then press *Refresh*:

```
personagap import recenter ../shared/data/recenter --db {db}   # real human + LLM labels
personagap judge relevance --model openai/gpt-4o-mini --db {db}  # add your own judge
personagap demo --db {db}                                        # or: built-in sample data
```
"""


def db_path() -> str:
    """The database this dashboard reads (``PERSONAGAP_DB``, set by ``personagap dashboard --db``)."""
    return os.environ.get(DB_ENV, DEFAULT_DB)


# --------------------------------------------------------------------------- cached data

@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _db_state(db: str) -> dict[str, int]:
    return queries.db_state(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing agreement with humans…")
def _diagnosis(db: str, n_resamples: int, seed: int) -> Diagnosis:
    from personagap.dashboard import prefetch

    # Computed while the server booted (personagap.dashboard.serve); only the first call can take it.
    early = prefetch.take(db, n_resamples, seed)
    return early if early is not None else diagnose_db(db, n_resamples=n_resamples, seed=seed)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _filter_options(db: str) -> dict[str, list[str]]:
    return queries.filter_options(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _stage_inventory(db: str, stage: str) -> pd.DataFrame:
    return queries.stage_inventory(db, stage)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _bias(db: str, stage: str) -> pd.DataFrame:
    return queries.bias_table(db, stage)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _matrix_choices(db: str) -> pd.DataFrame:
    return queries.matrix_choices(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing pairwise agreement…")
def _pairwise(db: str, stage: str, dataset: str) -> dict[str, Any]:
    labels = queries.agreement_labels(db, stage, dataset)
    groups = {str(r): ("human majority" if k == "human_majority" else "human" if k == "human" else "judge")
              for r, k in labels[["rater", "rater_kind"]].drop_duplicates().itertuples(index=False)}
    # A rater may appear under one kind only; duplicates per (item, rater) cannot occur for condition ''.
    result = pairwise_agreement(labels[["item_id", "rater", "label", "cluster"]], groups,
                                n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED)
    summary = pd.DataFrame([{"pairs": k, "mean kappa": g.mean_kappa.value, "CI low": g.mean_kappa.ci[0],
                             "CI high": g.mean_kappa.ci[1], "rater pairs": g.n_pairs}
                            for k, g in result.groups.items()])
    return {"matrix": result.matrix, "overlap": result.overlap, "groups": groups, "summary": summary}


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _pilot_report(db: str) -> dict[str, Any] | None:
    from personagap.stages.relevance import multi_rater_report
    from personagap.store import load_labels, opened

    with opened(db, read_only=True) as con:
        datasets = [r[0] for r in con.execute(
            "SELECT DISTINCT i.dataset FROM labels l JOIN items i USING (item_id) "
            "WHERE i.stage = 'relevance' AND l.rater_kind = 'human' AND l.condition = '' ORDER BY 1").fetchall()]
        frames = {ds: load_labels(con, dataset=ds, stage="relevance") for ds in datasets}
    for ds, labels in frames.items():
        report = multi_rater_report(labels, ds, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED)
        if report is not None:
            return report.model_dump()
    return None


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _count_disagreements(db: str, f: queries.DisagreementFilter) -> int:
    return queries.count_disagreements(db, f)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _disagreements(db: str, f: queries.DisagreementFilter, limit: int, offset: int) -> pd.DataFrame:
    return queries.disagreements_page(db, f, limit=limit, offset=offset)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _case(db: str, item_id: str) -> dict[str, Any] | None:
    return queries.case_detail(db, item_id)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _runs(db: str) -> pd.DataFrame:
    return queries.runs(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _compare(db: str, a: str, b: str) -> dict[str, Any]:
    return queries.compare_runs(db, a, b)


# --------------------------------------------------------------------------- shared pieces

def sidebar() -> None:
    """Database path, row counts and the Refresh button."""
    db = db_path()
    st.sidebar.markdown("**PersonaGap** · judges vs real humans")
    st.sidebar.caption(f"Database: `{db}` (read-only)")
    if st.sidebar.button("Refresh", help="Re-read the database (queries are cached for a minute)."):
        st.cache_data.clear()


def require_data() -> dict[str, int] | None:
    """Return the store's row counts, or show guidance (not a traceback) when there is nothing to show."""
    db = db_path()
    if not Path(db).exists():
        st.info(f"No PersonaGap database at `{db}` yet.")
        st.markdown(GUIDANCE.format(db=db))
        return None
    try:
        state = _db_state(db)
    except StoreError as exc:
        st.error(f"Cannot read the database: {exc}")
        return None
    if state["labels"] == 0:
        st.info(f"The database `{db}` is empty: no labels stored yet.")
        st.markdown(GUIDANCE.format(db=db))
        return None
    return state


def _diag() -> Diagnosis:
    return _diagnosis(db_path(), DEFAULT_RESAMPLES, DEFAULT_SEED)


def _num(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _ci(ci: list[float] | None) -> str:
    return "" if not ci else f"[{_num(ci[0])}, {_num(ci[1])}]"


def judges_table(judges: list[JudgeScore]) -> pd.DataFrame:
    """Judge scores as a display table."""
    return pd.DataFrame([{
        "stage": j.stage, "dataset": j.dataset, "judge": j.judge, "n": j.n, "users": j.n_users,
        "failures": j.failures, "kappa": j.kappa, "kappa 95% CI": _ci(j.kappa_ci), "accuracy": j.accuracy,
        "human yes": j.human_yes_rate, "judge yes": j.judge_yes_rate, "over-selection": j.over_selection,
        "precision": j.precision, "recall": j.recall, "F1": j.f1,
    } for j in judges])


# --------------------------------------------------------------------------- pages

def overview() -> None:
    """Overview: the verdict and a per-stage scorecard."""
    st.title("Overview — where does automated evaluation part from humans?")
    state = require_data()
    if state is None:
        return
    d = _diag()
    (st.error if d.worst_stage else st.info)(d.verdict)
    st.caption(f"{state['labels']:,} labels on {state['items']:,} items from {state['runs']} runs. "
               f"95% CIs: user-clustered bootstrap ({d.n_resamples} resamples, seed {d.seed}); "
               "kappa = Cohen's kappa against the human reference (majority where stored).")
    cols = st.columns(len(d.stages))
    for col, s in zip(cols, d.stages, strict=True):
        with col, st.container(border=True):
            marker = " ⚠️ fails most" if s.stage == d.worst_stage else ""
            st.subheader(s.title + marker)
            st.caption(f"{s.n_items:,} items · {s.n_human_labels:,} human labels · {s.n_judge_labels:,} judge labels")
            if s.best is not None and s.worst is not None:
                st.metric("Best judge: kappa vs humans", _num(s.best.kappa), help=s.best.judge)
                st.caption(f"{s.best.judge} ({s.best.dataset}), 95% CI {_ci(s.best.kappa_ci)}, n={s.best.n}")
                st.metric("Worst judge: kappa vs humans", _num(s.worst.kappa), help=s.worst.judge)
                st.caption(f"{s.worst.judge} ({s.worst.dataset}), 95% CI {_ci(s.worst.kappa_ci)}, n={s.worst.n}")
                st.write(f"Accuracy (best judge): **{_num(s.best.accuracy)}** {_ci(s.best.accuracy_ci)}")
                if s.best.binary:
                    st.write(f"Over-selection (best judge): **{_num(s.best.over_selection)}×** "
                             f"{_ci(s.best.over_selection_ci)} — judge yes {_num(s.best.judge_yes_rate)} "
                             f"vs human yes {_num(s.best.human_yes_rate)}")
            else:
                st.write(s.message)
            if s.ceiling is not None:
                st.write(f"Human ceiling: **{_num(s.ceiling.mean_kappa)}** {_ci(s.ceiling.ci)} "
                         f"(mean pairwise kappa of {s.ceiling.n_raters} humans, {s.ceiling.dataset})")
    judges = [j for s in d.stages for j in s.judges]
    if judges:
        st.subheader("Every judge against humans")
        st.altair_chart(charts.kappa_chart(judges), width="stretch")
        st.dataframe(judges_table(judges), hide_index=True, width="stretch")


def stage_page(stage: str) -> None:
    """A stage's page: judges vs humans, yes-rates, confusion heatmaps and bias, generic over the stored labels."""
    st.title(STAGE_TITLES[stage])
    if require_data() is None:
        return
    db = db_path()
    s = _diag().stage(stage)
    if s.status == "no_data":
        st.info(f"No data yet for {STAGE_TITLES[stage].lower()}: nothing in the store has stage '{stage}'. "
                "Import a release or run a judge for this stage, then press Refresh.")
        return
    c1, c2, c3 = st.columns(3)
    c1.metric("Items", f"{s.n_items:,}")
    c2.metric("Human labels", f"{s.n_human_labels:,}")
    c3.metric("Judge labels", f"{s.n_judge_labels:,}")
    (st.warning if s.best is None else st.success)(s.message)
    if s.judges:
        st.subheader("Cohen's kappa per judge (95% CI)")
        st.altair_chart(charts.kappa_chart(s.judges, s.ceiling.mean_kappa if s.ceiling else None),
                        width="stretch")
        if s.ceiling is not None:
            st.caption("Dashed line: mean pairwise kappa among humans (the human ceiling).")
        st.dataframe(judges_table(s.judges), hide_index=True, width="stretch")
        binary = [j for j in s.judges if j.binary]
        if binary:
            st.subheader("Human vs judge yes-rates (same items)")
            st.altair_chart(charts.yes_rate_chart(binary))
        st.subheader("Confusion heatmaps")
        cols = st.columns(3)
        for i, j in enumerate(s.judges):
            cols[i % 3].altair_chart(charts.confusion_chart(j))
    bias = _bias(db, stage)
    st.subheader("Position and length bias")
    if bias.empty:
        st.caption("No position, length or swap information on this stage's labelled items.")
    else:
        factors = list(dict.fromkeys(bias["factor"]))
        for col, factor in zip(st.columns(len(factors)), factors, strict=True):
            col.altair_chart(charts.bias_chart(bias, factor), width="stretch")
        st.caption("Attribute length in quartiles (Q1 shortest). Judges that say yes more to short or early "
                   "attributes while humans do not show a length or position bias.")
    if stage == "relevance":
        _pilot_section(db)
    with st.expander("What is stored for this stage"):
        st.dataframe(_stage_inventory(db, stage), hide_index=True, width="stretch")


def _pilot_section(db: str) -> None:
    report = _pilot_report(db)
    if report is None:
        return
    st.subheader(f"Agreement among raters ({report['dataset']})")
    st.dataframe(pd.DataFrame(report["groups"]), hide_index=True)
    st.write(f"Humans, Krippendorff's alpha (nominal): **{_num(report['human_alpha'])}** "
             f"{_ci(report['human_alpha_ci'])}; Fleiss' kappa on {report['fleiss_items']} items rated by "
             f"{report['fleiss_raters_per_item']} humans: **{_num(report['human_fleiss'])}** "
             f"{_ci(report['human_fleiss_ci'])}")


def agreement_matrix() -> None:
    """Pairwise kappa among every human and judge who labelled the same items."""
    st.title("Agreement matrix")
    if require_data() is None:
        return
    db = db_path()
    choices = _matrix_choices(db)
    if choices.empty:
        st.info("No dataset has two raters on the same items yet.")
        return
    keys = [f"{r.stage} · {r.dataset}" for r in choices.itertuples()]
    default = int(choices["raters"].to_numpy().argmax())
    picked = st.selectbox("Stage and dataset", keys, index=default)
    row = choices.iloc[keys.index(picked)]
    result = _pairwise(db, str(row["stage"]), str(row["dataset"]))
    st.caption("Cohen's kappa for every pair of raters on the items both labelled (default protocol; pairs "
               "sharing fewer than 10 items are blank). Hover a cell for the shared item count.")
    st.altair_chart(charts.matrix_chart(result["matrix"], result["overlap"], result["groups"]))
    if not result["summary"].empty:
        st.subheader("Mean pairwise kappa within and across groups (95% CI)")
        st.dataframe(result["summary"], hide_index=True)


def disagreements() -> None:
    """Browse judge labels that disagree with humans, filtered and paged in SQL; open one case whole."""
    st.title("Disagreements")
    if require_data() is None:
        return
    db = db_path()
    opts = _filter_options(db)
    any_ = "(all)"
    c1, c2, c3 = st.columns(3)
    stage = c1.selectbox("Stage", [any_, *opts["stage"]], key="dis_stage")
    dataset = c2.selectbox("Dataset", [any_, *opts["dataset"]], key="dis_dataset")
    judge = c3.selectbox("Judge", [any_, *opts["judge"]], key="dis_judge")
    c4, c5, c6 = st.columns(3)
    kind = c4.selectbox("Disagreement", list(queries.DISAGREEMENT_KINDS),
                        format_func=queries.DISAGREEMENT_KINDS.__getitem__, key="dis_kind")
    user = c5.text_input("User id (exact)", key="dis_user").strip()
    text = c6.text_input("Search prompt, attribute, reason", key="dis_text")
    f = queries.DisagreementFilter(
        stage=None if stage == any_ else stage, dataset=None if dataset == any_ else dataset,
        judge=None if judge == any_ else judge, user=user or None, kind=kind, text=text or None)
    total = _count_disagreements(db, f)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = int(st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, step=1, key="dis_page"))
    st.markdown(f"**{total:,}** matching judge labels")
    rows = _disagreements(db, f, PAGE_SIZE, (page - 1) * PAGE_SIZE)
    if rows.empty:
        st.info("Nothing matches these filters.")
        return
    shown = ["judge", "judge_label", "human_label", "attribute", "dataset", "stage", "user_id", "prompt_index",
             "condition", "error"]
    st.dataframe(rows[shown], hide_index=True, width="stretch")
    labels = [f"{(page - 1) * PAGE_SIZE + i + 1}. {r.judge} said {r.judge_label or 'unparseable'}, humans "
              f"{r.human_label} — {(r.attribute or r.item_id)[:90]}" for i, r in enumerate(rows.itertuples())]
    picked = st.selectbox("Open a case", range(len(rows)), format_func=labels.__getitem__, key="dis_case")
    show_case(db, str(rows.iloc[int(picked)]["item_id"]))


def show_case(db: str, item_id: str) -> None:
    """Render one item whole: prompt, profile, attribute or answers, every human and judge label."""
    case = _case(db, item_id)
    if case is None:
        st.warning(f"Item {item_id} is no longer in the database.")
        return
    item = case["item"]
    with st.container(border=True):
        st.subheader("Case")
        st.caption(f"{item['stage']} · {item['dataset']} · user {item['user_id']} · prompt "
                   f"{item['prompt_index']} · item {item['item_id']}")
        if item.get("attribute"):
            st.markdown("**Attribute judged**")
            st.code(item["attribute"], language=None, wrap_lines=True)
        st.markdown("**Prompt**")
        st.code(case["prompt_text"] or "(no prompt text stored)", language=None, wrap_lines=True)
        texts = {k: v for k, v in item["payload"].items() if isinstance(v, str) and len(v) > 80}
        if texts:
            st.markdown("**Answers**")
            for col, (key, value) in zip(st.columns(len(texts)), texts.items(), strict=True):
                col.markdown(f"*{key}*")
                col.code(value, language=None, wrap_lines=True)
        other = {k: v for k, v in item["payload"].items() if k not in texts}
        if other:
            st.markdown("**Item details**")
            st.json(other, expanded=False)
        if case["profile_text"]:
            st.markdown("**Profile**")
            st.code(case["profile_text"], language=None, wrap_lines=True)
        profile = case["profile"]
        if not profile.empty:
            st.markdown(f"**User profile ({len(profile)} attributes)**")
            profile = profile.assign(judged=profile["attribute"] == item.get("attribute"))
            st.dataframe(profile, hide_index=True, width="stretch")
        labels = case["labels"]
        humans = labels[labels["rater_kind"].isin(["human", "human_majority"])]
        st.markdown(f"**Human labels ({len(humans)})**")
        st.dataframe(humans[["rater", "rater_kind", "condition", "label"]], hide_index=True)
        judges = labels[labels["rater_kind"].isin(JUDGE_KINDS)]
        st.markdown(f"**Judge labels ({len(judges)})**")
        for r in judges.itertuples():
            verdict = r.label if r.label is not None else f"unparseable ({r.error})"
            cond = f" [{r.condition}]" if r.condition else ""
            with st.expander(f"{r.rater}{cond}: {verdict}"):
                if r.reason:
                    st.markdown("*Reason*")
                    st.code(str(r.reason), language=None, wrap_lines=True)
                if r.raw:
                    st.markdown("*Raw output*")
                    st.code(str(r.raw), language=None, wrap_lines=True)
                st.caption(f"run {r.run_id}" + (f" · meta {r.meta}" if r.meta else ""))


def runs_page() -> None:
    """Run metadata, and a comparison of two runs' labels on shared items."""
    st.title("Runs")
    if require_data() is None:
        return
    db = db_path()
    runs = _runs(db)
    st.dataframe(runs, hide_index=True, width="stretch")
    with_labels = runs[runs["labels"] > 0]
    if len(with_labels) < 2:
        st.caption("Two runs with labels are needed for a comparison.")
        return
    st.subheader("Compare two runs")
    names = {r.run_id: f"{r.run_id} · {r.rater or r.kind} · {r.labels} labels" for r in with_labels.itertuples()}
    ids = list(names)
    c1, c2 = st.columns(2)
    a = c1.selectbox("Run A", ids, index=0, format_func=names.__getitem__, key="run_a")
    b = c2.selectbox("Run B", ids, index=1, format_func=names.__getitem__, key="run_b")
    result = _compare(db, a, b)
    s = result["summary"].iloc[0]
    m1, m2, m3 = st.columns(3)
    m1.metric("Shared items", f"{int(s['shared']):,}")
    m2.metric("Same label", f"{int(s['agree']):,}")
    m3.metric("Agreement", "n/a" if not s["shared"] else f"{s['agree'] / s['shared']:.1%}")
    if int(s["shared"]) == 0:
        st.caption("These runs labelled no item in common.")
        return
    st.dataframe(result["crosstab"].pivot(index="label_a", columns="label_b", values="n").fillna(0).astype(int))
    st.markdown("**Items where they differ** (first 200)")
    st.dataframe(result["differences"], hide_index=True, width="stretch")


__all__ = ["STAGES", "agreement_matrix", "disagreements", "overview", "runs_page", "sidebar", "stage_page"]
