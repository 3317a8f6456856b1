"""The Annotate page: a person labels a queue of items blind, then sees how judges and other humans labelled them.

The logic (queue orders, the spool that never loses a label) is in :mod:`personagap.dashboard.annotate`;
this module is only the Streamlit page.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import streamlit as st

from personagap.analysis.comparable import SHOWN_LLM
from personagap.analysis.diagnosis import STAGE_TITLES, STAGES
from personagap.dashboard import annotate, prefetch, render
from personagap.store import StoreError

FLUSH_EVERY_SECONDS = 2.0


_QueueKey = tuple[str, str, str, str | None]
"""(database, stage, dataset, best judge) of one queue."""


@dataclass
class _Held:
    """One queue's inputs, for the store state they were read from, and its orders computed so far."""

    stamp: tuple[int, int]
    queue: annotate.Queue
    orders: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)


_held: dict[_QueueKey, _Held] = {}
_held_lock = threading.Lock()
_HELD_QUEUES = 2
"""Queues held at once (the latest read): at 10^7 labels one queue and its orders take a few hundred MB."""
_HELD_ORDERS = 4
"""Orders held per queue (the latest computed)."""


def _read_queue(db: str, stage: str, dataset: str, best: str | None) -> _Held:
    """The queue's per-item inputs, read once per store state (:func:`prefetch.stamp`, the file's change marker).

    Held in the process as they are, not in ``st.cache_data`` (which pickles a result into the cache and out again
    on every run: at 10^7 labels the inputs of 2 * 10^6 items and each order of them took seconds a run). Every
    order of the queue is computed from them, once per (order, seed).
    """
    key = (db, stage, dataset, best)
    stamp = prefetch.stamp(db)
    with _held_lock:
        held = _held.get(key)
        if held is not None and held.stamp == stamp:
            return held
    with st.spinner("Counting the judges' labels…"):
        held = _Held(stamp, annotate.read_queue(db, stage, dataset, best))
    with _held_lock:
        _held.pop(key, None)
        _held[key] = held
        while len(_held) > _HELD_QUEUES:
            _held.pop(next(iter(_held)))
    return held


def _queue(db: str, stage: str, dataset: str, order: str, seed: int, best: str | None) -> pd.DataFrame:
    held = _read_queue(db, stage, dataset, best)
    ordered = held.orders.get((order, seed))
    if ordered is None:
        routed = annotate.routed_items(db, stage, dataset) if order == "routed" else None
        audit = annotate.audit_items(db, stage, dataset) if order == "audit" else None
        # (The routed and audit orders read the stored decision too: a write that changes it changes the stamp.)
        ordered = annotate.order_queue(held.queue, order, seed=seed, routed=routed, audit=audit)  # type: ignore[arg-type]
        with _held_lock:
            held.orders[(order, seed)] = ordered
            while len(held.orders) > _HELD_ORDERS:
                held.orders.pop(next(iter(held.orders)))
    return ordered


def _carry_over(db: str, before: tuple[int, int]) -> None:
    """After this page wrote people's labels, the queues read just before still hold: keep them for the new state.

    A queue reads judges' labels only, so the page's own write of human labels changes none of it; without this,
    every label given would read the judges' labels again (~10 s at 10^7 labels). (Another process's write would be
    taken for ours only between the stamp read before the flush and the flush's own write: milliseconds.)
    """
    after = prefetch.stamp(db)
    with _held_lock:
        for key, held in _held.items():
            if key[0] == db and held.stamp == before:
                held.stamp = after


@st.cache_data(ttl=render.TTL_SECONDS, show_spinner=False)
def _categories(db: str, stage: str, dataset: str) -> list[str]:
    return annotate.categories(db, stage, dataset)


@st.cache_data(ttl=render.TTL_SECONDS, show_spinner=False)
def _choices(db: str) -> pd.DataFrame:
    return annotate.choices(db)


# Cached like every read (a flush that writes labels clears the caches), so that labelling goes on from
# cached reads while a writer holds the file; labels still in the spool are added live.
@st.cache_data(ttl=render.TTL_SECONDS, show_spinner=False)
def _stored_by(db: str, name: str, stage: str, dataset: str) -> set[str]:
    return annotate.stored_by(db, name, stage, dataset)


