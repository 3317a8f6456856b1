"""The dashboard's pages as functions over cached, read-only queries.

Caching holds query *results*, never a connection: every cache miss opens the file
read-only for one batch and closes it, so a judge run writing in short transactions
gets the file between two reads. The Refresh button clears the caches; so does every
label the Annotate page writes (:mod:`personagap.dashboard.annotate_page`).

Imported text (attributes, prompts, rater names, reasons, a PRISM ``certainty``) is
never rendered as Markdown: it goes through :func:`md` (escaped) or into code/text
elements, so a value like ``![](http://host/p.png)`` is shown, not fetched.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.analysis.comparable import JUDGE_KINDS, judge_display
from personagap.analysis.diagnosis import STAGE_TITLES, STAGES, Diagnosis, HumanCeiling, JudgeScore, StageDiagnosis
from personagap.analysis.origins import origin_comparison, where
from personagap.analysis.pairwise import pairwise_agreement
from personagap.dashboard import access, charts, queries
from personagap.store import DEFAULT_DB, StoreError

DB_ENV = "PERSONAGAP_DB"
TTL_SECONDS = 60
PAGE_SIZE = 25
MISSING = "—"

GUIDANCE = """
**Get data into PersonaGap first**, then press *Refresh*:

```
personagap import recenter ../shared/data/recenter --db {db}   # real human + LLM labels
personagap judge relevance --model openai/gpt-4o-mini --db {db}  # add your own judge
personagap demo --db {db}                                        # or: built-in sample data
```
"""

# Characters that start Markdown/HTML constructs anywhere in a line (links and images need "[" or "!",
# emphasis "*"/"_", code "`", HTML "<", maths "$", tables "|", strike-through "~"); and at a line's start
# headings, quotes, lists.
_MD_INLINE = re.compile(r"([\\`*_\[\]<>!~|$])")
_MD_LINE_START = re.compile(r"^(\s*)([#>+\-=])", re.MULTILINE)
_MD_ORDERED = re.compile(r"^(\s*\d+)([.)])", re.MULTILINE)


def md(value: Any) -> str:
    """Imported text made safe for Markdown: its Markdown characters escaped, so it shows as typed.

    ``![](http://host/p.png)`` becomes literal text (nothing is fetched), ``**x**`` stays starred.
    """
    out = _MD_INLINE.sub(r"\\\1", "" if value is None else str(value))
    out = out.replace("://", ":\\/\\/")  # no autolinked URLs either
    out = _MD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), out)
    return _MD_ORDERED.sub(lambda m: m.group(1) + "\\" + m.group(2), out)


def db_path() -> str:
    """The database this dashboard reads (``PERSONAGAP_DB``, set by ``personagap dashboard --db``)."""
    return os.environ.get(DB_ENV, DEFAULT_DB)


def missing(v: Any) -> bool:
    """None, NaN, pandas NA: a value that must be shown as a dash, never as ``None``/``nan``."""
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def num(v: Any, digits: int = 2) -> str:
    """A number for display (a dash when missing)."""
    return MISSING if missing(v) else f"{float(v):.{digits}f}"


def ci(bounds: list[float] | None, digits: int = 2) -> str:
    """A CI as ``[low, high]``; ``(no CI)`` when there is none (e.g. too few users to resample)."""
    if not bounds or all(missing(b) for b in bounds):
        return "(no CI)"
    return f"[{num(bounds[0], digits)}, {num(bounds[1], digits)}]"


def ci_phrase(bounds: list[float] | None) -> str:
    """``95% CI [low, high]``, or ``no CI (too few users)``."""
    return "no CI (too few users)" if ci(bounds) == "(no CI)" else f"95% CI {ci(bounds)}"


def text(v: Any) -> str:
    """Any cell for display: a dash for missing values."""
    return MISSING if missing(v) else str(v)


# --------------------------------------------------------------------------- cached data

@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _db_state(db: str) -> dict[str, int]:
    return queries.db_state(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing agreement with humans…")
def _diagnosis(db: str, n_resamples: int, seed: int) -> Diagnosis:
    from personagap.analysis.diagnosis import diagnose_db
    from personagap.dashboard import prefetch

    # Computed while the server booted (personagap.dashboard.serve); only the first call can take it.
    early = prefetch.take(db, n_resamples, seed)
    if isinstance(early, Diagnosis):
        return early
    with access.reading():
        return diagnose_db(db, n_resamples=n_resamples, seed=seed)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _filter_options(db: str) -> dict[str, list[str]]:
    return queries.filter_options(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _stage_inventory(db: str, stage: str) -> pd.DataFrame:
    return queries.stage_inventory(db, stage)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing position and length bias…")
def _relevance_bias(db: str, stage: str) -> pd.DataFrame:
    from personagap.analysis.response import clustered_rate

    labels = queries.bias_labels(db, stage)
    rows: list[dict[str, Any]] = []
    if labels.empty:
        return pd.DataFrame(rows)
    # Length quartiles over the items' attribute lengths (the same cut for every rater).
    lengths = labels["length"].dropna()
    if lengths.nunique() >= 4:
        edges = np.unique(np.quantile(lengths, [0, 0.25, 0.5, 0.75, 1]))
        names = [f"length Q{i + 1} ({int(edges[i])}–{int(edges[i + 1])} chars)" for i in range(len(edges) - 1)]
        labels["length_q"] = pd.cut(labels["length"], edges, labels=names, include_lowest=True).astype(object)
    factors = {"position": "position", "length": "length_q"}
    for factor, column in factors.items():
        if column not in labels or labels[column].isna().all():
            continue
        part = labels.dropna(subset=[column])
        for (rater, who, bucket), g in part.groupby(["rater", "who", column], sort=True):
            if len(g) < 5:
                continue
            est = clustered_rate(g["hit"].to_numpy(bool), g["user_id"].to_numpy(), n_resamples=DEFAULT_RESAMPLES,
                                 seed=DEFAULT_SEED)
            label = f"position {int(bucket) + 1}" if factor == "position" else str(bucket)
            rows.append({"factor": factor, "bucket": label, "rater": rater, "who": who, "n": len(g),
                         "rate": est.value, "ci_low": est.ci[0], "ci_high": est.ci[1]})
    return pd.DataFrame(rows)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the stage-3 report…")
def _response_report(db: str) -> dict[str, Any]:
    from personagap.stages.response import report_response

    with access.reading():
        return report_response(db).model_dump()


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the stage-1 report…")
def _extraction_report(db: str) -> dict[str, Any]:
    from personagap.stages.extraction import report_extraction

    with access.reading():
        return report_extraction(db).model_dump()


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the stage-2 report…")
def _relevance_report(db: str) -> dict[str, Any]:
    from personagap.stages.relevance import report_relevance

    with access.reading():
        return report_relevance(db).model_dump()


def _stage_report(db: str, stage: str) -> dict[str, Any]:
    """The stage's own report (the same figures as `personagap report STAGE`), cached."""
    if stage == "relevance":
        return _relevance_report(db)
    return _response_report(db) if stage == "response" else _extraction_report(db)


def alt_test_table(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[str]]:
    """The alternative-annotator test per judge as display text (blind and anchored humans on separate rows).

    A "not applicable" verdict stays short in the table (``not applicable (note N)``): the reasons are
    sentences a table cell would cut off, so they come back as notes, each reason once with the rows it
    explains, to be shown in full under the table.

    Returns:
        The table, and the notes in the order of their numbers (Markdown, imported text escaped).
    """
    out = []
    notes: dict[tuple[str, str, str], list[str]] = {}
    for r in rows:
        dataset = where(str(r.get("dataset")), str(r.get("origin", "real")))
        humans = text(r.get("humans", "blind"))
        if r.get("applicable", True):
            verdict = "passes" if r.get("passed") else "does not pass"
            detail = {"winning rate": num(r.get("winning_rate")), "advantage probability":
                      num(r.get("advantage_probability")), "items": f"{r.get('n_items', 0):,}",
                      "annotators": str(r.get("n_annotators", MISSING))}
        else:
            key = (dataset, humans, text(r.get("reason")).rstrip("."))
            notes.setdefault(key, []).append(text(r.get("judge")))
            verdict = f"not applicable (note {list(notes).index(key) + 1})"
            detail = {"winning rate": MISSING, "advantage probability": MISSING, "items": MISSING,
                      "annotators": MISSING}
        out.append({"judge": text(r.get("judge")), "dataset": dataset, "humans": humans, "verdict": verdict,
                    **detail})
    lines = [f"{md(dataset)}, {md(humans)} humans ({md(', '.join(judges))}): not applicable because {md(reason)}."
             for (dataset, humans, reason), judges in notes.items()]
    return pd.DataFrame(out), lines


def _estimate_ci(row: dict[str, Any], key: str) -> str:
    # A row without CIs says why (estimates' ci_note: too few users, the one CI rule) instead of "(no CI)".
    note = row.get("ci_note")
    return f"({note})" if note else ci(row.get(key))


def estimates_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Each judge's naive rate beside the corrected estimates of the human rate, as display text."""
    return pd.DataFrame([{
        "judge": text(r.get("judge")), "dataset": where(str(r.get("dataset")), str(r.get("origin", "real"))),
        "humans": text(r.get("humans", "blind")), "quantity": text(r.get("quantity")),
        "judge's naive rate": num(r.get("naive")),
        "Rogan–Gladen": f"{num(r.get('rogan_gladen'))} {_estimate_ci(r, 'rogan_gladen_ci')}",
        "PPI++": f"{num(r.get('ppi'))} {ci(r.get('ppi_ci'))}",
        "humans only": f"{num(r.get('human_only'))} {_estimate_ci(r, 'human_only_ci')}",
        "n human / judge": f"{r.get('n_human', 0):,} / {r.get('n_judge', 0):,}"} for r in rows])


def _replace_humans_section(db: str, stage: str) -> None:
    report = _stage_report(db, stage)
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


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing the robust agreement panel…")
def _robust_panel(db: str, stage: str, datasets: tuple[str, ...]) -> pd.DataFrame | None:
    from personagap.dashboard.robust_panel import stage_panel

    # The diagnosis (cached, shared with the Overview) has scored every judge already: only the base-rate row
    # and datasets whose label set differs from a judge's own need counts from the file, never every label.
    rows = stage_panel(db, _diag(), stage, datasets, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED)
    return pd.DataFrame(rows) if rows else None


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _matrix_choices(db: str) -> pd.DataFrame:
    return queries.matrix_choices(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner="Computing pairwise agreement…")
def _pairwise(db: str, stage: str, dataset: str) -> dict[str, Any]:
    labels = queries.agreement_labels(db, stage, dataset)
    groups = {str(r): ("human majority" if k == "human_majority" else "human" if k == "human" else "judge")
              for r, k in labels[["rater", "rater_kind"]].drop_duplicates().itertuples(index=False)}
    result = pairwise_agreement(labels[["item_id", "rater", "label", "cluster"]].drop_duplicates(["item_id", "rater"]),
                                groups, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED)
    summary = pd.DataFrame([{"pairs": k, "mean kappa": num(g.mean_kappa.value), "95% CI": ci(list(g.mean_kappa.ci)),
                             "rater pairs": g.n_pairs}
                            for k, g in result.groups.items()])
    return {"matrix": result.matrix, "overlap": result.overlap, "groups": groups, "summary": summary}


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _pilot_report(db: str) -> dict[str, Any] | None:
    from personagap.stages.relevance import multi_rater_report
    from personagap.store import load_labels

    with queries.read_only(db) as con:
        datasets = [r[0] for r in con.execute(
            "SELECT DISTINCT i.dataset FROM labels l JOIN items i USING (item_id) "
            "WHERE i.stage = 'relevance' AND l.rater_kind = 'human' ORDER BY 1").fetchall()]
        frames = {ds: load_labels(con, dataset=ds, stage="relevance") for ds in datasets}
    # Blind humans first (the only agreement that may serve as a ceiling); else the anchored annotators', shown
    # as such. Never the two mixed.
    for which in ("blind", "anchored"):
        for ds, labels in frames.items():
            report = multi_rater_report(labels, ds, n_resamples=DEFAULT_RESAMPLES, seed=DEFAULT_SEED, which=which)
            if report is not None:
                return {**report.model_dump(), "which": which}
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
def _best_run_pair(db: str) -> tuple[str, str] | None:
    return queries.best_run_pair(db)


@st.cache_data(ttl=TTL_SECONDS, show_spinner=False)
def _compare(db: str, a: str, b: str) -> dict[str, Any]:
    return queries.compare_runs(db, a, b)


# --------------------------------------------------------------------------- shared pieces

def sidebar() -> None:
    """Database path and the Refresh button."""
    db = db_path()
    st.sidebar.markdown("**PersonaGap** · judges vs real humans")
    st.sidebar.caption(f"Database: `{db.replace('`', '')}`")
    if st.sidebar.button("Refresh", help="Re-read the database (queries are cached for a minute)."):
        st.cache_data.clear()
    from personagap.dashboard import annotate

    # Labels given on the Annotate page while a writer held the file are written from whichever page is open.
    if annotate.has_pending(db) and annotate.flush(db, wait_seconds=0.1).written:
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
        st.error(f"Cannot read the database: {md(exc)}")
        return None
    if state["labels"] == 0:
        st.info(f"The database `{db}` is empty: no labels stored yet.")
        st.markdown(GUIDANCE.format(db=db))
        return None
    return state


def _diag() -> Diagnosis:
    return _diagnosis(db_path(), DEFAULT_RESAMPLES, DEFAULT_SEED)


def stage_ceilings(s: StageDiagnosis) -> list[HumanCeiling]:
    """Every dataset's own human ceiling of a stage (never one dataset's ceiling drawn beside another's judges)."""
    found = list(getattr(s, "ceilings", None) or [])
    if not found and s.ceiling is not None:
        found = [s.ceiling]
    return found


def headline(j: JudgeScore) -> tuple[str, float, list[float]]:
    """A judge row's headline figure: weighted kappa (with its CI) on an ordinal scale, else Cohen's kappa.

    Unweighted kappa counts a 4 given for a 5 as wrong as a 1 given for a 5; on ordered levels the weighted
    kappa the diagnosis computes is the figure that answers "does the judge agree with humans".

    Returns:
        The figure's name, its value and its CI.
    """
    if j.scale == "ordinal" and j.weighted_kappa is not None:
        return "weighted kappa", j.weighted_kappa, j.weighted_kappa_ci or [float("nan"), float("nan")]
    return "kappa", j.kappa, j.kappa_ci


def forest_title(judges: pd.DataFrame) -> str:
    """The forest plot's axis title: names weighted kappa when some row shows it (an ordinal scale)."""
    if "figure" in judges.columns and (judges["figure"] == "weighted kappa").any():
        return "kappa vs humans, weighted on ordinal scales (95% CI)"
    return "Cohen's kappa vs humans (95% CI)"


def forest_frames(stages: list[StageDiagnosis]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The forest plot's judge rows (each judge's :func:`headline` figure) and per-dataset human-ceiling rows.

    The ``kappa`` column holds the headline figure and ``figure`` names it (weighted kappa on ordinal scales).
    """
    rows = []
    for s in stages:
        for j in s.judges:
            figure, value, bounds = headline(j)
            if not missing(value):
                rows.append({"stage": j.stage, "dataset": j.dataset, "judge": j.judge, "kind": j.rater_kind, "n": j.n,
                             "figure": figure, "kappa": value, "ci_low": bounds[0], "ci_high": bounds[1]})
    judges = pd.DataFrame(rows, columns=["stage", "dataset", "judge", "kind", "n", "figure", "kappa", "ci_low",
                                         "ci_high"])
    ceilings = pd.DataFrame([{
        "stage": s.stage, "dataset": c.dataset, "ceiling": c.mean_kappa, "ceiling_low": c.ci[0],
        "ceiling_high": c.ci[1], "raters": c.n_raters,
    } for s in stages for c in stage_ceilings(s)],
        columns=["stage", "dataset", "ceiling", "ceiling_low", "ceiling_high", "raters"])
    return judges, ceilings


def _headline_text(j: JudgeScore) -> str:
    figure, value, bounds = headline(j)
    text_ = f"{num(value)} {ci(bounds)}"
    return text_ if figure == "kappa" else f"{figure} {text_}"


def judges_table(judges: list[JudgeScore], *, full: bool = True) -> pd.DataFrame:
    """Judge scores as a display table of text (a dash where a figure does not apply, e.g. yes-rates of A/B).

    ``full=False`` keeps the columns that fit the Overview's width without horizontal scrolling.
    """
    rows = []
    for j in judges:
        row: dict[str, Any] = {} if full else {"stage": STAGES.index(j.stage) + 1 if j.stage in STAGES else j.stage}
        row |= {"dataset": where(j.dataset, j.origin), "judge": j.judge}
        if full:
            row |= {"kind": j.rater_kind}
        row |= {
            "n": j.n, "failures": j.failures, "kappa (95% CI)": _headline_text(j),
            "accuracy": num(j.accuracy),
            "yes-rate humans → judge": (f"{num(j.human_yes_rate)} → {num(j.judge_yes_rate)}"
                                        if j.binary else MISSING),
            "over-selection": f"{num(j.over_selection)}×" if j.binary and not missing(j.over_selection) else MISSING,
        }
        if full:
            row["precision / recall / F1"] = (f"{num(j.precision)} / {num(j.recall)} / {num(j.f1)}"
                                              if j.binary else MISSING)
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- pages

def overview() -> None:
    """Overview: the verdict, a per-stage scorecard, and every judge against its dataset's human ceiling."""
    st.title("Overview — where does automated evaluation part from humans?")
    state = require_data()
    if state is None:
        return
    d = _diag()
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


def stage_page(stage: str) -> None:
    """A stage's page: judges vs humans, robust panel, yes-rates, confusion heatmaps and biases."""
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
        inventory = _stage_inventory(db, stage)
        st.dataframe(inventory.astype(object).where(inventory.notna(), MISSING), hide_index=True, width="stretch")


def origin_table(judges: list[JudgeScore]) -> pd.DataFrame:
    """Judges scored on both synthetic-persona and real-user datasets of a stage, side by side (display text)."""
    rows = [{"judge": c.judge, "synthetic personas": f"{c.synthetic_dataset}: {num(c.synthetic_kappa)} "
                                                     f"{ci(c.synthetic_kappa_ci)} (n={c.synthetic_n:,})",
             "real users": f"{c.real_dataset}: {num(c.real_kappa)} {ci(c.real_kappa_ci)} (n={c.real_n:,})",
             "synthetic − real": num(c.difference)}
            for c in origin_comparison((j.judge, j) for j in judges)]
    return pd.DataFrame(rows)


def _origin_section(judges: list[JudgeScore]) -> None:
    table = origin_table(judges)
    if table.empty:
        return
    st.subheader("Synthetic personas vs real users (same judge, Cohen's kappa with humans)")
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption("Judges tend to look better on synthetic personas than on real people: read the real-user column "
               "before trusting a judge.")


def _robust_section(db: str, stage: str, datasets: tuple[str, ...]) -> None:
    panel = _robust_panel(db, stage, datasets)
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
    bias = _relevance_bias(db, stage)
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
               "attributes while the humans' does not has a position or length bias. CIs: user-clustered bootstrap.")


