"""Worlds built to break the CI rule (issue 30): uneven users, 1-3 items a user, rare events, many ties.

The first harness (:mod:`benchmarks.calibration`) drew users of similar size and moderate prevalence, and the rule it
chose (a jackknife-t on users - 1 degrees of freedom) covered 0.54-0.89 in an independent audit on uneven data. The
worlds here are written to be hard, each at 10, 20, 30 and 50 users:

* ``unequal-like``: 60% of users have 1-3 items, 30% 10-40, 10% 150-300; every user is drawn from the same
  distribution (heavy users are like the rest, only bigger).
* ``unequal-unlike``: the same sizes, but heavy users differ: more "yes", a judge much better on them.
* ``few-items``: 1-3 items per user.
* ``rare``: 2-5% "yes" (user effects around 3.5%), 5-15 items a user.
* ``rare-unequal``: the rare world with the unequal sizes.
* ``ordinal-skew``: 1-5 ratings, most at 4-5, unequal sizes, heavy users rated higher and judged more closely.
* ``ties-40``: A / B / tie with 40% ties, 3-30 items a user and a few heavy users.

The truth of a figure is its value on the totals of 400,000 users of the same world (the pooled, item-weighted
estimand the tool prints). Every candidate rule is computed from the same leave-one-user-out values of each study
(:func:`personagap.analysis.ci_rule.leave_one_out`), so the candidates differ only in how they turn those into an
interval; the chosen one is the tool's own :func:`~personagap.analysis.ci_rule.interval_from_leave_outs`.

Run: python benchmarks/calibration_uneven.py [--reps 400] [--users 10 20 30 50] [--worlds ...] [--no-write]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import personagap.analysis.robust  # noqa: E402,F401  (registers AC1, PABAK, MCC, balanced accuracy)
from personagap.analysis.agreement import get_metric  # noqa: E402
from personagap.analysis.ci_rule import (  # noqa: E402
    RULE,
    IntervalRule,
    interval_from_leave_outs,
    leave_one_out,
    parts_of_total,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
TARGET = 0.93
Z_ONE_SIDED = 1.645
TABLE = Path(__file__).with_name("calibration_uneven_table.md")
LEVELS = np.arange(1.0, 6.0)


def _logistic(x: FloatArray) -> FloatArray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=float)


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


# --------------------------------------------------------------------------- item counts per user

def unequal_sizes(rng: np.random.Generator, n: int) -> IntArray:
    """60% of users 1-3 items, 30% 10-40, 10% 150-300 (drawn per user, so a study may have no heavy user)."""
    kind = rng.choice(3, n, p=[0.6, 0.3, 0.1])
    low = np.array([1, 10, 150])[kind]
    high = np.array([3, 40, 300])[kind]
    return rng.integers(low, high + 1).astype(np.int64)


def uniform_sizes(low: int, high: int) -> Callable[[np.random.Generator, int], IntArray]:
    def draw(rng: np.random.Generator, n: int) -> IntArray:
        return rng.integers(low, high + 1, n).astype(np.int64)
    return draw


# --------------------------------------------------------------------------- binary worlds

@dataclass(frozen=True)
class BinaryParams:
    """Centres (probabilities) and spreads (logit SD) of a user's yes-rate, sensitivity and false-positive rate."""

    prevalence: float
    sensitivity: float
    false_positive: float
    spread: float = 0.6


def binary_world(sizes: Callable[[np.random.Generator, int], IntArray], light: BinaryParams,
                 heavy: BinaryParams | None = None, heavy_from: int = 150) -> Callable[[np.random.Generator, int],
                                                                                         FloatArray]:
    """Per-user 2x2 tables (rows human no/yes, columns judge no/yes); users of ``heavy_from`` items or more use
    ``heavy``'s parameters when given."""
    def draw(rng: np.random.Generator, n: int) -> FloatArray:
        size = sizes(rng, n)
        is_heavy = size >= heavy_from if heavy is not None else np.zeros(n, dtype=bool)
        h = heavy or light

        def user(attr: str) -> FloatArray:
            centre = np.where(is_heavy, _logit(getattr(h, attr)), _logit(getattr(light, attr)))
            spread = np.where(is_heavy, h.spread, light.spread)
            return _logistic(rng.normal(centre, spread))

        prev, sens, fpr = user("prevalence"), user("sensitivity"), user("false_positive")
        yes = rng.binomial(size, prev)
        tp = rng.binomial(yes, sens)
        fp = rng.binomial(size - yes, fpr)
        tables = np.zeros((n, 2, 2))
        tables[:, 1, 1], tables[:, 1, 0] = tp, yes - tp
        tables[:, 0, 1], tables[:, 0, 0] = fp, size - yes - fp
        return tables
    return draw