@st.cache_data(ttl=render.TTL_SECONDS, show_spinner=False)
def _others_labels(db: str, item_id: str, name: str) -> pd.DataFrame:
    return annotate.others_labels(db, item_id, name)


def flush_pending(db: str) -> annotate.FlushResult:
    """Write pending labels if the file is free; new labels clear every cached query so all pages show them."""
    if not annotate.has_pending(db):
        return annotate.FlushResult(0, 0)
    before = prefetch.stamp(db)
    result = annotate.flush(db)
    if result.written:
        st.cache_data.clear()
        _carry_over(db, before)
    return result


def _pending_status(db: str) -> None:
    result = flush_pending(db)
    if result.pending:
        st.warning(f"⏳ {result.pending} label(s) pending: {render.md(result.error or 'the database is busy')}. "
                   "They are kept safely beside the database and written as soon as it frees.")
    elif result.written:
        st.success(f"✓ {result.written} pending label(s) written to the database.")


pending_status = st.fragment(run_every=FLUSH_EVERY_SECONDS)(_pending_status)


def _best_judge(stage: str, dataset: str) -> str | None:
    # Kept for the page's session: every written label clears the caches, and the queue must not wait for a
    # new diagnosis (seconds of bootstrap) after each label.
    known: dict[tuple[str, str], str | None] = st.session_state.setdefault("annotate_best", {})
    if (stage, dataset) not in known:
        try:
            d = render._diag()
        except StoreError:
            return None
        ranked = [j for j in d.stage(stage).judges if j.dataset == dataset and not render.missing(j.kappa)]
        known[(stage, dataset)] = ranked[0].rater if ranked else None
    return known[(stage, dataset)]


def _name_form() -> str | None:
    name = st.session_state.get("annotator")
    if name:
        c1, c2 = st.columns([4, 1])
        c1.markdown(f"Labelling as **{render.md(name)}**")
        if c2.button("Change name"):
            for key in ("annotator", "annotate_run", "annotate_revealed"):
                st.session_state.pop(key, None)
            st.rerun()
        return str(name)
    with st.form("annotator_name"):
        typed = st.text_input("Your name", help="Stored as the rater of every label you give here.")
        if st.form_submit_button("Start labelling"):
            try:
                st.session_state["annotator"] = annotate.clean_name(typed)
            except annotate.AnnotateError as exc:
                st.error(str(exc))
                return None
            st.session_state["annotate_run"] = annotate.session_run(st.session_state["annotator"])
            st.rerun()
    return None


def _save(db: str, label: Any) -> annotate.FlushResult:
    annotate.submit(db, label, st.session_state["annotate_run"])
    return flush_pending(db)


def annotate_page() -> None:
    """The Annotate page."""
    st.title("Annotate — add your own verdicts")
    if render.require_data() is None:
        return
    db = render.db_path()
    pending_status(db)
    name = _name_form()
    if name is None:
        st.caption("Enter your name once; it is kept while this page is open.")
        return
    choices = _choices(db)
    stages = [s for s in STAGES if s in set(choices["stage"])]
    c1, c2, c3, c4 = st.columns([2, 2, 3, 1])
    stage = str(c1.selectbox("Stage", stages, index=stages.index("relevance") if "relevance" in stages else 0,
                             format_func=lambda s: STAGE_TITLES[s], key="annotate_stage"))
    datasets = [str(d) for d in choices[choices["stage"] == stage]["dataset"]]
    dataset = str(c2.selectbox("Dataset", datasets, key="annotate_dataset"))
    order = str(c3.selectbox("Which items first", list(annotate.ORDERS), format_func=annotate.ORDERS.__getitem__,
                             key="annotate_order"))
    seed = int(c4.number_input("Seed", min_value=0, value=0, step=1, key="annotate_seed",
                               help="Seed of the random order and of every tie-break."))
    best = _best_judge(stage, dataset)
    try:
        queue = _queue(db, stage, dataset, order, seed, best)
    except annotate.AnnotateError as exc:
        st.info(render.md(str(exc)))
        return
    done = _stored_by(db, name, stage, dataset) | annotate.pending_items(db, name)
    revealed = st.session_state.get("annotate_revealed")
    if revealed and bool((queue["item_id"] == revealed["item_id"]).any()):
        _reveal(db, name, revealed)
        return
    if order == "routed":
        decision = annotate.route_decision(db, stage, dataset)
        if decision is not None:
            st.caption(render.md(annotate.route_caption(decision)))
    elif order == "audit":
        st.caption("Items the judge keeps, drawn at random by `personagap route --audit N`: people's labels on them "
                   "are what the human rate is estimated from. Served in draw order, so whatever part is labelled "
                   "is a random sample of the kept items.")
    todo = queue[~queue["item_id"].isin(done)]
    st.caption(f"{len(done):,} labelled by you · {len(todo):,} left in this queue"
               + (f" · best judge here: {render.md(best)}" if best else ""))
    if todo.empty:
        st.success("You have labelled every item routed to people. Thank you!" if order == "routed"
                   else "You have labelled every item of the audit. Thank you!" if order == "audit"
                   else "You have labelled every item of this dataset. Thank you!")
        return
    row = todo.iloc[0]
    _label_form(db, name, stage, dataset, row, order, seed, best)