def _response_bias_section(db: str) -> None:
    st.subheader("Position and length bias (pairwise answers)")
    report = _response_report(db)
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
                   "cluster bootstrap over users/questions.")
    else:
        st.caption("No pairwise A/B verdicts with answer order or lengths on this stage yet.")


def _extraction_section(db: str) -> None:
    try:
        report = _extraction_report(db)
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
    report = _pilot_report(db)
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
    st.caption("Cohen's kappa for every pair of raters on the items both labelled (blind humans and comparable "
               "judges; pairs sharing fewer than 10 items are blank). Hover a cell for the shared item count.")
    st.altair_chart(charts.matrix_chart(result["matrix"], result["overlap"], result["groups"]), width="content")
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
    search = c6.text_input("Search prompt, attribute, reason", key="dis_text")
    f = queries.DisagreementFilter(
        stage=None if stage == any_ else stage, dataset=None if dataset == any_ else dataset,
        judge=None if judge == any_ else judge, user=user or None, kind=kind, text=search or None)
    total = _count_disagreements(db, f)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = int(st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, step=1, key="dis_page"))
    st.markdown(f"**{total:,}** matching judge labels")
    rows = _disagreements(db, f, PAGE_SIZE, (page - 1) * PAGE_SIZE)
    if rows.empty:
        st.info("Nothing matches these filters.")
        return
    shown = ["judge", "judge_label", "human_label", "dataset", "stage", "attribute", "user_id", "prompt_index",
             "condition", "error"]
    table = rows[shown].astype(object)
    table["judge_label"] = table["judge_label"].map(lambda v: "(unparseable)" if missing(v) else v)
    st.dataframe(table.where(table.notna(), MISSING), hide_index=True, width="stretch")
    ids = [str(i) for i in rows["item_id"]]
    labels = {}
    for i, r in enumerate(rows.itertuples()):
        verdict = "unparseable" if missing(r.judge_label) else r.judge_label
        what = r.attribute if not missing(r.attribute) else r.item_id
        labels[f"{i}:{r.item_id}"] = (f"{(page - 1) * PAGE_SIZE + i + 1}. {r.judge} said {verdict}, humans "
                                      f"{r.human_label} — {str(what)[:90]}")
    # The widget key follows the filter and page: a new list of cases starts at its first case, never showing
    # the previous list's choice beside another case's panel.
    key = "dis_case_" + hashlib.blake2b(repr((f, page)).encode(), digest_size=6).hexdigest()
    picked = st.selectbox("Open a case", list(labels), format_func=labels.__getitem__, key=key)
    show_case(db, ids[int(str(picked).split(":", 1)[0])])


