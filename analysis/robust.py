"""Prevalence-robust agreement: AC1, PABAK, MCC, balanced accuracy, prevalence and bias indices.

Kappa answers "can this judge replace the humans?" badly when one label dominates: at a 19% human
"yes" rate a judge that always says "no" is 81% accurate with kappa 0, and a judge that agrees on 90%
of items can still have a kappa near zero (the "kappa paradox", Feinstein & Cicchetti 1990). The
figures here sit beside kappa so a reader can see *why* kappa is low:

* **Gwet's AC1** — chance agreement from the pooled class shares ``pi_k`` as
  ``sum_k pi_k (1 - pi_k) / (K - 1)``, which stays small when one class dominates (Gwet 2008).
* **PABAK** — prevalence- and bias-adjusted kappa, ``(K * p_o - 1) / (K - 1)`` (Byrt, Bishop & Carlin
  1993; for K classes it is Brennan–Prediger's coefficient).
* **Matthews correlation** (multi-class: Gorodkin's R_K, as scikit-learn) and **balanced accuracy**
  (mean per-class recall of the human classes, as scikit-learn).
* **Prevalence index** ``(both yes - both no) / n`` and **bias index** ``(judge yes - human yes) / n``
  for binary labels (Byrt et al. 1993). Our bias index is signed: positive = the judge says "yes"
  more often than humans (Byrt's BI is its absolute value). With them kappa is exactly
  ``(PABAK - PI^2 + BI^2) / (1 - PI^2 + BI^2)``, which the tests check.

Every figure is a function of confusion tables ``(..., K, K)`` (``table[h, j]``: human class ``h``,
judge class ``j``, as in :mod:`personagap.analysis.agreement`) registered with
:func:`~personagap.analysis.agreement.register_metric`, so
``estimate(tables, "ac1")`` gives the same user-clustered CI as kappa (the one CI rule,
:func:`~personagap.analysis.agreement.cluster_estimate`).

The tidy-frame helpers (:func:`individual_humans`, :func:`human_reference`, :func:`judge_labels`) serve callers
that hold labels in memory: the alternative-annotator test (on the items several humans labelled, read from the
store), ``plan`` on a frame and :func:`~personagap.analysis.aggregated.frame_counts`; which labels count is decided
by :mod:`personagap.analysis.comparable` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from personagap.analysis.agreement import (
    FloatArray,
    ci_list,
    cluster_tables,
    encode,
    estimates,
    get_metric,
    indexed_tables,
    register_metric,
)
from personagap.analysis.arrays import safe_div as _div
from personagap.analysis.codes import sorted_codes
from personagap.analysis.comparable import (
    SHOWN_LLM_RATING,
    comparable_judge_mask,
    individual_human_mask,
    judge_display,
    one_vote_per_rater,
    reference_labels,
)
from personagap.vocabulary import HumanSet

PANEL_METRICS: tuple[str, ...] = ("ac1", "pabak", "mcc", "balanced_accuracy")
"""Panel figures reported with a CI (``<name>_ci``)."""
PANEL_POINT_ONLY: tuple[str, ...] = ("prevalence_index", "bias_index")
"""Panel figures reported as a point value only (binary tables; None for K > 2)."""
BASE_RATE_JUDGE = "base-rate (human majority class)"
"""Display name of the chance-level row: a judge that always gives the humans' most common label."""


# --------------------------------------------------------------------------- metrics on tables

def _parts(tables: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, int]:
    # n, observed agreement count, human (row) totals, judge (column) totals, K.
    t = np.asarray(tables, dtype=float)
    if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
        raise ValueError(f"confusion tables must be (..., K, K), got shape {t.shape}")
    return t.sum(axis=(-2, -1)), np.trace(t, axis1=-2, axis2=-1), t.sum(axis=-1), t.sum(axis=-2), t.shape[-1]


@register_metric("ac1", bounds=(-1.0, 1.0), higher_is_better=True, binary_only=False,
                 description="Gwet's AC1: agreement beyond chance, with chance that stays small when one label "
                             "dominates (robust to prevalence).")
