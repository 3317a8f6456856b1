"""Calibration harness (issue 21): does each printed 95% interval cover the truth 95% of the time?

Simulation with known truth. The generators (:mod:`benchmarks.calibration_generators`) draw users (clusters) with
their own effects and items and give per-user additive sums exactly as the reports build them; each candidate
interval rule is computed on each simulated study, and the share of studies whose interval holds the truth is its
coverage. The truth of a figure is its value on the totals of a very large population from the same generator (the
estimand of the pooled estimator), so its own error is far below the Monte Carlo error printed beside each
coverage (``sqrt(c (1 - c) / reps)``).

Candidates:

* ``percentile``: the percentile cluster bootstrap the tool printed before issue 21.
* ``jackknife-t``: the cluster jackknife with a t interval (:func:`personagap.analysis.agreement.cluster_estimate`).
* ``studentized``: a cluster bootstrap-t whose studentizing SE is the jackknife SE inside each resample.

The rule is chosen by the table (every figure's coverage >= 0.93 at 10 users and more) and the minimum number of
users for an interval (``MIN_USERS_FOR_CI``) is the smallest simulated number of users at which every figure
reaches the target under the chosen rule. The chosen rule's table, as the tool prints it, is written to
``benchmarks/calibration_table.md`` for the README.

Run: python benchmarks/calibration.py [--reps 400] [--users 5 10 20 50] [--resamples 1000] [--quick]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Re-exported: the harness's users (tests, benchmarks/calibration_estimates.py) import them from here.
from benchmarks.calibration_generators import BINARY_METRICS as BINARY_METRICS  # noqa: E402
from benchmarks.calibration_generators import FloatArray as FloatArray  # noqa: E402
from benchmarks.calibration_generators import Generator as Generator  # noqa: E402
from benchmarks.calibration_generators import Stat as Stat  # noqa: E402
from benchmarks.calibration_generators import _binary_tables as _binary_tables  # noqa: E402
from benchmarks.calibration_generators import generators as generators  # noqa: E402
from benchmarks.old_bootstrap import bootstrap_tables, percentile_interval, resample_weights  # noqa: E402
from personagap.analysis.agreement import (  # noqa: E402
    MIN_USERS_FOR_CI,
    interval_from_leave_outs,
    leave_one_out,
)

TARGET = 0.93
Z_ONE_SIDED = 1.645
CHOSEN = "jackknife-t"
TABLE = Path(__file__).with_name("calibration_table.md")
MINIMUM_LINE = "MIN_USERS_FOR_CI = "
"""How the table states the minimum number of users it found (a test checks the constant matches it)."""
Interval = tuple[float, float]


def truth(gen: Generator, n_users: int = 200_000, seed: int = 12345) -> dict[str, float]:
    """Each figure on the totals of a large population from ``gen`` (the estimand of the pooled estimator)."""
    rng = np.random.default_rng(seed)
    total: FloatArray | None = None
    for _ in range(max(n_users // 20_000, 1)):
        part = gen.draw(rng, min(n_users, 20_000)).sum(axis=0)
        total = part if total is None else total + part
    assert total is not None
    return {name: float(stat(total)) for name, stat in gen.figures().items()}


@dataclass
class Cell:
    """Coverage of one figure at one number of users under one rule."""

    covered: int = 0
    with_ci: int = 0
    reps: int = 0
    widths: list[float] = field(default_factory=list)

    def add(self, lo: float, hi: float, value: float) -> None:
        """Count one simulated study: its interval ``[lo, hi]`` (NaN: none printed) against the truth."""
        self.reps += 1
        if math.isnan(lo) or math.isnan(hi):
            return
        self.with_ci += 1
        self.covered += int(lo <= value <= hi)
        self.widths.append(hi - lo)

    def coverage(self) -> float:
        """Share of the printed intervals that hold the truth (NaN if none was printed)."""
        return self.covered / self.with_ci if self.with_ci else float("nan")

    def mc_se(self) -> float:
        """Monte Carlo standard error of :meth:`coverage`."""
        c = self.coverage()
        return math.sqrt(c * (1 - c) / self.with_ci) if self.with_ci else float("nan")

    def text(self) -> str:
        """``coverage (MC SE) w median-width``, and how many studies printed no interval."""
        if not self.with_ci:
            return "-"
        missing = f", {self.reps - self.with_ci} without" if self.with_ci < self.reps else ""
        return f"{self.coverage():.3f} ({self.mc_se():.3f}) w {float(np.median(self.widths)):.2f}{missing}"


# --------------------------------------------------------------------------- the candidate rules

def percentile(stat: Stat, per: FloatArray, boot: FloatArray, level: float) -> Interval:
    """The old rule: percentile interval of the figure over cluster-bootstrap resamples (undefined ones left out)."""
    return percentile_interval(stat(boot), level)


def jackknife_t(stat: Stat, per: FloatArray, boot: FloatArray, level: float,
                bounds: tuple[float, float] | None = None) -> Interval:
    """The tool's rule measured by itself (no minimum number of users): the cluster jackknife-t on the figure's
    transformed scale (its ``bounds``), with the rule's degrees of freedom."""
    point, theta = leave_one_out(stat, per)
    return interval_from_leave_outs(point, theta, level, min_users=2, bounds=bounds, per_cluster=per).ci