def case_texts(case: dict[str, Any]) -> dict[str, Any]:
    """What a case view shows, each piece once: prompt/question, profile, answers and the remaining details."""
    item = case["item"]
    payload = dict(item.get("payload") or {})
    prompt_key = next((k for k in ("question", "prompt", "context") if isinstance(payload.get(k), str)), None)
    prompt = case.get("prompt_text") or (payload.get(prompt_key) if prompt_key else None)
    prompt_title = {"question": "Question", "context": "Conversation so far"}.get(prompt_key or "", "Prompt")
    if case.get("prompt_text"):
        prompt_title = "Prompt"
    profile = case.get("profile_text") or next(
        (payload[k] for k in ("profile", "facts", "persona") if isinstance(payload.get(k), str)), None)
    used = {prompt_key, "profile", "facts", "persona"} - {None}
    answers = {k: v for k, v in payload.items() if k not in used and isinstance(v, str)
               and k.startswith(("answer", "response"))}
    # Other versions of the profile (what judges under another protocol were shown), apart from the profile.
    variants = {k: v for k, v in payload.items() if k not in used and isinstance(v, str) and "profile" in k}
    details = {k: v for k, v in payload.items() if k not in used and k not in answers and k not in variants}
    return {"prompt_title": prompt_title, "prompt": prompt, "profile": profile, "answers": answers,
            "variants": variants, "details": details}