def ac1_from_tables(tables: FloatArray) -> FloatArray:
    """Gwet's AC1 of confusion tables ``(..., K, K)``; NaN with no items or K < 2.

    ``pe = sum_k pi_k (1 - pi_k) / (K - 1)`` with ``pi_k`` the share of class ``k`` over both raters'
    labels; ``AC1 = (po - pe) / (1 - pe)``.
    """
    n, agree, rows, cols, k = _parts(tables)
    if k < 2:
        return np.full(np.shape(n), np.nan)
    pi = _div(rows + cols, 2.0 * n[..., None])
    pe = (pi * (1.0 - pi)).sum(axis=-1) / (k - 1)
    return _div(_div(agree, n) - pe, 1.0 - pe)


@register_metric("pabak", bounds=(-1.0, 1.0), higher_is_better=True, binary_only=False,
                 description="Prevalence- and bias-adjusted kappa (K*po - 1)/(K - 1): kappa if both raters used "
                             "every class equally often.")
def pabak_from_tables(tables: FloatArray) -> FloatArray:
    """PABAK ``(K * po - 1) / (K - 1)`` of confusion tables ``(..., K, K)``; NaN with no items or K < 2."""
    n, agree, _, _, k = _parts(tables)
    if k < 2:
        return np.full(np.shape(n), np.nan)
    out: FloatArray = (k * _div(agree, n) - 1.0) / (k - 1)
    return out


@register_metric("mcc", bounds=(-1.0, 1.0), higher_is_better=True, binary_only=False,
                 description="Matthews correlation between judge and human labels (0 = no better than chance); "
                             "undefined when either rater gives one label only.")
def mcc_from_tables(tables: FloatArray) -> FloatArray:
    """Matthews correlation (Gorodkin's R_K for K > 2) of confusion tables ``(..., K, K)``.

    Undefined (NaN) where a rater used a single class: the correlation's denominator is 0 and any value would be a
    convention (scikit-learn returns 0), which in a sample with no human "yes" would stand for a figure the sample
    says nothing about (issue 30). A judge that always gives one label is shown beside it by the base-rate row.
    """
    n, agree, rows, cols, _ = _parts(tables)
    cov_hj = agree * n - (rows * cols).sum(axis=-1)
    cov_jj = n * n - (cols * cols).sum(axis=-1)
    cov_hh = n * n - (rows * rows).sum(axis=-1)
    denom = np.sqrt(cov_jj * cov_hh)
    with np.errstate(divide="ignore", invalid="ignore"):
        mcc = np.where(denom == 0, np.nan, cov_hj / np.where(denom == 0, 1.0, denom))
    out: FloatArray = np.where(n == 0, np.nan, mcc)
    return out


def class_recalls(tables: FloatArray) -> FloatArray:
    """Each class's recall ``(..., K)``: the share of the humans' items in that class the judge got right.

    NaN for a class the humans never used.
    """
    t = np.asarray(tables, dtype=float)
    rows = t.sum(axis=-1)
    diag = np.diagonal(t, axis1=-2, axis2=-1)
    used = rows > 0
    out: FloatArray = np.where(used, diag / np.where(used, rows, 1.0), np.nan)
    return out


@register_metric("balanced_accuracy", bounds=(0.0, 1.0), higher_is_better=True, binary_only=False, parts=class_recalls,
                 description="Mean over the dataset's classes of the share of the humans' items in that class the "
                             "judge got right (0.5 = chance for two classes, whatever the prevalence).")
def balanced_accuracy_from_tables(tables: FloatArray) -> FloatArray:
    """Balanced accuracy: mean per-class recall over every class of the table (the dataset's categories).

    The estimand is fixed by the dataset, not the sample: where the humans never used one of the categories, that
    class's recall is undefined and so is the figure (NaN), rather than a mean over the classes that happened to
    occur (which, with no human "yes", would be specificity; issue 30). With every class used by the humans it
    equals scikit-learn's ``balanced_accuracy_score``.
    """
    out: FloatArray = class_recalls(tables).mean(axis=-1)
    return out


