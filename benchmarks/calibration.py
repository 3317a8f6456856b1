"""Calibration harness (issue 21): does each printed 95% interval cover the truth 95% of the time?

Simulation with known truth. Each generator draws users (clusters) with their own effects and items, and gives
per-user confusion tables (human reference x judge) exactly as the reports build them; the tool's own interval
(:func:`personagap.analysis.agreement.estimates`: the user-clustered bootstrap and the one CI rule) is computed on
each simulated study, and the share of studies whose interval holds the truth is its coverage. The truth of a figure
is its value on the pooled table of a very large population drawn from the same generator (the estimand the pooled
estimator targets), so its own error is far below the Monte Carlo error printed beside each coverage
(``sqrt(c (1 - c) / reps)``).

Generators:

* ``skewed-binary`` (stage-2-like): items per user drawn from the Re-Centering stage-2 users' sizes when
  ``../shared/data`` is there (else a log-normal of the same skew), logit-normal user effects on the human yes-rate
  (about 19%), the judge's sensitivity and its false-positive rate.
* ``balanced-binary``: yes-rate 50%, sensitivity and specificity about 0.8, mild user effects, 10-30 items a user.
* ``pairwise-ties``: A / B / tie with a Dirichlet user preference and a judge that is right 70% of the time.
* ``ordinal-5``: 1-5 ratings from a latent quality with a user effect; the judge is noisier and biased upward.

Run: python benchmarks/calibration.py [--reps 400] [--users 5 10 20 50] [--resamples 1000] [--generators ...]
The table it prints is the one in the README.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import personagap.analysis.robust  # noqa: E402, F401  (registers AC1, PABAK, MCC, balanced accuracy)
from personagap.analysis.agreement import estimates, get_metric, resample_weights  # noqa: E402

FloatArray = npt.NDArray[np.float64]
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
    """A data-generating process: per-user tables for ``n_users`` users from ``rng``."""

    name: str
    n_classes: int
    metrics: tuple[str, ...]
    draw: Callable[[np.random.Generator, int], FloatArray]
    levels: FloatArray | None = None


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
    }


def truth(gen: Generator, n_users: int = 200_000, seed: int = 12345) -> dict[str, float]:
    """Each metric on the pooled table of a large population from ``gen`` (the estimand of the pooled estimator)."""
    rng = np.random.default_rng(seed)
    total = np.zeros((gen.n_classes, gen.n_classes))
    for _ in range(n_users // 20_000):
        total += gen.draw(rng, 20_000).sum(axis=0)
    return {m: float(get_metric(m).on(total, gen.levels)) for m in gen.metrics}


@dataclass
class Cell:
    """Coverage of one metric at one number of users."""

    covered: int = 0
    with_ci: int = 0
    reps: int = 0
    widths: list[float] = field(default_factory=list)

    def add(self, lo: float, hi: float, value: float) -> None:
        self.reps += 1
        if math.isnan(lo) or math.isnan(hi):
            return
        self.with_ci += 1
        self.covered += int(lo <= value <= hi)
        self.widths.append(hi - lo)

    def coverage(self) -> float:
        return self.covered / self.with_ci if self.with_ci else float("nan")

    def mc_se(self) -> float:
        c = self.coverage()
        return math.sqrt(c * (1 - c) / self.with_ci) if self.with_ci else float("nan")


def run(gen: Generator, n_users: int, reps: int, n_resamples: int, true: dict[str, float],
        seed: int = 0) -> dict[str, Cell]:
    """``reps`` simulated studies of ``n_users`` users: the tool's interval on each, against ``true``."""
    rng = np.random.default_rng([seed, n_users, len(gen.name)])
    cells = {m: Cell() for m in gen.metrics}
    for rep in range(reps):
        tables = gen.draw(rng, n_users)
        est = estimates(tables, gen.metrics, resample_weights(n_users, n_resamples, seed=rep), levels=gen.levels)
        for m, e in est.items():
            cells[m].add(float(e.ci[0]), float(e.ci[1]), true[m])
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--generators", nargs="+", default=list(generators()))
    args = parser.parse_args()
    print(f"coverage of the printed 95% intervals: {args.reps} simulated studies per cell, {args.resamples} "
          "resamples; MC SE in brackets; width = median interval width; '-' = no interval printed")
    print("| generator | metric | truth | " + " | ".join(f"{u} users" for u in args.users) + " |")
    print("|---|---|---|" + "---|" * len(args.users))
    for name in args.generators:
        gen = generators()[name]
        started = time.perf_counter()
        true = truth(gen)
        by_users = {u: run(gen, u, args.reps, args.resamples, true) for u in args.users}
        for m in gen.metrics:
            cells = []
            for u in args.users:
                c = by_users[u][m]
                if not c.with_ci:
                    cells.append("-")
                    continue
                width = float(np.median(c.widths))
                missing = f", {c.reps - c.with_ci} without" if c.with_ci < c.reps else ""
                cells.append(f"{c.coverage():.3f} ({c.mc_se():.3f}) w {width:.2f}{missing}")
            print(f"| {name} | {m} | {true[m]:.3f} | " + " | ".join(cells) + " |")
        print(f"<!-- {name}: {time.perf_counter() - started:.0f} s -->", flush=True)


if __name__ == "__main__":
    main()