def show_item(case: dict[str, Any]) -> None:
    """The item itself (no labels): attribute, prompt, answers, profile. Imported text is shown as text."""
    item = case["item"]
    parts = case_texts(case)
    st.caption(" · ".join(md(v) for v in (item["stage"], item["dataset"], f"user {item['user_id']}",
                                          None if missing(item.get("prompt_index")) else
                                          f"prompt {int(item['prompt_index'])}", f"item {item['item_id']}")
                          if v is not None))
    if not missing(item.get("attribute")):
        st.markdown("**Attribute judged**")
        st.code(str(item["attribute"]), language=None, wrap_lines=True)
    st.markdown(f"**{parts['prompt_title']}**")
    if parts["prompt"]:
        st.code(str(parts["prompt"]), language=None, wrap_lines=True)
    else:
        st.caption("No prompt is stored for this item.")
    if parts["answers"]:
        st.markdown("**Answers**")
        for col, (key, value) in zip(st.columns(len(parts["answers"])), parts["answers"].items(), strict=True):
            col.markdown(f"*{md(key)}*")
            col.code(value, language=None, wrap_lines=True)
    if parts["profile"]:
        st.markdown("**Profile**")
        st.code(str(parts["profile"]), language=None, wrap_lines=True)
    if parts["variants"]:
        with st.expander("Other versions of the profile, as some judges were shown it"):
            for key, value in parts["variants"].items():
                st.markdown(f"*{md(key)}*")
                st.code(value, language=None, wrap_lines=True)
    profile = case["profile"]
    if not profile.empty:
        st.markdown(f"**User profile ({len(profile)} attributes)**")
        profile = profile.assign(judged=profile["attribute"] == item.get("attribute")).astype(object)
        st.dataframe(profile.where(profile.notna(), MISSING), hide_index=True, width="stretch")
    if parts["details"]:
        st.markdown("**Item details**")
        st.json(parts["details"], expanded=False)