def _label_form(db: str, name: str, stage: str, dataset: str, row: Any, order: str, seed: int,
                best: str | None) -> None:
    item_id = str(row["item_id"])
    case = render._case(db, item_id)
    if case is None:
        st.warning("This item is no longer in the database; press Refresh.")
        return
    cats = _categories(db, stage, dataset)
    with st.container(border=True):
        st.subheader("Your verdict (blind: no judge's or other person's label is shown until you answer)")
        render.show_item(case)
    with st.form(f"label_{item_id}"):
        choice = st.radio("Your label", cats, index=None, horizontal=True)
        note = st.text_input("Note (optional)")
        submitted = st.form_submit_button("Save label", type="primary")
    if submitted:
        if choice is None:
            st.error("Pick a label first.")
            return
        queue_meta = {"order": order, "seed": seed, "rank": int(row["rank"]), "stratum": str(row["stratum"]),
                      "best_judge": best}
        label = annotate.make_label(item_id=item_id, name=name, label=str(choice), categories=cats, revealed=False,
                                    run_id=st.session_state["annotate_run"].run_id, note=note, queue=queue_meta)
        result = _save(db, label)
        st.session_state["annotate_revealed"] = {"item_id": item_id, "label": str(choice), "stage": stage,
                                                 "dataset": dataset, "categories": cats,
                                                 "pending": result.pending > 0}
        st.rerun()


def _reveal(db: str, name: str, revealed: dict[str, Any]) -> None:
    item_id = revealed["item_id"]
    pending = {(e.label.item_id, e.label.condition) for e in annotate.pending(db) if e.label.rater == name}
    status = "pending — written when the database frees" if (item_id, "") in pending else "saved"
    st.success(f"Your label: **{render.md(revealed['label'])}** ({status}).")
    if st.button("Next item →", type="primary", key=f"next_{item_id}"):
        st.session_state.pop("annotate_revealed", None)
        st.rerun()
    case = render._case(db, item_id)
    with st.container(border=True):
        st.subheader("How judges and other people labelled it")
        try:
            others = _others_labels(db, item_id, name)
        except StoreError as exc:
            st.warning(f"The other labels cannot be read right now: {render.md(exc)}")
            others = None
        if others is not None:
            if others.empty:
                st.caption("Nobody else has labelled this item yet.")
            else:
                render.show_labels(others)
        if case is not None:
            with st.expander("The item again"):
                render.show_item(case)
    with st.expander("Change your mind after seeing these? (stored apart, as a label given after the reveal)"):
        with st.form(f"revise_{item_id}"):
            choice = st.radio("Label after seeing the others", revealed["categories"], index=None, horizontal=True)
            note = st.text_input("Note (optional)", key=f"revise_note_{item_id}")
            if st.form_submit_button("Save the after-reveal label") and choice is not None:
                label = annotate.make_label(item_id=item_id, name=name, label=str(choice),
                                            categories=revealed["categories"], revealed=True,
                                            run_id=st.session_state["annotate_run"].run_id, note=note)
                result = _save(db, label)
                st.info(f"Stored under condition '{SHOWN_LLM}' ({'pending' if result.pending else 'saved'}); "
                        "it never counts as a blind label.")


__all__ = ["annotate_page", "flush_pending"]
