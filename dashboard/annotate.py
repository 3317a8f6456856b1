"""Collect human verdicts from the dashboard: the queue of items to label, and labels that are never lost.

No Streamlit here: the Annotate page (:mod:`personagap.dashboard.annotate_page`) calls these functions.

**Nothing lost.** DuckDB lets one process write a file at a time, and a judge run may hold it. So a
label is first appended to a spool beside the database (``DB.pending-labels.jsonl``, one JSON line per
label, written and fsync'ed under a file lock) and then written to the store in one short transaction
when the file is free (:func:`flush`); the spool is emptied only after that transaction committed. The
store's key (item, rater, condition) makes the write idempotent: a label flushed twice (a crash between
commit and emptying the spool) or submitted twice is stored once.

**Blind by default.** A label given before its author saw any judge's or other human's label on the item
is stored under :data:`~personagap.analysis.comparable.BLIND`; one given after the reveal under
:data:`~personagap.analysis.comparable.SHOWN_LLM`, so the comparable-labels rule keeps them apart.

**Queue orders** (:data:`ORDERS`) are computed over every item of the chosen stage and dataset, then the
items this person already labelled are dropped, so the order of what is left never shifts under them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np
import numpy.typing as npt
import orjson
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field, ValidationError

from personagap import store
from personagap.analysis.comparable import BLIND, OTHER_CATEGORY, SHOWN_LLM
from personagap.dashboard import access
from personagap.dashboard.queries import read_only
from personagap.records import PAIRWISE_LABELS, RELEVANCE_LABELS, VERIFICATION_LABELS, Label, Run
from personagap.store import annotate_queue as queue_store
from personagap.store.annotate_queue import write_annotations

Order = Literal["disagreement", "uncertain", "random", "routed", "audit"]
ORDERS: dict[str, str] = {
    "disagreement": "judges disagree with each other most",
    "uncertain": "the best judge is least certain",
    "random": "stratified random sample (unbiased estimates)",
    "routed": "routed to people (by personagap route)",
    "audit": "audit of the judge's kept items (by personagap route --audit N)",
}
#: Labels a stage takes when the dataset has none stored yet to learn its categories from.
STAGE_CATEGORIES: dict[str, tuple[str, ...]] = {
    "extraction": VERIFICATION_LABELS, "relevance": RELEVANCE_LABELS, "response": PAIRWISE_LABELS,
}
MAX_NAME = 80
MAX_NOTE = 2000
SPOOL_SUFFIX = ".pending-labels.jsonl"
#: Numeric certainty a judge may have stored in a label's meta (first found wins).
CERTAINTY_KEYS = ("confidence", "certainty", "probability")


class AnnotateError(ValueError):
    """An annotator's input that cannot be stored (empty name, label outside the categories, ...)."""


class PendingLabel(BaseModel):
    """One spooled label with the run row of the session that gave it."""

    id: str = Field(description="Unique per submission (for the record; the store's key decides identity).")
    label: Label
    run: Run


@dataclass(frozen=True)
class FlushResult:
    """What one :func:`flush` did."""

    written: int
    pending: int
    error: str | None = None


# --------------------------------------------------------------------------- names, categories, records

def clean_name(name: str) -> str:
    """The annotator name as stored (stripped); :class:`AnnotateError` when empty or too long."""
    name = " ".join(name.split())
    if not name:
        raise AnnotateError("enter your name first")
    if len(name) > MAX_NAME:
        raise AnnotateError(f"a name has at most {MAX_NAME} characters")
    return name


def sort_categories(values: Sequence[str]) -> list[str]:
    """Categories in a stable reading order: numbers numerically, known vocabularies in their order."""
    values = list(dict.fromkeys(values))
    for vocab in STAGE_CATEGORIES.values():
        if set(values) <= set(vocab):
            return [v for v in vocab if v in values]
    try:
        return sorted(values, key=float)
    except ValueError:
        return sorted(values)


def session_run(name: str, *, started: Any = None) -> Run:
    """A new run row for one annotator's session on the Annotate page (one per page session and name)."""
    started = started or store.now()
    return Run(run_id=f"annotate-{uuid.uuid4().hex[:16]}", kind="annotate", source="dashboard Annotate page",
               rater=name, git_sha=store.git_sha(), started_at=started, finished_at=started, status="finished",
               parameters={"tool": "annotate", "annotator": name})