def show_labels(labels: pd.DataFrame) -> None:
    """Every human and judge label of an item; a failure shows as unparseable with its reason, never as nan."""
    humans = labels[labels["rater_kind"].isin(["human", "human_majority"])]
    st.markdown(f"**Human labels ({len(humans)})**")
    if not humans.empty:
        table = humans[["rater", "rater_kind", "condition", "label"]].astype(object)
        table["condition"] = table["condition"].map(lambda c: c or "blind")
        st.dataframe(table.where(table.notna(), MISSING), hide_index=True)
    judges = labels[labels["rater_kind"].isin(JUDGE_KINDS)]
    st.markdown(f"**Judge labels ({len(judges)})**")
    for r in judges.itertuples():
        verdict = f"unparseable ({text(r.error)})" if missing(r.label) else str(r.label)
        with st.expander(md(f"{judge_display(str(r.rater), str(r.condition or ''))}: {verdict}")):
            if not missing(r.reason) and r.reason:
                st.markdown("*Reason*")
                st.code(str(r.reason), language=None, wrap_lines=True)
            if not missing(getattr(r, "raw", None)) and getattr(r, "raw", None):
                st.markdown("*Raw output*")
                st.code(str(r.raw), language=None, wrap_lines=True)
            if hasattr(r, "run_id"):
                meta = "" if missing(r.meta) or not r.meta else f" · meta {r.meta}"
                st.text(f"run {r.run_id}{meta}")


