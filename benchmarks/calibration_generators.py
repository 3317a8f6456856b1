"""The calibration harness's data-generating processes (issue 21): per-user additive sums with known truth.

Each generator draws ``n`` users with their own effects and items and returns per-user arrays ``(n, *shape)``
exactly as the reports build them (confusion tables, Fleiss sums, coincidences, paired before/after tables); its
figures are functions of the totals of those arrays, the same functions the tool prints.

* ``skewed-binary`` (stage-2-like): items per user drawn from the Re-Centering stage-2 users' sizes when
  ``../shared/data`` is there (else a log-normal of the same skew), logit-normal user effects on the human yes-rate
  (about 19%), the judge's sensitivity and its false-positive rate.
* ``balanced-binary``: yes-rate 50%, sensitivity and specificity about 0.8, mild user effects, 10-30 items a user.
* ``pairwise-ties``: A / B / tie with a Dirichlet user preference and a judge that is right 70% of the time.
* ``ordinal-5``: 1-5 ratings from a latent quality with a user effect; the judge is noisier and biased upward.
* ``humans-3``: three humans label every item yes/no (user effects on the yes-rate and on each human's accuracy):
  Fleiss' kappa, Krippendorff's alpha and the mean pairwise kappa, the human ceiling's ingredients.
* ``optimize-paired``: one reference and a judge before and after optimisation on the same items (the after
  judge keeps half of its old labels): ``optimize``'s before/after figures and their difference.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

import personagap.analysis.robust  # noqa: F401  (registers AC1, PABAK, MCC, balanced accuracy)
from personagap.analysis.agreement import (
    alpha_from_coincidences,
    fleiss_from_user_sums,
    get_metric,
    kappa_from_tables,
)

FloatArray = npt.NDArray[np.float64]
Stat = Callable[[FloatArray], FloatArray]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
LEVELS = np.arange(1.0, 6.0)


def _logistic(x: FloatArray) -> FloatArray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=float)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def stage2_sizes() -> npt.NDArray[np.int64]:
    """Items per user of the Re-Centering stage-2 release (one model's rows), or a log-normal of that skew."""
    path = SHARED / "recenter" / "stage2" / "task6_items.jsonl"
    if path.exists():
        sizes: dict[str, int] = {}
        seen: set[str] = set()
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row["prompt_id"] in seen:  # the attribute labels repeat per response model
                continue
            seen.add(row["prompt_id"])
            sizes[row["user_id"]] = sizes.get(row["user_id"], 0) + len(row["attributes"])
        return np.array(sorted(sizes.values()), dtype=np.int64)
    rng = np.random.default_rng(0)
    return np.maximum(3, np.round(rng.lognormal(3.3, 0.8, 33))).astype(np.int64)


@dataclass(frozen=True)
class Generator:
    """A data-generating process: per-user arrays for ``n_users`` users from ``rng``, and the figures on them.

    ``metrics`` are registered table metrics (``draw`` then returns confusion tables ``(U, K, K)``);
    ``extra`` are further figures as functions of the totals of whatever ``draw`` returns.
    """

    name: str
    n_classes: int
    metrics: tuple[str, ...]
    draw: Callable[[np.random.Generator, int], FloatArray]
    levels: FloatArray | None = None
    extra: Mapping[str, Stat] = field(default_factory=dict)

    def bounds(self, figure: str) -> tuple[float, float] | None:
        """A registered metric's range (the rule's transform); None for the extra figures (Fleiss' kappa, alpha and
        differences: their ranges are not a rate's or a correlation's, so the rule leaves their scale as it is)."""
        return get_metric(figure).bounds if figure in self.metrics else None

    def figures(self) -> dict[str, Stat]:
        """Every figure of this generator by name, as a function of totals (vectorised over leading axes)."""
        out: dict[str, Stat] = {}
        for m in self.metrics:
            def stat(t: FloatArray, metric: str = m) -> FloatArray:
                return get_metric(metric).on(t, self.levels)
            out[m] = stat
        return {**out, **self.extra}


def _binary_tables(rng: np.random.Generator, sizes: npt.NDArray[np.int64], prevalence: FloatArray,
                   sensitivity: FloatArray, false_positive: FloatArray) -> FloatArray:
    human = rng.binomial(sizes, prevalence)
    tp = rng.binomial(human, sensitivity)
    fp = rng.binomial(sizes - human, false_positive)
    tables = np.zeros((len(sizes), 2, 2))
    tables[:, 1, 1], tables[:, 1, 0] = tp, human - tp  # rows: human no/yes; columns: judge no/yes
    tables[:, 0, 1], tables[:, 0, 0] = fp, sizes - human - fp
    return tables


def skewed_binary(sizes: npt.NDArray[np.int64]) -> Callable[[np.random.Generator, int], FloatArray]:
    """Stage-2-like: skewed sizes, rare yes, user effects on prevalence, sensitivity and false-positive rate."""
    def draw(rng: np.random.Generator, n: int) -> FloatArray:
        size = rng.choice(sizes, n)
        prev = _logistic(rng.normal(_logit(0.19), 0.8, n))
        sens = _logistic(rng.normal(_logit(0.70), 0.6, n))
        fpr = _logistic(rng.normal(_logit(0.25), 0.6, n))
        return _binary_tables(rng, size, prev, sens, fpr)
    return draw


def balanced_binary(rng: np.random.Generator, n: int) -> FloatArray:
    """Yes-rate 0.5, sensitivity and specificity about 0.8, mild user effects, 10-30 items a user."""
    size = rng.integers(10, 31, n)
    prev = _logistic(rng.normal(0.0, 0.3, n))
    sens = _logistic(rng.normal(_logit(0.8), 0.3, n))
    fpr = _logistic(rng.normal(_logit(0.2), 0.3, n))
    return _binary_tables(rng, size, prev, sens, fpr)


def _items(rng: np.random.Generator, n: int, low: int, high: int) -> npt.NDArray[np.int64]:
    """Each item's user index, for ``n`` users of ``low``..``high`` items each (vectorised draws)."""
    return np.repeat(np.arange(n), rng.integers(low, high + 1, n))


def _tables(n: int, k: int, user: npt.NDArray[np.int64], human: npt.NDArray[np.int64],
            judge: npt.NDArray[np.int64]) -> FloatArray:
    tables = np.zeros((n, k, k))
    np.add.at(tables, (user, human, judge), 1.0)
    return tables


def pairwise_ties(rng: np.random.Generator, n: int) -> FloatArray:
    """A / B / tie: each user prefers by a Dirichlet draw; the judge is right 70% of the time, else uniform."""
    user = _items(rng, n, 5, 25)
    cumulative = np.cumsum(rng.dirichlet([4.0, 4.0, 1.5], n), axis=1)[user]
    human = (rng.random(len(user))[:, None] > cumulative[:, :2]).sum(axis=1)
    judge = np.where(rng.random(len(user)) < 0.7, human, rng.integers(0, 3, len(user)))
    return _tables(n, 3, user, human, judge)


def ordinal_5(rng: np.random.Generator, n: int) -> FloatArray:
    """1-5 ratings from a latent quality with a user effect; the judge is noisier and rates 0.3 higher."""
    user = _items(rng, n, 5, 25)
    latent = rng.normal(0.0, 0.7, n)[user] + rng.normal(0.0, 1.0, len(user))
    cuts = np.array([-1.5, -0.5, 0.5, 1.5])
    human = np.searchsorted(cuts, latent + rng.normal(0.0, 0.5, len(user)))
    judge = np.searchsorted(cuts, latent + 0.3 + rng.normal(0.0, 0.8, len(user)))
    return _tables(n, 5, user, human, judge)


# --------------------------------------------------------------------------- three humans per item

RATERS = 3
PAIRS = [(a, b) for a in range(RATERS) for b in range(a + 1, RATERS)]
_FLEISS = slice(0, 4)  # sum of per-item agreement, items, category totals (no, yes)
_COINCIDE = slice(4, 8)  # the 2 x 2 coincidence matrix, flattened
_PAIR_TABLES = slice(8, 8 + 4 * len(PAIRS))  # one 2 x 2 table per pair of humans


def humans_3(rng: np.random.Generator, n: int) -> FloatArray:
    """Three humans label every item; per-user sums of Fleiss' kappa, alpha's coincidences and pair tables."""
    user = _items(rng, n, 5, 25)
    prev = _logistic(rng.normal(_logit(0.3), 0.7, n))[user]
    truth = rng.random(len(user)) < prev
    accuracy = _logistic(rng.normal(_logit(0.85), 0.5, (n, RATERS)))[user]  # each human's accuracy varies by user
    labels = np.where(rng.random((len(user), RATERS)) < accuracy, truth[:, None], ~truth[:, None]).astype(np.int64)
    yes = labels.sum(axis=1).astype(float)
    counts = np.column_stack([RATERS - yes, yes])
    agree = ((counts * counts).sum(axis=1) - RATERS) / (RATERS * (RATERS - 1))
    # Coincidences of a unit with m values: (n_c n_k - [c = k] n_c) / (m - 1).
    coincide = (counts[:, :, None] * counts[:, None, :] - counts[:, :, None] * np.eye(2)) / (RATERS - 1)
    pair_tables = np.zeros((len(user), len(PAIRS), 2, 2))
    for p, (a, b) in enumerate(PAIRS):
        pair_tables[np.arange(len(user)), p, labels[:, a], labels[:, b]] = 1.0
    rows = np.column_stack([agree, np.ones(len(user)), counts, coincide.reshape(-1, 4),
                            pair_tables.reshape(len(user), -1)])
    per = np.zeros((n, rows.shape[1]))
    np.add.at(per, user, rows)
    return per


def _fleiss(t: FloatArray) -> FloatArray:
    return fleiss_from_user_sums(t[..., _FLEISS])


def _alpha(t: FloatArray) -> FloatArray:
    return alpha_from_coincidences(t[..., _COINCIDE].reshape(*t.shape[:-1], 2, 2), np.arange(2.0), "nominal")


def _mean_pair_kappa(t: FloatArray) -> FloatArray:
    pairs = t[..., _PAIR_TABLES].reshape(*t.shape[:-1], len(PAIRS), 2, 2)
    return np.asarray(kappa_from_tables(pairs).mean(axis=-1), dtype=float)


# --------------------------------------------------------------------------- optimize: before vs after

def optimize_paired(rng: np.random.Generator, n: int) -> FloatArray:
    """Per-user ``(2, 2, 2)``: the reference against the judge before (0) and after (1) optimisation."""
    user = _items(rng, n, 5, 25)
    prev = _logistic(rng.normal(_logit(0.3), 0.7, n))[user]
    human = (rng.random(len(user)) < prev).astype(np.int64)

    def judge(sens: float, fpr: float) -> npt.NDArray[np.int64]:
        s = _logistic(rng.normal(_logit(sens), 0.5, n))[user]
        f = _logistic(rng.normal(_logit(fpr), 0.5, n))[user]
        return (rng.random(len(user)) < np.where(human == 1, s, f)).astype(np.int64)

    before = judge(0.65, 0.30)
    after = np.where(rng.random(len(user)) < 0.5, before, judge(0.80, 0.15))  # keeps half its labels
    per = np.zeros((n, 2, 2, 2))
    np.add.at(per, (user, 0, human, before), 1.0)
    np.add.at(per, (user, 1, human, after), 1.0)
    return per


def _difference(metric: str) -> Stat:
    def stat(t: FloatArray) -> FloatArray:
        fn = get_metric(metric).fn
        return np.asarray(fn(t[..., 1, :, :]) - fn(t[..., 0, :, :]), dtype=float)
    return stat


def _side(metric: str, side: int) -> Stat:
    def stat(t: FloatArray) -> FloatArray:
        return get_metric(metric).fn(t[..., side, :, :])
    return stat


BINARY_METRICS = ("kappa", "ac1", "pabak", "mcc", "balanced_accuracy", "over_selection", "human_yes_rate",
                  "judge_yes_rate")


def generators() -> dict[str, Generator]:
    """Every generator of the harness by name."""
    return {
        "skewed-binary": Generator("skewed-binary", 2, BINARY_METRICS, skewed_binary(stage2_sizes())),
        "balanced-binary": Generator("balanced-binary", 2, BINARY_METRICS, balanced_binary),
        "pairwise-ties": Generator("pairwise-ties", 3, ("kappa", "accuracy", "ac1", "pabak", "balanced_accuracy"),
                                   pairwise_ties),
        "ordinal-5": Generator("ordinal-5", 5, ("weighted_kappa", "kappa", "spearman", "mean_abs_diff", "alpha"),
                               ordinal_5, LEVELS),
        "humans-3": Generator("humans-3", 2, (), humans_3, extra={
            "fleiss_kappa": _fleiss, "krippendorff_alpha": _alpha, "mean_pair_kappa": _mean_pair_kappa}),
        "optimize-paired": Generator("optimize-paired", 2, (), optimize_paired, extra={
            "kappa_before": _side("kappa", 0), "kappa_after": _side("kappa", 1),
            "kappa_difference": _difference("kappa"),
            "balanced_accuracy_difference": _difference("balanced_accuracy")}),
    }