def _binary(tables: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    t = np.asarray(tables, dtype=float)
    if t.shape[-2:] != (2, 2):
        raise ValueError(f"binary index needs 2x2 tables, got {t.shape[-2:]}")
    return t[..., 1, 1], t[..., 0, 1], t[..., 1, 0], t[..., 0, 0], t.sum(axis=(-2, -1))


@register_metric("prevalence_index", bounds=(-1.0, 1.0), higher_is_better=None,
                 description="(both yes - both no) / n: near -1 or 1 when one label dominates, where kappa is "
                             "unstable (Byrt et al. 1993).")
def prevalence_index_from_tables(tables: FloatArray) -> FloatArray:
    """Byrt's prevalence index ``(a - d) / n`` of 2x2 tables (a: both yes, d: both no)."""
    both_yes, _, _, both_no, n = _binary(tables)
    return _div(both_yes - both_no, n)


@register_metric("bias_index", bounds=(-1.0, 1.0), higher_is_better=None,
                 description="(judge yes - human yes) / n: positive when the judge says yes more often than humans.")
def bias_index_from_tables(tables: FloatArray) -> FloatArray:
    """Signed bias index: judge yes-rate minus human yes-rate (``|BI|`` is Byrt's bias index)."""
    _, judge_only, human_only, _, n = _binary(tables)
    return _div(judge_only - human_only, n)


# --------------------------------------------------------------------------- the panel

def panel_fields(tables: FloatArray, level: float = 0.95) -> dict[str, Any]:
    """The robust-agreement fields of one judge row, from per-user tables (the one CI rule, as the row's kappa).

    Args:
        tables: Per-user confusion tables ``(U, K, K)``.
        level: Confidence level.

    Returns:
        ``ac1``, ``ac1_ci``, ``pabak``, ``pabak_ci``, ``mcc``, ``mcc_ci``, ``balanced_accuracy``,
        ``balanced_accuracy_ci``, ``prevalence_index``, ``bias_index`` (the last two NaN unless K = 2).
        NaN marks an undefined figure; ``json_safe`` turns it into null.
    """
    t = np.asarray(tables, dtype=float)
    out: dict[str, Any] = {}
    for name, e in estimates(t, PANEL_METRICS, level=level).items():
        out[name], out[f"{name}_ci"] = e.value, ci_list(e)
    binary = t.shape[-2:] == (2, 2)
    for name in PANEL_POINT_ONLY:
        out[name] = float(get_metric(name).fn(t.sum(axis=0))) if binary else float("nan")
    return out


def base_rate_tables(tables: FloatArray) -> tuple[FloatArray, int]:
    """Per-user tables of the base-rate judge: every item labelled with the humans' most common class.

    Args:
        tables: Per-user confusion tables ``(U, K, K)`` of any judge on the reference items (only the
            human side, the row totals, is used).

    Returns:
        The base-rate judge's tables ``(U, K, K)`` and the class it always gives (ties: the lowest code).
    """
    t = np.asarray(tables, dtype=float)
    human = t.sum(axis=-1)  # (U, K): each user's human class counts
    majority = int(np.argmax(human.sum(axis=0))) if t.size else 0
    out = np.zeros_like(t)
    out[..., :, majority] = human
    return out, majority


def base_rate_panel(tables: FloatArray, level: float = 0.95) -> dict[str, Any]:
    """:func:`panel_fields` plus kappa and accuracy of the base-rate judge (always the majority class).

    This is what chance-level looks like at the data's prevalence: kappa 0, MCC 0, balanced accuracy
    1/K, AC1 and PABAK whatever the prevalence gives them.
    """
    t, majority = base_rate_tables(tables)
    est = estimates(t, ("kappa", "accuracy"), level=level)
    return {"kappa": est["kappa"].value, "kappa_ci": ci_list(est["kappa"]), "accuracy": est["accuracy"].value,
            "majority_class": majority, **panel_fields(t, level=level)}


def _pair_tables(human: npt.ArrayLike, judge: npt.ArrayLike, clusters: npt.ArrayLike) -> FloatArray:
    # The tables agreement() builds for the same arguments: 0/1 codes stay 2x2 (even if one class is missing).
    h, j = np.asarray(human), np.asarray(judge)
    binary = all(a.dtype.kind in "biu" and (a.size == 0 or (a.min() >= 0 and a.max() <= 1)) for a in (h, j))
    if binary:
        codes, k = [h.astype(np.int64), j.astype(np.int64)], 2
    else:
        codes, categories = encode(h, j)
        k = max(len(categories), 1)
    tables, _ = cluster_tables(codes[0], codes[1], clusters, k)
    return tables


def panel(human: npt.ArrayLike, judge: npt.ArrayLike, clusters: npt.ArrayLike, *,
          level: float = 0.95) -> dict[str, Any]:
    """:func:`panel_fields` from aligned label arrays, on the same per-user tables as ``agreement(...)``.

    Args:
        human: Reference labels (0/1 codes for binary, or any labels).
        judge: Judge labels aligned with ``human``.
        clusters: User (cluster) of each item.
        level: Confidence level.
    """
    return panel_fields(_pair_tables(human, judge, clusters), level=level)


def base_rate(human: npt.ArrayLike, clusters: npt.ArrayLike, *, level: float = 0.95) -> dict[str, Any]:
    """:func:`base_rate_panel` from the reference labels of the items (a report's chance-level row)."""
    return base_rate_panel(_pair_tables(human, human, clusters), level=level)


# --------------------------------------------------------------------------- tidy labels

def human_reference(labels: pd.DataFrame, humans: HumanSet = "blind") -> pd.DataFrame:
    """The human reference label of every item that has one, with the item's user.

    The reference is :func:`~personagap.analysis.comparable.reference_labels` (the one rule: a stored
    majority stands when its rows agree, otherwise the majority of one vote per person, ties undecided);
    this adds the user each item belongs to, which the user-clustered CI needs.

    Args:
        labels: Tidy labels (``item_id``, ``rater``, ``rater_kind``, ``condition``, ``label``, ``user_id``).
        humans: ``"blind"`` or ``"anchored"``.

    Returns:
        Frame indexed by ``item_id`` with ``label`` (str) and ``user_id``, sorted by item.
    """
    ref = reference_labels(labels, humans).astype(str).sort_index()
    users = labels.drop_duplicates("item_id").set_index("item_id")["user_id"]
    return pd.DataFrame({"label": ref, "user_id": users.reindex(ref.index)}).rename_axis("item_id")


def individual_humans(labels: pd.DataFrame, humans: HumanSet = "blind") -> pd.DataFrame:
    """Per-person human labels (kind ``human``), one per (item, rater), blind or anchored.

    The votes of :func:`~personagap.analysis.comparable.reference_labels` (one per person, anchored labels
    ranked by :data:`~personagap.analysis.comparable.ANCHORED_ORDER`, the three-way rating left out), on every
    item, including items whose reference is a stored majority (there they are extra raters).

    Returns:
        Columns ``item_id``, ``rater``, ``label`` (str), ``user_id``.
    """
    rows = labels[individual_human_mask(labels, humans) & labels["label"].notna()
                  & (labels["condition"] != SHOWN_LLM_RATING)]
    rows = one_vote_per_rater(rows)
    return rows.assign(label=rows["label"].astype(str))[["item_id", "rater", "label", "user_id"]]


@dataclass(frozen=True)
class JudgeLabels:
    """One judge's parsed, comparable labels on one dataset."""

    judge: str
    """Display name (:func:`~personagap.analysis.comparable.judge_display`)."""
    rater: str
    rater_kind: str
    condition: str
    labels: pd.Series
    """Label (str) indexed by ``item_id``."""
    users: pd.Series
    """User id indexed by ``item_id``."""


def judge_labels(labels: pd.DataFrame) -> Iterator[JudgeLabels]:
    """Every comparable judge's parsed labels, one entry per (rater, kind, condition), in name order.

    In-sample labels of trained judges and unparsed answers (label null) are left out; judge kinds are
    never merged.
    """
    rows = labels[comparable_judge_mask(labels) & labels["label"].notna()]
    rows = rows.assign(condition=rows["condition"].fillna("").astype(str))
    for (rater, kind, condition), g in rows.groupby(["rater", "rater_kind", "condition"], sort=True):
        g = g.drop_duplicates("item_id").set_index("item_id")
        yield JudgeLabels(judge_display(str(rater), str(condition)), str(rater), str(kind), str(condition),
                          g["label"].astype(str), g["user_id"])


def code_labels(categories: list[str], *columns: pd.Series) -> list[np.ndarray[Any, np.dtype[np.int64]]]:
    """Integer codes of label columns over a fixed category list (code i = ``categories[i]``)."""
    lookup = {c: i for i, c in enumerate(categories)}
    return [np.fromiter((lookup[v] for v in col), dtype=np.int64, count=len(col)) for col in columns]


def user_tables(human: pd.Series, judge: pd.Series, users: pd.Series,
                categories: list[str]) -> tuple[FloatArray, np.ndarray[Any, Any]]:
    """Per-user confusion tables ``(U, K, K)`` of aligned human and judge labels, users in sorted order.

    Users are coded in sorted id order (as :func:`~personagap.analysis.agreement.cluster_tables`), so
    the tables do not depend on row order.
    """
    h, j = code_labels(categories, human, judge)
    ids, index = sorted_codes(users.astype(str))
    return indexed_tables(h, j, index.astype(np.int64), len(ids), len(categories)), ids