# --------------------------------------------------------------------------- ordinal and pairwise worlds

def _tables(n: int, k: int, user: IntArray, human: IntArray, judge: IntArray) -> FloatArray:
    tables = np.zeros((n, k, k))
    np.add.at(tables, (user, human, judge), 1.0)
    return tables


def ordinal_skew(rng: np.random.Generator, n: int) -> FloatArray:
    """1-5 ratings, most at 4-5; heavy users are rated higher and their judge is closer to the humans."""
    size = unequal_sizes(rng, n)
    heavy = size >= 150
    user = np.repeat(np.arange(n), size)
    effect = rng.normal(np.where(heavy, 0.8, 0.0), 0.6)[user]
    latent = 1.0 + effect + rng.normal(0.0, 1.0, len(user))
    cuts = np.array([-1.2, -0.3, 0.6, 1.3])
    human = np.searchsorted(cuts, latent + rng.normal(0.0, 0.4, len(user)))
    noise = np.where(heavy[user], 0.4, 1.1)
    judge = np.searchsorted(cuts, latent + 0.3 + rng.normal(0.0, 1.0, len(user)) * noise)
    return _tables(n, 5, user, human.astype(np.int64), judge.astype(np.int64))


def ties_40(rng: np.random.Generator, n: int) -> FloatArray:
    """A / B / tie with 40% ties: a user's own Dirichlet preference; the judge rarely says tie and is right 65%."""
    size = np.where(rng.random(n) < 0.1, rng.integers(60, 121, n), rng.integers(3, 31, n))
    user = np.repeat(np.arange(n), size)
    cumulative = np.cumsum(rng.dirichlet([3.0, 3.0, 4.0], n), axis=1)[user]
    human = (rng.random(len(user))[:, None] > cumulative[:, :2]).sum(axis=1)
    guess = rng.choice(3, len(user), p=[0.42, 0.42, 0.16])
    judge = np.where(rng.random(len(user)) < 0.65, human, guess)
    return _tables(n, 3, user, human.astype(np.int64), judge.astype(np.int64))


# --------------------------------------------------------------------------- worlds and their figures

BINARY_FIGURES = ("kappa", "accuracy", "ac1", "pabak", "mcc", "balanced_accuracy", "precision", "recall", "f1",
                  "over_selection", "human_yes_rate", "judge_yes_rate")
ORDINAL_FIGURES = ("weighted_kappa", "kappa", "accuracy", "spearman", "mean_abs_diff", "alpha")
PAIRWISE_FIGURES = ("kappa", "accuracy", "ac1", "pabak", "balanced_accuracy")


@dataclass(frozen=True)
class World:
    """A data-generating process: per-user confusion tables and the registered figures measured on them."""

    name: str
    draw: Callable[[np.random.Generator, int], FloatArray]
    figures: tuple[str, ...]
    levels: FloatArray | None = None

    def stat(self, figure: str) -> Callable[[FloatArray], FloatArray]:
        metric = get_metric(figure)
        return lambda t: metric.on(t, self.levels)

    def bounds(self, figure: str) -> tuple[float, float]:
        return get_metric(figure).bounds

    def parts(self, figure: str, sums: FloatArray) -> FloatArray | None:
        """The rates the figure averages on the study's totals (balanced accuracy's class recalls), if any."""
        parts = get_metric(figure).parts
        return None if parts is None else parts_of_total(parts, sums)


LIKE = BinaryParams(prevalence=0.3, sensitivity=0.75, false_positive=0.15, spread=0.7)