def make_label(*, item_id: str, name: str, label: str, categories: Sequence[str], revealed: bool, run_id: str,
               note: str | None = None, queue: dict[str, Any] | None = None) -> Label:
    """The human label an annotator gave, under the blind or the shown-llm condition.

    Args:
        item_id: The item labelled.
        name: The annotator (the rater).
        label: One of ``categories``.
        categories: The stage's categories on this dataset.
        revealed: Whether the annotator had seen judges' or other humans' labels on this item first.
        run_id: The annotator session's run.
        note: Optional free text (stored as the label's reason).
        queue: How the item was served (order, seed, rank, stratum), kept in the label's meta.
    """
    if label not in categories:
        raise AnnotateError(f"label {label!r} is not one of {', '.join(categories)}")
    note = (note or "").strip()
    if len(note) > MAX_NOTE:
        raise AnnotateError(f"a note has at most {MAX_NOTE} characters")
    meta: dict[str, Any] = {"source": "annotate", "labelled_at": store.now().isoformat(timespec="seconds")}
    if queue:
        meta["queue"] = queue
    return Label(item_id=item_id, rater=clean_name(name), rater_kind="human",
                 condition=SHOWN_LLM if revealed else BLIND, label=label, raw=label, reason=note or None,
                 run_id=run_id, meta=meta)


# --------------------------------------------------------------------------- the spool

def spool_path(db: str | Path) -> Path:
    """The spool file of pending labels beside the database."""
    return Path(str(db) + SPOOL_SUFFIX)


@contextlib.contextmanager
def _spool_lock(db: str | Path) -> Iterator[None]:
    # One lock file for every process and thread touching the spool (flock is per open file description).
    path = Path(str(spool_path(db)) + ".lock")
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_spool(db: str | Path) -> list[PendingLabel]:
    path = spool_path(db)
    if not path.exists():
        return []
    entries = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            entries.append(PendingLabel.model_validate_json(line))
        except ValidationError:
            # Only a crash in the middle of an append leaves a torn line; its label was never confirmed.
            continue
    return entries


def submit(db: str | Path, label: Label, run: Run) -> PendingLabel:
    """Append a label to the spool (durably) and return the spooled entry; :func:`flush` writes it."""
    entry = PendingLabel(id=uuid.uuid4().hex, label=label, run=run)
    line = entry.model_dump_json().encode() + b"\n"
    with _spool_lock(db), open(spool_path(db), "ab") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    return entry


def has_pending(db: str | Path) -> bool:
    """Cheap check (no lock, no parsing) whether the spool holds anything to flush."""
    path = spool_path(db)
    return path.exists() and path.stat().st_size > 0


def pending(db: str | Path) -> list[PendingLabel]:
    """Labels submitted but not yet in the store."""
    with _spool_lock(db):
        return _read_spool(db)


def flush(db: str | Path, *, wait_seconds: float = 0.5) -> FlushResult:
    """Write every spooled label to the store in one transaction, if the file frees within ``wait_seconds``.

    Safe to call from any thread or process at any time: the spool lock lets one flush run at a time,
    and labels stay in the spool until their transaction committed.

    Returns:
        How many labels were written and how many are still pending (with why, when the write failed).
    """
    with _spool_lock(db):
        entries = _read_spool(db)
        if not entries:
            return FlushResult(0, 0)
        # Last submission wins per store key: the store keeps one label per (item, rater, condition).
        labels = {(e.label.item_id, e.label.rater, e.label.condition): e.label for e in entries}
        runs: dict[str, Run] = {}
        for e in entries:
            run = runs.get(e.run.run_id, e.run)
            finished = max(run.finished_at or run.started_at, e.run.finished_at or e.run.started_at)
            runs[e.run.run_id] = run.model_copy(update={"finished_at": finished})
        with access.writing(timeout=wait_seconds) as free:
            if not free:
                return FlushResult(0, len(labels), "the dashboard is reading the database")
            try:
                con = store.connect(db, wait_seconds=wait_seconds)
            except (store.StoreError, duckdb.Error) as exc:
                return FlushResult(0, len(labels), _short(exc))
            try:
                write_annotations(con, list(runs.values()), list(labels.values()))
            except duckdb.Error as exc:
                return FlushResult(0, len(labels), _short(exc))
            finally:
                con.close()
        # Committed: now (and only now) the spool may forget them. Nobody appended meanwhile (we hold the lock).
        spool_path(db).write_bytes(b"")
        return FlushResult(len(labels), 0)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "lock" in text.lower():
        return "another process (a judge run or an import) is writing the database"
    return text[:200]