def show_case(db: str, item_id: str) -> None:
    """Render one item whole: prompt, profile, attribute or answers, every human and judge label."""
    case = _case(db, item_id)
    if case is None:
        st.warning(f"Item {md(item_id)} is no longer in the database.")
        return
    with st.container(border=True):
        st.subheader("Case")
        show_item(case)
        show_labels(case["labels"])


def runs_page() -> None:
    """Run metadata, and a comparison of two runs' labels on shared items."""
    st.title("Runs")
    if require_data() is None:
        return
    db = db_path()
    runs = _runs(db)
    st.dataframe(runs.astype(object).where(runs.notna(), MISSING), hide_index=True, width="stretch")
    with_labels = runs[runs["labels"] > 0]
    if len(with_labels) < 2:
        st.caption("Two runs with labels are needed for a comparison.")
        return
    st.subheader("Compare two runs")
    names = {r.run_id: " · ".join(str(v) for v in (r.run_id, r.rater if not missing(r.rater) else r.kind,
                                                    f"{r.labels:,} labels"))
             for r in with_labels.itertuples()}
    ids = list(names)
    pair = _best_run_pair(db)
    first, second = (ids.index(pair[0]), ids.index(pair[1])) if pair and set(pair) <= set(ids) else (0, 1)
    c1, c2 = st.columns(2)
    a = c1.selectbox("Run A", ids, index=first, format_func=names.__getitem__, key="run_a")
    b = c2.selectbox("Run B", ids, index=second, format_func=names.__getitem__, key="run_b")
    result = _compare(db, a, b)
    s = result["summary"].iloc[0]
    m1, m2, m3 = st.columns(3)
    m1.metric("Shared items", f"{int(s['shared']):,}")
    m2.metric("Same label", f"{int(s['agree']):,}")
    m3.metric("Agreement", MISSING if not s["shared"] else f"{s['agree'] / s['shared']:.1%}")
    if int(s["shared"]) == 0:
        st.caption("These runs labelled no item in common.")
        return
    st.dataframe(result["crosstab"].pivot(index="label_a", columns="label_b", values="n").fillna(0).astype(int))
    st.markdown("**Items where they differ** (first 200)")
    diff = result["differences"].astype(object)
    st.dataframe(diff.where(diff.notna(), MISSING), hide_index=True, width="stretch")


__all__ = ["STAGES", "agreement_matrix", "disagreements", "md", "overview", "runs_page", "sidebar", "stage_page"]
