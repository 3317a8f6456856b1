"""The Explore pages: the agreement matrix, disagreements with one case opened whole, runs compared."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import pandas as pd
import streamlit as st

from personagap.analysis.comparable import HUMAN_KINDS, JUDGE_KINDS, judge_display
from personagap.dashboard import data, queries
from personagap.dashboard.data import db_path
from personagap.dashboard.display import MISSING, md, missing, text
from personagap.dashboard.overview import pipeline
from personagap.dashboard.shell import PAGE_SIZE, require_data


def disagreements() -> None:
    """Browse judge labels that disagree with humans, filtered and paged in SQL; open one case whole."""
    st.title("Disagreements")
    if require_data() is None:
        return
    db = db_path()
    if st.toggle(OVER_PERSONALISED, key="dis_overp"):
        over_personalised(db)
        return
    opts = data.filter_options(db)
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
    total = data.count_disagreements(db, f)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = int(st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, step=1, key="dis_page"))
    st.markdown(f"**{total:,}** matching judge labels")
    rows = data.disagreements_page(db, f, PAGE_SIZE, (page - 1) * PAGE_SIZE)
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


OVER_PERSONALISED = ("Over-personalised answers only: written from an attribute humans rejected (stage 1) or judged "
                     "irrelevant for the prompt (stage 2)")


def over_personalised(db: str) -> None:
    """Stage-3 answers the cascade flags (:func:`personagap.analysis.pipeline.pipeline_view`), filtered and paged."""
    flagged = pd.DataFrame(pipeline(db).result().flagged,
                           columns=["item_id", "dataset", "system", "input_condition", "user_id", "rejected_text",
                                    "irrelevant_text"])
    any_ = "(all)"
    c1, c2, c3 = st.columns(3)
    dataset = c1.selectbox("Dataset", [any_, *sorted(flagged["dataset"].unique())], key="op_dataset")
    systems = sorted(str(v) for v in flagged["system"].dropna().unique())
    system = c2.selectbox("Generator", [any_, *systems], key="op_system")
    user = c3.text_input("User id (exact)", key="op_user").strip()
    shown = flagged
    if dataset != any_:
        shown = shown[shown["dataset"] == dataset]
    if system != any_:
        shown = shown[shown["system"] == system]
    if user:
        shown = shown[shown["user_id"] == user]
    pages = max(1, math.ceil(len(shown) / PAGE_SIZE))
    page = int(st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, step=1, key="op_page"))
    st.markdown(f"**{len(shown):,}** over-personalised answers")
    if shown.empty:
        st.info("Nothing matches these filters." if not flagged.empty else
                "No answer is flagged: no stored stage-3 answer records attributes humans rejected or judged "
                "irrelevant (the linked keys are described in docs/formats.md).")
        return
    rows = shown.iloc[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    table = pd.DataFrame({
        "dataset": rows["dataset"], "generator": rows["system"].map(text), "input": rows["input_condition"].map(text),
        "user_id": rows["user_id"], "rejected at stage 1": rows["rejected_text"].map("; ".join),
        "irrelevant at stage 2": rows["irrelevant_text"].map("; ".join)}).astype(object)
    st.dataframe(table.where(table != "", MISSING), hide_index=True, width="stretch")
    ids = [str(i) for i in rows["item_id"]]
    labels = {f"{i}:{iid}": f"{(page - 1) * PAGE_SIZE + i + 1}. {r.system or MISSING} · user {r.user_id} — "
              f"{'; '.join([*r.irrelevant_text, *r.rejected_text])[:90]}"
              for i, (iid, r) in enumerate(zip(ids, rows.itertuples(), strict=True))}
    key = "op_case_" + hashlib.blake2b(repr((dataset, system, user, page)).encode(), digest_size=6).hexdigest()
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
    humans = labels[labels["rater_kind"].isin(HUMAN_KINDS)]
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
    case = data.case(db, item_id)
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
    runs = data.runs(db)
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
    pair = data.best_run_pair(db)
    first, second = (ids.index(pair[0]), ids.index(pair[1])) if pair and set(pair) <= set(ids) else (0, 1)
    c1, c2 = st.columns(2)
    a = c1.selectbox("Run A", ids, index=first, format_func=names.__getitem__, key="run_a")
    b = c2.selectbox("Run B", ids, index=second, format_func=names.__getitem__, key="run_b")
    result = data.compare(db, a, b)
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