def studentized(stat: Stat, per: FloatArray, boot: FloatArray, level: float, weights: FloatArray) -> Interval:
    """Cluster bootstrap-t: ``(theta*_b - theta) / SE*_b`` with the jackknife SE inside each resample.

    In resample b a user drawn ``w`` times is ``w`` draws; leaving one draw out gives ``T_b - per[u]``, the same
    for each of them, so the resample's jackknife needs only the U distinct leave-outs, weighted by ``w``.
    """
    point, theta = leave_one_out(stat, per)
    full = interval_from_leave_outs(point, theta, level, min_users=2)
    if math.isnan(full.ci[0]):
        return full.ci
    n = per.shape[0]
    se = (full.ci[1] - point) / _t(level, n)
    theta_b = stat(boot)
    leave = stat(boot[:, None, ...] - per[None, ...])  # (B, U)
    drawn = weights > 0
    leave = np.where(drawn, leave, 0.0)
    mean = (weights * leave).sum(axis=1) / n
    se_b = np.sqrt((n - 1) / n * (weights * (leave - mean[:, None]) ** 2).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (theta_b - point) / se_b
    t = t[np.isfinite(t)]
    if t.size == 0:
        return (float("nan"), float("nan"))
    hi_q, lo_q = np.quantile(t, [0.5 + level / 2.0, 0.5 - level / 2.0])
    return (point - float(hi_q) * se, point - float(lo_q) * se)


def _t(level: float, n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2.0, n - 1))


RULES = ("percentile", "jackknife-t", "studentized")


def run(gen: Generator, n_users: int, reps: int, n_resamples: int, true: Mapping[str, float], seed: int = 0,
        rules: tuple[str, ...] = (CHOSEN,), level: float = 0.95) -> dict[str, dict[str, Cell]]:
    """``reps`` simulated studies of ``n_users`` users: each rule's interval of each figure against ``true``.

    Returns:
        rule -> figure -> :class:`Cell`. The rules are measured without the printed minimum number of users
        (:func:`printed` applies it).
    """
    rng = np.random.default_rng([seed, n_users, len(gen.name)])
    figures = gen.figures()
    cells = {r: {f: Cell() for f in figures} for r in rules}
    for rep in range(reps):
        per = gen.draw(rng, n_users)
        weights = resample_weights(n_users, n_resamples, seed=rep) if set(rules) - {"jackknife-t"} else None
        boot = bootstrap_tables(per, weights) if weights is not None else per[:0]
        for name, stat in figures.items():
            for r in rules:
                if r == "studentized":
                    assert weights is not None
                    lo, hi = studentized(stat, per, boot, level, weights)
                elif r == "jackknife-t":
                    lo, hi = jackknife_t(stat, per, boot, level, gen.bounds(name))
                else:
                    lo, hi = percentile(stat, per, boot, level)
                cells[r][name].add(lo, hi, true[name])
    return cells


def printed(cell: Cell, n_users: int, min_users: int = MIN_USERS_FOR_CI) -> Cell:
    """The cell as the tool prints it: no interval at all below ``min_users`` users."""
    return cell if n_users >= min_users else Cell(reps=cell.reps)


def reaches(cell: Cell, target: float = TARGET) -> bool:
    """The cell's coverage is not significantly below ``target``: a one-sided 5% z-test on its Monte Carlo error.

    With ~40 figures of 400 studies each, a rule whose true coverage is 0.945 shows some cells under 0.93 by chance
    alone (MC SE 0.011), so the point estimate alone cannot be the test; a cell fails when even its coverage plus
    1.645 MC SE stays under the target.
    """
    return bool(cell.with_ci) and cell.coverage() + Z_ONE_SIDED * cell.mc_se() >= target


def minimum_users(results: Mapping[str, Mapping[int, Mapping[str, Cell]]], target: float = TARGET) -> int | None:
    """The smallest simulated number of users from which on every figure reaches ``target`` (None: never).

    Args:
        results: generator -> users -> figure -> cell, under one rule.
        target: Coverage every printed interval must reach (:func:`reaches`).
    """
    users = sorted({u for by_users in results.values() for u in by_users})
    ok = [all(reaches(c, target) for by_users in results.values() for c in by_users[u].values()) for u in users]
    for i, u in enumerate(users):
        if all(ok[i:]):
            return u
    return None


def table(results: Mapping[str, Mapping[int, Mapping[str, Cell]]], truths: Mapping[str, Mapping[str, float]],
          users: list[int], transform: Callable[[Cell, int], Cell] = lambda c, u: c) -> list[str]:
    """Markdown rows: generator, figure, truth, then one cell per number of users."""
    lines = ["| generator | figure | truth | " + " | ".join(f"{u} users" for u in users) + " |",
             "|---|---|---|" + "---|" * len(users)]
    for name, by_users in results.items():
        for fig in truths[name]:
            cells = [transform(by_users[u][fig], u).text() for u in users]
            lines.append(f"| {name} | {fig} | {truths[name][fig]:.3f} | " + " | ".join(cells) + " |")
    return lines