# --------------------------------------------------------------------------- the queue

def _unit(*parts: object) -> float:
    # A seeded uniform number per item that does not depend on which other items exist.
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _units(seed: object, items: Sequence[str]) -> npt.NDArray[np.float64]:
    """:func:`_unit` of ``(seed, item)`` for every item: one hash per item from a copy of the seed's prefix."""
    prefix = hashlib.blake2b(f"{seed}\x1f".encode(), digest_size=8)
    digests = bytearray()
    for item in items:
        h = prefix.copy()
        h.update(str(item).encode())
        digests += h.digest()
    # uint64 -> float64 rounds to nearest like int / 2**64; the division by a power of two is exact.
    return np.frombuffer(bytes(digests), dtype=">u8").astype(np.float64) / 2**64


def _certainty(meta: Any) -> float | None:
    # A judge's stated certainty, on whatever scale it used (0-1, 1-5, 0-100, as a number or numeric text).
    if not isinstance(meta, str) or not meta:
        return None
    try:
        data = orjson.loads(meta)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    for key in CERTAINTY_KEYS:
        value = data.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, str):
            try:
                value = float(value.strip().rstrip("%"))
            except ValueError:
                continue
        if isinstance(value, int | float) and math.isfinite(value):
            # A probability of the chosen label is as certain at 0.1 as at 0.9 of the other one.
            return float(abs(2 * value - 1)) if key == "probability" and 0 <= value <= 1 else float(value)
    return None


def _modal(labels: pd.DataFrame) -> pd.DataFrame:
    """Per item (index ``item_id``, sorted): its most common ``label``, its count ``top``, ``total``, ``share``.

    A tie goes to the label that sorts first (code-point order, as the store's SQL sorts text): the result does
    not depend on row order. Vectorised over integer codes: never a Python call per item.
    """
    item_codes, item_names = pd.factorize(labels["item_id"], sort=True)
    label_codes, label_names = pd.factorize(labels["label"].astype(str), sort=True)
    width = max(len(label_names), 1)
    pairs, n = np.unique(item_codes.astype(np.int64) * width + label_codes, return_counts=True)
    item, label = pairs // width, pairs % width
    total = np.bincount(item, weights=n, minlength=len(item_names)).astype(np.int64)
    order = np.lexsort((label, -n, item))  # per item: the most labels first, then the label sorting first
    top = order[np.r_[True, item[order][1:] != item[order][:-1]]]
    return pd.DataFrame({"label": np.asarray(label_names, dtype=object)[label[top]].astype(str),
                         "top": n[top].astype(np.int64), "total": total[item[top]],
                         "share": n[top] / total[item[top]]},
                        index=pd.Index(np.asarray(item_names, dtype=object)[item[top]], name="item_id"))


def _certainties(meta: pd.Series) -> npt.NDArray[np.float64]:
    """:func:`_certainty` of every meta text, parsed once per distinct text (NaN where none is stated)."""
    codes, uniques = pd.factorize(meta)
    values = np.array([_certainty(u) for u in uniques] + [None], dtype=float)  # code -1 (missing) -> the last
    return np.asarray(values[codes], dtype=np.float64)