def worlds() -> dict[str, World]:
    """Every world of this harness by name."""
    return {
        "unequal-like": World("unequal-like", binary_world(unequal_sizes, LIKE), BINARY_FIGURES),
        "unequal-unlike": World("unequal-unlike", binary_world(
            unequal_sizes, BinaryParams(0.25, 0.6, 0.25, 0.6), BinaryParams(0.5, 0.92, 0.05, 0.4)), BINARY_FIGURES),
        "few-items": World("few-items", binary_world(uniform_sizes(1, 3), LIKE), BINARY_FIGURES),
        "rare": World("rare", binary_world(uniform_sizes(5, 15), BinaryParams(0.035, 0.7, 0.05, 0.5)),
                      BINARY_FIGURES),
        "rare-unequal": World("rare-unequal", binary_world(unequal_sizes, BinaryParams(0.035, 0.7, 0.05, 0.5)),
                              BINARY_FIGURES),
        "ordinal-skew": World("ordinal-skew", ordinal_skew, ORDINAL_FIGURES, LEVELS),
        "ties-40": World("ties-40", ties_40, PAIRWISE_FIGURES),
    }


def per_user_shares(per: FloatArray) -> FloatArray:
    """Each user's table divided by its own total: the user-weighted figure's per-user sums (each user once)."""
    total = per.sum(axis=(1, 2), keepdims=True)
    return np.asarray(per / np.where(total > 0, total, 1.0), dtype=float)