# --------------------------------------------------------------------------- AUC (not a sum over users)

def auc_study(rng: np.random.Generator, n: int) -> tuple[npt.NDArray[np.int64], FloatArray, npt.NDArray[np.str_]]:
    """A trained-verifier-like study: 5-25 items a user, user effects on the positive rate and on the scores."""
    user = np.repeat(np.arange(n), rng.integers(5, 26, n))
    prevalence = 1.0 / (1.0 + np.exp(-rng.normal(-0.5, 0.7, n)))[user]
    y = (rng.random(len(user)) < prevalence).astype(np.int64)
    score = 1.2 * y + rng.normal(0.0, 0.6, n)[user] + rng.normal(0.0, 1.0, len(user))
    return y, np.round(score, 1), user.astype(str)  # rounded: ties, as a classifier's scores have


def auc_cells(users: list[int], reps: int, seed: int = 0) -> tuple[float, dict[int, Cell]]:
    """Coverage of the trained verifier's AUC interval (:func:`auc_estimate`, measured without the minimum)."""
    from sklearn.metrics import roc_auc_score

    from personagap.stages.trained_verifier import leave_one_user_out_auc

    y, p, _ = auc_study(np.random.default_rng(12345), 100_000)
    true = float(roc_auc_score(y, p))
    out = {}
    for n in users:
        rng = np.random.default_rng([seed, n, 99])
        cell = Cell()
        for _ in range(reps):
            y, p, u = auc_study(rng, n)
            point, theta = leave_one_user_out_auc(y, p, u)
            cell.add(*interval_from_leave_outs(point, theta, 0.95, min_users=2).ci, true)
        out[n] = cell
    return true, out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--generators", nargs="+", default=list(generators()))
    parser.add_argument("--rules", nargs="+", default=list(RULES), choices=RULES)
    parser.add_argument("--quick", action="store_true", help="60 studies, 200 resamples, 10 and 20 users")
    parser.add_argument("--no-write", action="store_true", help=f"do not write {TABLE.name}")
    parser.add_argument("--auc", action="store_true",
                        help=f"only the trained verifier's AUC (not a sum over users), appended to {TABLE.name}")
    args = parser.parse_args()
    if args.auc:
        true, cells = auc_cells(args.users, args.reps)
        lines = ["", f"Trained verifier AUC (jackknife-t over exact leave-one-user-out AUCs; {args.reps} studies per "
                 "cell, no minimum applied):", "", "| figure | truth | " + " | ".join(f"{u} users" for u in args.users)
                 + " |", "|---|---|" + "---|" * len(args.users),
                 f"| auc | {true:.3f} | " + " | ".join(cells[u].text() for u in args.users) + " |"]
        print("\n".join(lines))
        if not args.no_write:
            with TABLE.open("a", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")
        return
    if args.quick:
        args.reps, args.resamples, args.users = 60, 200, [10, 20]
    rules = tuple(dict.fromkeys([*args.rules, CHOSEN]))
    results: dict[str, dict[str, dict[int, dict[str, Cell]]]] = {r: {} for r in rules}
    truths: dict[str, dict[str, float]] = {}
    for name in args.generators:
        gen = generators()[name]
        started = time.perf_counter()
        truths[name] = truth(gen)
        for u in args.users:
            by_rule = run(gen, u, args.reps, args.resamples, truths[name], rules=rules)
            for r in rules:
                results[r].setdefault(name, {})[u] = by_rule[r]
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    head = (f"Coverage of 95% intervals: {args.reps} simulated studies per cell ({args.resamples} resamples for the "
            "bootstrap rules); MC SE in brackets; w = median width; '-' = no interval printed.")
    print(head)
    for r in rules:
        print(f"\n### {r} (measured at every number of users)\n")
        print("\n".join(table(results[r], truths, args.users)))
    minimum = minimum_users(results[CHOSEN])
    verdict = (f"Every figure reaches {TARGET} (coverage + {Z_ONE_SIDED} MC SE) from {minimum} users on "
               f"(simulated: {args.users}): "
               f"{MINIMUM_LINE}{minimum}." if minimum is not None
               else f"Some figure stays below {TARGET} at {max(args.users)} users: no minimum found.")
    print(f"\n{verdict}")
    shown = MIN_USERS_FOR_CI if minimum is None else minimum
    out = [f"Coverage of the printed 95% intervals (rule: {CHOSEN}, no interval below {shown} users). "
           + head.split(": ", 1)[1], "", *table(results[CHOSEN], truths, args.users,
                                                 lambda c, u: printed(c, u, shown))]
    if "percentile" in rules:
        out += ["", "Before: the percentile cluster bootstrap (intervals printed from 5 users).", "",
                *table(results["percentile"], truths, args.users)]
    out += ["", verdict]
    if not args.no_write:
        TABLE.write_text("\n".join(out).rstrip() + "\n", encoding="utf-8")
        print(f"wrote {TABLE}", file=sys.stderr)


if __name__ == "__main__":
    main()