def _twice_ranks(values: npt.NDArray[np.float64], counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Twice ``Series.rank()`` (an integer) of a multiset given as ``values`` (no NaN) with ``counts``.

    Twice the count below a value, plus its count, plus one.
    """
    distinct, inverse = np.unique(values, return_inverse=True)
    per = np.bincount(inverse, weights=counts).astype(np.int64)
    below = np.concatenate([[0], np.cumsum(per)[:-1]]).astype(np.int64)
    return np.asarray((2 * below + per + 1)[inverse], dtype=np.int64)


def _mean_rank(twice_sum: Any, n: Any, ranked: int) -> npt.NDArray[np.float64]:
    """The mean percentile rank of ``n`` answers whose twice-ranks sum to ``twice_sum`` among ``ranked`` answers.

    One division of integers (exact below 2**53), so it does not depend on the order the ranks are summed in
    (NaN where ``n`` is 0).
    """
    twice, count = np.asarray(twice_sum, dtype=np.int64), np.asarray(n, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, twice / (2 * ranked * count), np.nan)


def _text_or_none(values: pd.Series) -> pd.Series:
    values = values.astype(object)
    return values.where(values.notna(), None)


def item_scores(judge_labels: pd.DataFrame, best_judge: str | None) -> pd.DataFrame:
    """The per-item counts every queue order reads, from per-label rows (the oracle of :func:`queue_scores`).

    Columns as :data:`personagap.store.annotate_queue.SCORE_COLUMNS` plus ``certainty`` (the mean percentile
    rank of the best judge's stated certainties among its own answers, :func:`_mean_rank`; NaN where it states
    none), one row per
    item with a comparable judge label, sorted by ``item_id``.
    """
    labels = judge_labels[judge_labels["label"].notna()] if not judge_labels.empty else judge_labels
    if labels.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("item_id", "best_label") else np.int64)
                             for c in queue_store.SCORE_COLUMNS}).assign(certainty=pd.Series(dtype=float))
    every = _modal(labels)
    scores = pd.DataFrame({"total": every["total"], "top": every["top"]}, index=every.index)
    best = labels[labels["rater"] == best_judge] if best_judge else labels.iloc[0:0]
    best_top = _modal(best) if not best.empty else pd.DataFrame({"label": [], "top": [], "total": []})
    scores["best_n"] = best_top["total"].reindex(scores.index).fillna(0).astype(np.int64)
    scores["best_top"] = best_top["top"].reindex(scores.index).fillna(0).astype(np.int64)
    scores["best_label"] = _text_or_none(best_top["label"].reindex(scores.index))
    others = labels[labels["rater"] != best_judge] if best_judge else labels
    others = others.assign(best=others["item_id"].map(best_top["label"])).dropna(subset=["best"])
    grouped = (others["label"] != others["best"]).groupby(others["item_id"])
    scores["other_n"] = grouped.size().reindex(scores.index).fillna(0).astype(np.int64)
    scores["other_diff"] = grouped.sum().reindex(scores.index).fillna(0).astype(np.int64)
    scores["certainty"] = np.nan
    if not best.empty and "meta" in best:
        values = best.assign(c=_certainties(best["meta"])).dropna(subset=["c"])
        if not values.empty:
            # Percentile rank within the judge's own answers: comparable whatever scale the judge used.
            values["c"] = (values["c"].rank() * 2).astype(np.int64)
            grouped = values.groupby("item_id")["c"]
            twice, n = grouped.sum().reindex(scores.index), grouped.size().reindex(scores.index)
            scores["certainty"] = _mean_rank(twice.fillna(0), n.fillna(0), len(values))
    return scores.rename_axis("item_id").reset_index()


def queue_scores(db: str | Path, stage: str, dataset: str, best_judge: str | None) -> pd.DataFrame:
    """:func:`item_scores` counted in SQL, for every item of the stage and dataset (unlabelled ones count 0).

    Only the distinct meta texts of the best judge pass through Python (for :func:`_certainty`); their ranks are
    computed from their counts (:func:`_twice_ranks`) and summed per item in SQL.
    """
    with read_only(db) as con:
        values, ranked = None, 0
        if best_judge:
            metas = queue_store.best_judge_metas(con, stage, dataset, best_judge)
            metas["value"] = _certainties(metas["meta"])
            metas = metas.dropna(subset=["value"])
            if not metas.empty:
                ranked = int(metas["n"].sum())
                metas["value"] = _twice_ranks(metas["value"].to_numpy(dtype=float), metas["n"].to_numpy(np.int64))
                values = metas[["meta", "value"]].reset_index(drop=True)
        scores = queue_store.queue_item_scores(con, stage, dataset, best_judge or "", values)
    scores["best_label"] = _text_or_none(scores["best_label"])
    scores["certainty"] = _mean_rank(scores.pop("value_sum"), scores.pop("value_n"), ranked)
    return scores


@dataclass(frozen=True)
class Queue:
    """What every order of one queue reads, per item (numpy arrays in the items' order): :func:`prepare_queue`.

    Built once per store state on the Annotate page and ordered per order and seed (:func:`order_queue`); the
    seeded tie-breaks are kept per seed (``ties``), so the orders of one seed hash every item once.
    """

    items: pd.api.extensions.ExtensionArray
    """The item ids (pandas' string array: reordered by ``take``, never converted from Python strings again)."""
    total: npt.NDArray[np.float64]
    top: npt.NDArray[np.float64]
    best_n: npt.NDArray[np.float64]
    best_top: npt.NDArray[np.float64]
    other_n: npt.NDArray[np.float64]
    other_diff: npt.NDArray[np.float64]
    certainty: npt.NDArray[np.float64]
    best_label: npt.NDArray[np.object_]
    ties: dict[object, npt.NDArray[np.float64]] = field(default_factory=dict, compare=False)

    def tie(self, seed: object) -> npt.NDArray[np.float64]:
        """:func:`_units` of every item under ``seed`` (computed once per seed)."""
        if seed not in self.ties:
            while len(self.ties) >= _HELD_SEEDS:  # (16 MB a seed at 2 * 10^6 items)
                self.ties.pop(next(iter(self.ties)))
            self.ties[seed] = _units(seed, self.items.to_numpy(dtype=object))  # (iterating Arrow is ~3x slower)
        return self.ties[seed]


_HELD_SEEDS = 4
"""Seeds whose tie-breaks a :class:`Queue` keeps (the latest asked for)."""


def prepare_queue(items: Sequence[str], judge_labels: pd.DataFrame, best_judge: str | None = None) -> Queue:
    """The per-item inputs of every queue order (see :func:`order_items` for the arguments)."""
    scores = judge_labels if "total" in judge_labels else item_scores(judge_labels, best_judge)
    given = np.asarray(list(items), dtype=object)
    ids = scores["item_id"]
    if len(ids) == len(given) and _distinct(ids) and bool((ids.to_numpy(dtype=object) == given).all()):
        # The store's scores of exactly these items, in their order (queue_inputs): read as they are.
        unique = ids.array if isinstance(ids.dtype, pd.StringDtype) else pd.array(given, dtype="str")
        scores = scores.set_index("item_id")
    else:
        unique = pd.array(pd.unique(given), dtype="str")
        scores = scores.set_index("item_id").reindex(pd.Index(unique))

    return _queue_of(unique, scores)


def _distinct(ids: pd.Series) -> bool:
    """Whether no item id occurs twice: strictly increasing (as the store's scores come) or else by hashing."""
    if isinstance(ids.dtype, pd.StringDtype) and ids.dtype.storage == "pyarrow" and len(ids) > 1:
        # One comparison per neighbour in Arrow: at 2 * 10^6 ids, hashing them all took ~1.5 s on a loaded machine.
        values = pa.array(ids.array)
        if pc.all(pc.greater(values[1:], values[:-1])).as_py():
            return True
    return bool(ids.is_unique)


def _queue_of(unique: pd.api.extensions.ExtensionArray, scores: pd.DataFrame) -> Queue:
    """The :class:`Queue` of items ``unique`` from their scores (indexed by item id in the same order)."""

    def floats(column: str) -> npt.NDArray[np.float64]:
        return np.asarray(scores[column].to_numpy(dtype=float, na_value=np.nan), dtype=np.float64)

    return Queue(items=unique, total=np.nan_to_num(floats("total"), nan=0.0),
                 top=floats("top"), best_n=np.nan_to_num(floats("best_n"), nan=0.0), best_top=floats("best_top"),
                 other_n=np.nan_to_num(floats("other_n"), nan=0.0), other_diff=floats("other_diff"),
                 certainty=floats("certainty"),
                 best_label=np.asarray(scores["best_label"].astype(object).to_numpy(), dtype=object))


def order_items(items: Sequence[str], judge_labels: pd.DataFrame, order: Order, *, best_judge: str | None = None,
                seed: int = 0, routed: Sequence[str] | None = None,
                audit: Sequence[str] | None = None) -> pd.DataFrame:
    """Order every item of a stage and dataset for annotation (pure).

    Args:
        items: Every item id of the chosen stage and dataset.
        judge_labels: Comparable judge labels on them: ``item_id``, ``rater``, ``label`` (parsed only) and
            optionally ``meta`` (JSON text; a numeric ``confidence``/``certainty``/``probability`` is used); or
            their per-item counts (:func:`item_scores`, :func:`queue_scores` -- of the same ``best_judge``).
        order: ``disagreement``: share of judge labels that differ from the item's most common judge label,
            highest first. ``uncertain``: the best judge's stored certainty (as a percentile rank among its own
            answers, so any scale works), lowest first; without one, how
            inconsistent the best judge is across its conditions (orders, with/without profile), then how many
            other judges contradict its most common label. ``random``: a seeded random order stratified by the
            best judge's most common label (a tie: the label sorting first; every stratum interleaved in
            proportion to its size, so each prefix is a stratified sample).
            ``routed``: only the ``routed`` items, in a seeded random order -- so the routed items people have
            labelled at any point are a random sample of them, which the routed estimate's correction assumes
            (:mod:`personagap.analysis.routing`).
            ``audit``: only the ``audit`` items, in their draw order (the draw is a random permutation of the kept
            items, so every prefix people have labelled is a simple random sample of them, which the audited
            human rate assumes).
        best_judge: The judge with the highest agreement with humans on this dataset (``uncertain``/``random``).
        seed: Seed of the random order and of every tie-break.
        routed: The item ids the stored routing decision left to people (:func:`routed_items`; ``routed`` only).
        audit: The stored audit draw's item ids in draw order (:func:`audit_items`; ``audit`` only).

    Returns:
        One row per item, in queue order: ``item_id``, ``score`` (what the order sorts by), ``stratum``, ``rank``.
    """
    return order_queue(prepare_queue(items, judge_labels, best_judge), order, seed=seed, routed=routed, audit=audit)


def order_queue(queue: Queue, order: Order, *, seed: int = 0, routed: Sequence[str] | None = None,
                audit: Sequence[str] | None = None) -> pd.DataFrame:
    """:func:`order_items` of a prepared :class:`Queue` (the same rows).

    The sorts are numpy's stable ``lexsort`` over the keys ``order_items`` names, the first key most significant
    (a descending key negated): no frame of every item is sorted or grouped (at 10^7 labels, 2 * 10^6 items,
    pandas' sorts and group-bys took ~4 s of CPU per order).
    """
    n = len(queue.items)
    tie = queue.tie(seed)
    has_best = queue.best_n > 0
    strata, codes = pd.array([""], dtype=queue.items.dtype), np.zeros(n, dtype=np.int64)
    if order == "disagreement":
        if not (queue.total > 0).any():
            score = np.zeros(n)
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                share = 1.0 - queue.top / queue.total
            score = np.where(queue.total > 0, share, -1.0)
        taken = np.lexsort((tie, -score))
    elif order == "uncertain":
        with np.errstate(divide="ignore", invalid="ignore"):
            inconsistency = np.where(has_best, 1.0 - queue.best_top / queue.best_n, np.nan)
            contradicted = np.where(has_best & (queue.other_n > 0), queue.other_diff / queue.other_n, 0.0)
        certainty = np.where(has_best, queue.certainty, np.nan)
        score = 1.0 - certainty
        score = np.where(np.isnan(score), inconsistency, score)
        # A missing score sorts last, as pandas puts NaN after every number in either direction.
        taken = np.lexsort((tie, -contradicted, -np.where(np.isnan(score), -np.inf, score), ~has_best))
        score = np.nan_to_num(score, nan=0.0, posinf=np.inf, neginf=-np.inf)
    elif order in ("routed", "audit"):
        return _order_subset(queue, order, tie, routed, audit)
    elif order == "random":
        codes, strata = _strata(queue.best_label, has_best)
        strata = pd.array(strata, dtype=queue.items.dtype)
        by_stratum = np.lexsort((tie, codes))
        size = np.bincount(codes, minlength=int(codes.max()) + 1 if n else 0).astype(np.int64)
        start = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
        grouped = codes[by_stratum]
        position = np.arange(n, dtype=np.int64) - start[grouped]
        # Proportional interleaving: the k-th item of a stratum of n sits at (k + u) / n of the queue.
        placed = (position + tie[by_stratum]) / size[grouped]
        taken = by_stratum[np.lexsort((tie[by_stratum], placed))]
        score = np.empty(n)
        score[by_stratum] = placed
    else:
        raise AnnotateError(f"unknown queue order {order!r}; one of {', '.join(ORDERS)}")
    return pd.DataFrame({"item_id": queue.items.take(taken), "score": score[taken],
                         "stratum": strata.take(codes[taken]), "rank": np.arange(n, dtype=np.int64)})


def _strata(best_label: npt.NDArray[np.object_], has_best: npt.NDArray[np.bool_]) -> tuple[
        npt.NDArray[np.int64], list[str]]:
    """Each item's stratum of the ``random`` order as a code into the strata's names, sorted.

    The stratum is the best judge's most common label as text, ``(no label)`` where it has none, ``(all)`` for
    every item when it labelled none. Factorized once per distinct label, not per item's text (2 * 10^6 items).
    """
    n = len(has_best)
    if not has_best.any():
        return np.zeros(n, dtype=np.int64), ["(all)"]
    label_codes, labels = pd.factorize(best_label)  # a missing label is code -1: the last entry of ``texts``
    texts = [str(x) for x in labels] + [str(None)]
    names = sorted({texts[c] for c in np.unique(label_codes[has_best])} | ({"(no label)"} if not has_best.all()
                                                                            else set()))
    place = {name: k for k, name in enumerate(names)}
    lookup = np.array([place.get(t, -1) for t in texts], dtype=np.int64)
    codes = np.where(has_best, lookup[label_codes], place.get("(no label)", -1))
    return np.asarray(codes, dtype=np.int64), names


def _order_subset(queue: Queue, order: Order, tie: npt.NDArray[np.float64], routed: Sequence[str] | None,
                  audit: Sequence[str] | None) -> pd.DataFrame:
    """The ``routed`` and ``audit`` orders: a subset of the items (see :func:`order_items`)."""
    frame = pd.DataFrame({"item_id": queue.items, "tie": tie})
    frame["stratum"] = ""
    if order == "routed":
        if routed is None:
            raise AnnotateError("no routing decision is stored for this dataset: run `personagap route` first")
        frame = frame[frame["item_id"].map(dict.fromkeys(routed, True)).notna()].sort_values("tie")
        frame["score"] = frame["tie"]
    else:
        if not audit:
            raise AnnotateError("no audit draw is stored for this dataset: run `personagap route ... --audit N` first")
        position = {item: k for k, item in enumerate(audit)}
        frame = frame[frame["item_id"].map(dict.fromkeys(audit, True)).notna()]
        frame = frame.assign(score=frame["item_id"].map(position).astype(float)).sort_values("score")
    frame = frame.reset_index(drop=True)
    frame["rank"] = range(len(frame))
    return frame[["item_id", "score", "stratum", "rank"]]


def queue_inputs(db: str | Path, stage: str, dataset: str, *,
                 meta_of: str | None = None) -> tuple[list[str], pd.DataFrame]:
    """Every item id of a stage and dataset, and what :func:`order_items` orders them by.

    ``meta_of``: the best judge (``""``: none): the per-item counts of :func:`queue_scores`, counted in SQL (what
    the Annotate page reads); None: every comparable judge label with its meta (per-label rows, for tests).
    """
    if meta_of is not None:
        scores = queue_scores(db, stage, dataset, meta_of or None)
        return scores["item_id"].tolist(), scores
    with read_only(db) as con:
        return (queue_store.stage_items(con, stage, dataset),
                queue_store.queue_judge_labels(con, stage, dataset))


def read_queue(db: str | Path, stage: str, dataset: str, best_judge: str | None) -> Queue:
    """The :class:`Queue` of a stage and dataset from the store's per-item counts (:func:`queue_scores`).

    What the Annotate page orders: :func:`queue_inputs` with ``meta_of=best_judge`` then :func:`prepare_queue`, but
    the item ids stay the store's (unique and sorted by the query): no list of 2 * 10^6 Python strings is made.
    """
    scores = queue_scores(db, stage, dataset, best_judge)
    ids = scores["item_id"]
    unique = ids.array if isinstance(ids.dtype, pd.StringDtype) else pd.array(ids.to_numpy(dtype=object), dtype="str")
    return _queue_of(unique, scores.set_index("item_id"))


def route_decision(db: str | Path, stage: str, dataset: str) -> dict[str, Any] | None:
    """The stored routing decision of a stage and dataset (judge, threshold, target, routed ids), or None."""
    from personagap.store.routing import load_route

    with read_only(db) as con:
        return load_route(con, stage, dataset)


def audit_items(db: str | Path, stage: str, dataset: str) -> list[str] | None:
    """The stored audit draw of a stage and dataset (kept items for people to label), in draw order, or None."""
    from personagap.store.route_audit import load_audit

    with read_only(db) as con:
        draw = load_audit(con, stage, dataset)
    return None if draw is None else list(draw.item_ids)


def routed_items(db: str | Path, stage: str, dataset: str) -> list[str] | None:
    """The item ids the stored routing decision of a stage and dataset left to people, or None (no decision)."""
    decision = route_decision(db, stage, dataset)
    return None if decision is None else [str(i) for i in decision["routed"]]


def route_caption(decision: dict[str, Any]) -> str:
    """One line saying who routed the queue and why (the Annotate page shows it above the routed queue)."""
    threshold = decision.get("threshold")
    target = decision.get("target") or {}
    kept = (f"its labels are kept where its confidence is at least {threshold:g}" if threshold is not None
            else "no confidence reached the target, so every item is left to people")
    return (f"Routed by {decision['judge']} (target {target.get('metric', '?')} >= {target.get('value', '?')}): "
            f"{kept}; {len(decision['routed']):,} items are left to people, served in a seeded random order so "
            "that the routed estimate stays unbiased at any point.")


def stored_by(db: str | Path, name: str, stage: str, dataset: str) -> set[str]:
    """Items of a stage and dataset this person's labels (any condition) are stored on."""
    with read_only(db) as con:
        return queue_store.stored_by(con, name, stage, dataset)


def pending_items(db: str | Path, name: str) -> set[str]:
    """Items this person labelled whose labels are still in the spool."""
    return {e.label.item_id for e in pending(db) if e.label.rater == name}


def categories(db: str | Path, stage: str, dataset: str) -> list[str]:
    """The categories an annotator chooses from: the dataset record's scale, the one reports score over.

    The scale comes from :func:`personagap.datasets.dataset_record` (declared categories, ordinal levels low to
    high, A/B/tie for pairwise items, else :func:`~personagap.analysis.comparable.categories_for`'s rule), so
    Annotate never offers a category the reports do not score or leaves out one they do. The placeholder
    :data:`~personagap.analysis.comparable.OTHER_CATEGORY` (a scale of which one category is known) is no label
    a person can give; where the record knows fewer than two real categories (no one has labelled the dataset
    yet), the stage's vocabulary is offered.
    """
    from personagap.datasets import dataset_record

    with read_only(db) as con:
        record = dataset_record(con, stage, dataset)
    found = [c for c in (record.scale.categories if record else ()) if c != OTHER_CATEGORY]
    if len(found) >= 2:
        return found
    vocab = list(STAGE_CATEGORIES.get(stage, RELEVANCE_LABELS))
    return found + [c for c in vocab if c not in found]


def choices(db: str | Path) -> pd.DataFrame:
    """(stage, dataset) pairs that have items, with item counts, for the page's pickers."""
    with read_only(db) as con:
        return queue_store.item_choices(con)


def others_labels(db: str | Path, item_id: str, name: str) -> pd.DataFrame:
    """Every other rater's labels on one item (what the reveal shows), judges and humans, failures included."""
    with read_only(db) as con:
        return queue_store.others_labels(con, item_id, name)