def truth(world: World, n_users: int = 400_000, seed: int = 4242) -> dict[str, float]:
    """Each figure on the totals of ``n_users`` users of ``world``: the pooled (item-weighted) estimand, and the
    user-weighted one under ``<figure>@users``."""
    rng = np.random.default_rng(seed)
    total = np.zeros(1)
    shares = np.zeros(1)
    for _ in range(n_users // 20_000):
        per = world.draw(rng, 20_000)
        total = total + per.sum(axis=0)
        shares = shares + per_user_shares(per).sum(axis=0)
    out = {f: float(world.stat(f)(np.asarray(total))) for f in world.figures}
    out.update({f"{f}@users": float(world.stat(f)(np.asarray(shares))) for f in world.figures})
    return out


# --------------------------------------------------------------------------- candidate rules

CANDIDATES: dict[str, IntervalRule] = {
    "t(users-1)": IntervalRule(df="users", transform=False),
    "t(kish-1)+transform": IntervalRule(df="kish", transform=True),
    "t(satterthwaite)": IntervalRule(df="satterthwaite", transform=False),
    "t(min)+transform": IntervalRule(df="min", transform=True),
    "chosen but no interval where a leave-out is on the bound": replace(RULE, raw_at_edge=False),
    "Satterthwaite, transformed, no unequal-items or parts rule (the rule before)": IntervalRule(),
    **{f"chosen with unequal items CV > {c:.1f} needing {m} users": replace(RULE, unequal_cv=c, unequal_min_users=m)
       for c in (0.8, 1.0) for m in (30, 50)},
    "chosen without the parts rule": replace(RULE, parts_at_edge=False),
}
"""The candidates beside the chosen rule (:data:`~personagap.analysis.ci_rule.RULE`: Satterthwaite degrees of
freedom on the transformed scale)."""


@dataclass
class Cell:
    """Coverage of one figure in one world at one number of users under one rule."""

    covered: int = 0
    with_ci: int = 0
    reps: int = 0
    widths: list[float] = field(default_factory=list)
    effective: list[float] = field(default_factory=list)
    hits: list[bool] = field(default_factory=list)

    def add(self, lo: float, hi: float, value: float, effective: float) -> None:
        self.reps += 1
        if math.isnan(lo) or math.isnan(hi):
            return
        self.with_ci += 1
        hit = lo <= value <= hi
        self.covered += int(hit)
        self.widths.append(hi - lo)
        self.effective.append(effective)
        self.hits.append(hit)

    def coverage(self) -> float:
        return self.covered / self.with_ci if self.with_ci else float("nan")

    def mc_se(self) -> float:
        c = self.coverage()
        return math.sqrt(max(c * (1 - c), 0.25 / self.with_ci) / self.with_ci) if self.with_ci else float("nan")

    def reaches(self) -> bool:
        return not self.with_ci or self.coverage() + Z_ONE_SIDED * self.mc_se() >= TARGET

    def printed_share(self) -> float:
        return self.with_ci / self.reps if self.reps else float("nan")

    def text(self) -> str:
        if not self.with_ci:
            return "none printed"
        flag = "" if self.reaches() else " **below**"
        return (f"{self.coverage():.3f} ({self.mc_se():.3f}) w {float(np.median(self.widths)):.2f}, "
                f"printed {self.printed_share():.0%}{flag}")


def run(world: World, n_users: int, reps: int, true: Mapping[str, float], rules: Mapping[str, IntervalRule],
        seed: int = 0) -> dict[str, dict[str, Cell]]:
    """``reps`` studies of ``n_users`` users: rule -> figure -> :class:`Cell`."""
    rng = np.random.default_rng([seed, n_users, sum(map(ord, world.name))])
    names = [*world.figures, *(f"{f}@users" for f in world.figures)]
    cells = {r: {f: Cell() for f in names} for r in rules}
    for _ in range(reps):
        per = world.draw(rng, n_users)
        for sums, suffix in ((per, ""), (per_user_shares(per), "@users")):
            for fig in world.figures:
                point, theta = leave_one_out(world.stat(fig), sums)
                for name, rule in rules.items():
                    e = interval_from_leave_outs(point, theta, 0.95, bounds=world.bounds(fig), min_users=2,
                                                 rule=rule, per_cluster=sums, parts=world.parts(fig, sums))
                    eff = float("nan") if e.effective_users is None else e.effective_users
                    cells[name][fig + suffix].add(e.ci[0], e.ci[1], true[fig + suffix], eff)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[10, 20, 30, 50])
    parser.add_argument("--worlds", nargs="+", default=list(worlds()))
    parser.add_argument("--candidates", nargs="+", default=[*CANDIDATES, "chosen"],
                        choices=[*CANDIDATES, "chosen"])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    rules = {name: (RULE if name == "chosen" else CANDIDATES[name]) for name in args.candidates}
    lines: dict[str, list[str]] = {r: [] for r in rules}
    summary: dict[str, list[bool]] = {r: [] for r in rules}
    for wname in args.worlds:
        world = worlds()[wname]
        started = time.perf_counter()
        true = truth(world)
        for u in args.users:
            by_rule = run(world, u, args.reps, true, rules)
            for r in rules:
                for fig in by_rule[r]:
                    cell = by_rule[r][fig]
                    summary[r].append(cell.reaches())
                    lines[r].append(f"| {wname} | {fig} | {true[fig]:.3f} | {u} | {cell.text()} |")
        print(f"{wname}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    head = (f"Coverage of 95% intervals in worlds built to break the rule: {args.reps} studies per cell; "
            "MC SE in brackets; w = median width; printed = share of studies with an interval; **below** = "
            f"coverage + {Z_ONE_SIDED} MC SE < {TARGET}.")
    out = [head]
    for r in rules:
        failing = summary[r].count(False)
        out += ["", f"### {r}: {failing} of {len(summary[r])} cells below {TARGET}", "",
                "| world | figure | truth | users | coverage |", "|---|---|---|---|---|", *lines[r]]
    text = "\n".join(out) + "\n"
    print(text)
    if not args.no_write:
        TABLE.write_text(text, encoding="utf-8")
        print(f"wrote {TABLE}", file=sys.stderr)


if __name__ == "__main__":
    main()


def restricted(cell: Cell, minimum: float) -> Cell:
    """The cell as printed under a minimum effective number of users (intervals with fewer effective users dropped)."""
    out = Cell(reps=cell.reps)
    for hit, width, eff in zip(cell.hits, cell.widths, cell.effective, strict=True):
        if eff >= minimum:
            out.with_ci += 1
            out.covered += int(hit)
            out.widths.append(width)
            out.effective.append(eff)
            out.hits.append(hit)
    return out
