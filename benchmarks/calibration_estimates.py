"""Calibration of the corrected estimates of a human rate (issue 21): does each printed 95% interval cover?

Simulated studies with known truth, from :mod:`benchmarks.calibration`'s binary generators (``skewed-binary``,
stage-2-like, and ``balanced-binary``): every user's items carry a human and a judge label, the judge labels them
all, and humans label a subset chosen

* ``items``: at random over items (each item with probability p), or
* ``users``: as whole users (a random p of the users, at least one), as annotation campaigns run,

with p = 10%, 30%, 50%. Each study's intervals are the tool's own (:func:`personagap.analysis.estimates.estimate_row`
on the study's per-user counts, with its rule for withholding an interval); the old item-level PPI++ interval
(``ppi_py.ppi_mean_ci``, what the reports printed before issue 21) is measured beside them. The truth is the
pooled figure of a large population from the same generator: the human yes-rate for every estimate of it, the
judge's own yes-rate for the naive interval (it estimates the judge's rate). Coverage is over the studies where
an interval was printed, with its Monte Carlo SE; width is the median width.

A second table measures the user-clustered intervals without the withholding rule, by the number of users whose
items humans labelled (whole users labelled, 40 users): the minimum the code requires comes from it.

A third part (issue 30's audit, :func:`uneven_tables`) draws worlds of its own, written independently of
``benchmarks/calibration_uneven.py``: very unequal users (60% 1-3 items, 30% 10-40, 10% 150-300) whose heavy users
are like or unlike the rest, 1-3 items a user, 2-5% "yes" with even or uneven sizes; humans label whole users (K of
2K) or a share of items (about K labelled users), K = 15, 20, 50. It reports every printed interval's coverage,
the share printed and the median width, the points' bias, and coverage split by whether the labelled users include
a heavy user (what no interval can fix: docs/intervals.md, "Where it does not hold").

Run: python benchmarks/calibration_estimates.py [--reps 400] [--users 5 10 20 50] [--quick] [--uneven-reps 300]
[--worlds ...] [--uneven-only]
Writes the markdown tables to benchmarks/calibration_estimates_table.md (pasted into the README).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import ppi_py
from scipy.stats import t as t_dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration import Cell, Generator, generators, truth  # noqa: E402
from personagap.analysis.agreement import interval_from_leave_outs, leave_one_out  # noqa: E402
from personagap.analysis.estimates import (  # noqa: E402
    MIN_LABELLED_USERS,
    RATE,
    _rates,
    _share,
    estimate_row,
    human_rate_from_users,
    ppi_user_sums,
)
from personagap.analysis.ppi import ppi_stat  # noqa: E402

FloatArray = npt.NDArray[np.float64]
TABLE = Path(__file__).with_name("calibration_estimates_table.md")
FRACTIONS = (0.1, 0.3, 0.5)
DESIGNS = ("items", "users")
METHODS = ("human_only", "naive", "rogan_gladen", "ppi_item_level", "ppi_clustered")
UNRESTRICTED = ("human_only", "rogan_gladen", "ppi_clustered", "ppi_clustered_df")
PRINTED = ("human_only", "rogan_gladen", "ppi_clustered")
"""The intervals the tool prints that rest on the labelled users (the candidate row only informs the rule)."""
TARGET = 0.93
"""Coverage every printed 95% interval must reach (issue 21)."""
LABELLED_GRID = [3, 4, 5, 6, 8, 10, 12, 15, 20]
LABELS = {"human_only": "human only", "naive": "naive judge rate", "rogan_gladen": "Rogan-Gladen",
          "ppi_item_level": "PPI++ item-level (before)", "ppi_clustered": "PPI++ user-clustered",
          "ppi_clustered_df": "PPI++ user-clustered, t with labelled users - 1 df (candidate)"}


def labelled_tables(rng: np.random.Generator, tables: FloatArray, design: str, fraction: float) -> FloatArray:
    """The human-labelled part of per-user tables ``(U, 2, 2)`` under a labelling design."""
    if design == "items":
        return rng.binomial(tables.astype(np.int64), fraction).astype(float)
    n = tables.shape[0]
    chosen = rng.choice(n, max(1, round(fraction * n)), replace=False)
    out = np.zeros_like(tables)
    out[chosen] = tables[chosen]
    return out


def study_counts(tables: FloatArray, labelled: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per-user counts ``(U, 6)`` as the reports build them, and the human-only per-user ``(positives, labels)``."""
    counts = np.column_stack([tables[:, :, 1].sum(axis=1), tables.sum(axis=(1, 2)), labelled[:, 1, 1],
                              labelled[:, 1, 0], labelled[:, 0, 1], labelled[:, 0, 0]])
    human = np.column_stack([labelled[:, 1, :].sum(axis=1), labelled.sum(axis=(1, 2))])
    return counts, human[human[:, 1] > 0]


def _item_level_ppi(tables: FloatArray, labelled: FloatArray) -> tuple[float, float]:
    # The old interval: ppi_py on item vectors, items as independent.
    lab, unl = labelled.sum(axis=0), (tables - labelled).sum(axis=0)
    y = np.repeat([1.0, 1.0, 0.0, 0.0], [int(lab[1, 1]), int(lab[1, 0]), int(lab[0, 1]), int(lab[0, 0])])
    f = np.repeat([1.0, 0.0, 1.0, 0.0], [int(lab[1, 1]), int(lab[1, 0]), int(lab[0, 1]), int(lab[0, 0])])
    g = np.repeat([1.0, 0.0], [int(unl[:, 1].sum()), int(unl[:, 0].sum())])
    if y.size < 2 or g.size == 0:
        return float("nan"), float("nan")
    lo, hi = ppi_py.ppi_mean_ci(y, f, g, alpha=0.05)
    return float(np.ravel(lo)[0]), float(np.ravel(hi)[0])


def run_cells(gen: Generator, n_users: int, design: str, fraction: float, reps: int,
              true: dict[str, float], seed: int = 0) -> dict[str, Cell]:
    """``reps`` studies: each printed interval of each estimate against its truth."""
    rng = np.random.default_rng([seed, n_users, len(gen.name), DESIGNS.index(design), round(fraction * 100)])
    cells = {m: Cell() for m in METHODS}
    for _ in range(reps):
        tables = gen.draw(rng, n_users)
        labelled = labelled_tables(rng, tables, design, fraction)
        counts, human = study_counts(tables, labelled)
        row = estimate_row(counts, human_rate_from_users(human), judge="j", dataset="d", quantity="yes_rate",
                           rater_kind="llm", humans="blind", n_human=int(human[:, 1].sum()))
        human_rate = true["human_yes_rate"]
        for m, ci in (("human_only", row.human_only_ci), ("rogan_gladen", row.rogan_gladen_ci),
                      ("ppi_clustered", row.ppi_ci)):
            cells[m].add(ci[0], ci[1], human_rate)
        cells["naive"].add(row.naive_ci[0], row.naive_ci[1], true["judge_yes_rate"])
        cells["ppi_item_level"].add(*_item_level_ppi(tables, labelled), human_rate)
    return cells


def _unrestricted(stat: Callable[[FloatArray], FloatArray], per_cluster: FloatArray,
                 bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    # The one CI rule's interval without any minimum number of users (as benchmarks/calibration.py measures it), on
    # the scale the tool builds that figure's interval on (``bounds`` as estimates.py passes them).
    point, theta = leave_one_out(stat, per_cluster)
    lo, hi = interval_from_leave_outs(point, theta, min_users=2, bounds=bounds).ci
    return float(lo), float(hi)


def _with_labelled_df(ci: tuple[float, float], point: float, n_users: int, n_labelled: int) -> tuple[float, float]:
    # Candidate: the same interval with t_{K-1} (K labelled users) in place of t_{U-1}: the rectifier's variance
    # rests on the K labelled users. Measured here to inform the rule (ci_rule), not printed by the tool.
    if n_labelled < 2:
        return float("nan"), float("nan")
    r = float(t_dist.ppf(0.975, n_labelled - 1) / t_dist.ppf(0.975, n_users - 1))
    return point - (point - ci[0]) * r, point + (ci[1] - point) * r


def by_labelled_users(gen: Generator, labelled_users: list[int], reps: int, true: dict[str, float],
                      n_users: int = 40) -> dict[int, dict[str, Cell]]:
    """Coverage of the user-clustered intervals with no minimum, by the number of whole users labelled."""
    out: dict[int, dict[str, Cell]] = {}
    for k in labelled_users:
        rng = np.random.default_rng([7, k, len(gen.name)])
        cells = {m: Cell() for m in UNRESTRICTED}
        for _ in range(reps):
            tables = gen.draw(rng, n_users)
            labelled = labelled_tables(rng, tables, "users", k / n_users)
            counts, human = study_counts(tables, labelled)
            ppi_users = ppi_user_sums(counts)
            ppi_ci = _unrestricted(ppi_stat, ppi_users, RATE)
            ci = {"human_only": _unrestricted(_share, human, RATE),
                  "rogan_gladen": _unrestricted(_rogan_gladen, counts),
                  "ppi_clustered": ppi_ci,
                  "ppi_clustered_df": _with_labelled_df(ppi_ci, float(ppi_stat(ppi_users.sum(axis=0))),
                                                        len(ppi_users), k)}
            for m, (lo, hi) in ci.items():
                cells[m].add(lo, hi, true["human_yes_rate"])
        out[k] = cells
    return out


def _rogan_gladen(totals: FloatArray) -> FloatArray:
    return np.asarray(_rates(totals)[3], dtype=float)


def minimum_labelled(cells: dict[str, dict[int, dict[str, Cell]]], target: float = TARGET) -> int | None:
    """The fewest labelled users from which every estimate covers at least ``target`` at that size and above."""
    ks = sorted(next(iter(cells.values())))
    for k in ks:
        if all(by_k[k2][m].coverage() >= target for by_k in cells.values() for k2 in ks if k2 >= k
               for m in PRINTED):
            return k
    return None


def _cell_text(c: Cell) -> str:
    if not c.with_ci:
        return "-"
    missing = f", {c.reps - c.with_ci} without" if c.with_ci < c.reps else ""
    return f"{c.coverage():.3f} ({c.mc_se():.3f}) w {float(np.median(c.widths)):.2f}{missing}"


# --------------------------------------------------------------------------- uneven worlds (issue 30 audit)
# Written for this audit, independently of benchmarks/calibration_uneven.py: users' rates are Beta draws (not
# logit-normal), sizes come from a three-class mixture, and the truth is exact (expectations of the mixture).

@dataclass(frozen=True)
class UserClass:
    """A class of users: its share, its items per user (inclusive range) and Beta(a, b) rates of the user's
    human "yes", the judge's sensitivity and the judge's false-positive rate."""

    share: float
    low: int
    high: int
    prevalence: tuple[float, float]
    sensitivity: tuple[float, float]
    false_positive: tuple[float, float]

    def mean_size(self) -> float:
        """Expected items per user of the class."""
        return (self.low + self.high) / 2.0


def _mean(beta: tuple[float, float]) -> float:
    return beta[0] / (beta[0] + beta[1])


@dataclass(frozen=True)
class UnevenWorld:
    """Users from a mixture of :class:`UserClass` es; per-user 2x2 tables (rows human no/yes, columns judge no/yes)."""

    name: str
    classes: tuple[UserClass, ...]
    about: str

    def draw(self, rng: np.random.Generator, n: int) -> FloatArray:
        """Per-user tables ``(n, 2, 2)`` of ``n`` users (each user's class drawn, so a study may lack a class)."""
        kind = rng.choice(len(self.classes), n, p=[c.share for c in self.classes])
        tables = np.zeros((n, 2, 2))
        for k, c in enumerate(self.classes):
            idx = np.flatnonzero(kind == k)
            if not idx.size:
                continue
            size = rng.integers(c.low, c.high + 1, idx.size)
            prev = rng.beta(*c.prevalence, idx.size)
            sens = rng.beta(*c.sensitivity, idx.size)
            fpr = rng.beta(*c.false_positive, idx.size)
            yes = rng.binomial(size, prev)
            tp = rng.binomial(yes, sens)
            fp = rng.binomial(size - yes, fpr)
            tables[idx, 1, 1], tables[idx, 1, 0] = tp, yes - tp
            tables[idx, 0, 1], tables[idx, 0, 0] = fp, size - yes - fp
        return tables

    def heavy(self, tables: FloatArray) -> npt.NDArray[np.bool_]:
        """Which users of a study belong to the heaviest class (by size: its sizes are disjoint from the others)."""
        big = max(self.classes, key=UserClass.mean_size)
        return np.asarray(tables.sum(axis=(1, 2)) >= big.low)

    def truth(self) -> dict[str, float]:
        """The item-weighted (pooled) human and judge yes-rates of the population, exactly."""
        w = np.array([c.share * c.mean_size() for c in self.classes])
        prev = np.array([_mean(c.prevalence) for c in self.classes])
        judge = np.array([_mean(c.prevalence) * _mean(c.sensitivity)
                          + (1 - _mean(c.prevalence)) * _mean(c.false_positive) for c in self.classes])
        return {"human_yes_rate": float((w * prev).sum() / w.sum()),
                "judge_yes_rate": float((w * judge).sum() / w.sum())}

    def labelled_share(self, p: float) -> float:
        """Expected share of users with at least one item labelled when each item is labelled with probability p."""
        return float(sum(c.share * np.mean([1 - (1 - p) ** n for n in range(c.low, c.high + 1)])
                         for c in self.classes))


_LIGHT, _MID, _HEAVY = (0.6, 1, 3), (0.3, 10, 40), (0.1, 150, 300)
_BASE = {"prevalence": (2.0, 8.0), "sensitivity": (8.0, 2.0), "false_positive": (1.5, 8.5)}
_RARE = {"prevalence": (0.7, 19.3), "sensitivity": (7.0, 3.0), "false_positive": (1.0, 19.0)}


def _cls(size: tuple[float, int, int], rates: dict[str, tuple[float, float]]) -> UserClass:
    return UserClass(size[0], size[1], size[2], rates["prevalence"], rates["sensitivity"], rates["false_positive"])


def uneven_worlds() -> dict[str, UnevenWorld]:
    """The audit's worlds by name."""
    heavy_unlike = {"prevalence": (5.0, 5.0), "sensitivity": (19.0, 1.0), "false_positive": (1.0, 32.0)}
    rare_heavy_unlike = {"prevalence": (1.6, 18.4), "sensitivity": (9.0, 1.0), "false_positive": (1.0, 49.0)}
    out = [
        UnevenWorld("uneven-like", tuple(_cls(s, _BASE) for s in (_LIGHT, _MID, _HEAVY)),
                    "60% of users 1-3 items, 30% 10-40, 10% 150-300; yes ~ Beta(2, 8), judge sens 0.8, fpr 0.15"),
        UnevenWorld("uneven-unlike", (_cls(_LIGHT, _BASE), _cls(_MID, _BASE), _cls(_HEAVY, heavy_unlike)),
                    "same sizes; heavy users 50% yes, judge sens 0.95 / fpr 0.03 on them"),
        UnevenWorld("few-items", (UserClass(1.0, 1, 3, **_BASE),), "1-3 items a user; rates as uneven-like"),
        UnevenWorld("rare", (UserClass(1.0, 5, 15, **_RARE),),
                    "5-15 items; yes ~ Beta(0.7, 19.3) (3.5%), judge sens 0.7, fpr 0.05"),
        UnevenWorld("rare-uneven", tuple(_cls(s, _RARE) for s in (_LIGHT, _MID, _HEAVY)), "rare with uneven sizes"),
        UnevenWorld("rare-uneven-unlike", (_cls(_LIGHT, _RARE), _cls(_MID, _RARE), _cls(_HEAVY, rare_heavy_unlike)),
                    "rare, uneven sizes; heavy users 8% yes, judge sens 0.9 / fpr 0.02 on them"),
    ]
    return {w.name: w for w in out}


UNEVEN_SIZES = (15, 20, 50)
"""Labelled users per study (the users design labels exactly this many; the items design about this many)."""
ITEM_SHARE = 0.3
"""The items design labels each item with this probability."""
UNEVEN_DESIGNS = ("users", "items")
UNEVEN_PRINTED = ("human_only", "naive", "rogan_gladen", "ppi_clustered")
UNEVEN_CANDIDATES = ("rogan_gladen_bounds", "ppi_identity")
"""Intervals the tool does not print, from the same studies: Rogan-Gladen with the range (0, 1) (the rule's logit
transform; not adopted: it covers either way and withholds more), and PPI++ on its own scale (no bounds), as printed
before this audit."""
UNEVEN_LABELS = {**LABELS, "rogan_gladen_bounds": "Rogan-Gladen, on the logit scale (candidate)",
                 "ppi_identity": "PPI++ user-clustered, no transform (printed before)"}


@dataclass
class UnevenCell:
    """Every interval of one world, design and size, with the points' bias and coverage split by heavy users."""

    cells: dict[str, Cell] = field(default_factory=lambda: {m: Cell() for m in (*UNEVEN_PRINTED,
                                                                                 *UNEVEN_CANDIDATES)})
    with_heavy: dict[str, Cell] = field(default_factory=lambda: {m: Cell() for m in UNEVEN_PRINTED})
    without_heavy: dict[str, Cell] = field(default_factory=lambda: {m: Cell() for m in UNEVEN_PRINTED})
    points: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in UNEVEN_PRINTED})
    labelled_users: list[int] = field(default_factory=list)
    no_heavy_labelled: int = 0


def _candidate(stat: Callable[[FloatArray], FloatArray], per: FloatArray, n_labelled: int,
               bounds: tuple[float, float] | None) -> tuple[float, float]:
    # The tool's rule with or without the figure's range, withheld below the labelled-user minimum as the tool does.
    if n_labelled < MIN_LABELLED_USERS:
        return float("nan"), float("nan")
    point, theta = leave_one_out(stat, per)
    lo, hi = interval_from_leave_outs(point, theta, bounds=bounds, per_cluster=per).ci
    return float(lo), float(hi)


def uneven_study(world: UnevenWorld, design: str, size: int,
                 rng: np.random.Generator) -> tuple[FloatArray, FloatArray]:
    """One study's per-user tables and their human-labelled part."""
    if design == "users":
        tables = world.draw(rng, 2 * size)
        return tables, labelled_tables(rng, tables, "users", 0.5)
    tables = world.draw(rng, max(2, round(size / world.labelled_share(ITEM_SHARE))))
    return tables, labelled_tables(rng, tables, "items", ITEM_SHARE)


def run_uneven(world: UnevenWorld, design: str, size: int, reps: int, seed: int = 30) -> UnevenCell:
    """``reps`` studies of one world, design and size: each printed interval (the tool's own) against the truth."""
    rng = np.random.default_rng([seed, size, UNEVEN_DESIGNS.index(design), *map(ord, world.name)])
    true = world.truth()
    out = UnevenCell()
    for _ in range(reps):
        tables, labelled = uneven_study(world, design, size, rng)
        counts, human = study_counts(tables, labelled)
        row = estimate_row(counts, human_rate_from_users(human), judge="j", dataset="d", quantity="yes_rate",
                           rater_kind="llm", humans="blind", n_human=int(human[:, 1].sum()))
        ppi_users = ppi_user_sums(counts)
        has_labels = labelled.sum(axis=(1, 2)) > 0
        heavy = bool((world.heavy(tables) & has_labels).any())
        out.labelled_users.append(int(has_labels.sum()))
        out.no_heavy_labelled += int(not heavy)
        printed = {"human_only": (row.human_only_ci, row.human_only), "naive": (row.naive_ci, row.naive),
                   "rogan_gladen": (row.rogan_gladen_ci, row.rogan_gladen), "ppi_clustered": (row.ppi_ci, row.ppi)}
        for m, (ci, point) in printed.items():
            t = true["judge_yes_rate" if m == "naive" else "human_yes_rate"]
            lo, hi = (float("nan") if v is None else v for v in ci)
            out.cells[m].add(lo, hi, t)
            (out.with_heavy if heavy else out.without_heavy)[m].add(lo, hi, t)
            out.points[m].append(float("nan") if point is None else float(point))
        out.cells["rogan_gladen_bounds"].add(*_candidate(_rogan_gladen, counts, row.n_labelled_users, (0.0, 1.0)),
                                             true["human_yes_rate"])
        out.cells["ppi_identity"].add(*_candidate(ppi_stat, ppi_users, row.n_labelled_users, None),
                                      true["human_yes_rate"])
    return out


def _fails(c: Cell) -> bool:
    return bool(c.with_ci) and c.coverage() + 1.645 * c.mc_se() < TARGET


def uneven_tables(reps: int, sizes: tuple[int, ...] = UNEVEN_SIZES, names: list[str] | None = None) -> list[str]:
    """The markdown of the uneven worlds: coverage of every printed interval, the candidates, and diagnostics."""
    all_worlds = uneven_worlds()
    names = names or list(all_worlds)
    lines = ["", f"## Uneven worlds (issue 30 audit; {reps} studies a cell)", "",
             "Generators written for this audit (not those of `benchmarks/calibration_uneven.py`): users' rates are "
             "Beta draws, truth exact. Designs: `users` = 2K users, K of them labelled whole; `items` = every item "
             f"labelled with probability {ITEM_SHARE}, users enough for about K labelled users (mean labelled users "
             "in brackets). A cell fails (**bold**) when coverage + 1.645 MC SE < 0.93. Rows in italics are not "
             "printed by the tool (computed from the same studies).", ""]
    lines += [f"- `{n}`: {all_worlds[n].about}; truth human {all_worlds[n].truth()['human_yes_rate']:.4f}, "
              f"judge {all_worlds[n].truth()['judge_yes_rate']:.4f}" for n in names]
    lines += ["", "| world | design | estimate | " + " | ".join(f"K={k}" for k in sizes) + " |",
              "|---|---|---|" + "---|" * len(sizes)]
    diag = ["", "Diagnostics: bias of the point (mean estimate - truth); coverage of the printed interval in studies "
            "whose labelled users include a heavy (150-300 item) user and in studies whose labelled users include "
            "none (share of such studies in brackets).", "",
            "| world | design | estimate | K | bias | with heavy | without heavy (share) |",
            "|---|---|---|---|---|---|---|"]
    started = time.perf_counter()
    for name in names:
        world = all_worlds[name]
        true = world.truth()
        for design in UNEVEN_DESIGNS:
            runs = {k: run_uneven(world, design, k, reps) for k in sizes}
            for m in (*UNEVEN_PRINTED, *UNEVEN_CANDIDATES):
                cells = [runs[k].cells[m] for k in sizes]
                texts = [(f"**{_cell_text(c)}**" if _fails(c) else _cell_text(c)) for c in cells]
                label = UNEVEN_LABELS[m] if m in UNEVEN_PRINTED else f"*{UNEVEN_LABELS[m]}*"
                what = design if design == "users" else \
                    f"items ({', '.join(f'{np.mean(runs[k].labelled_users):.0f}' for k in sizes)})"
                lines.append(f"| {name} | {what} | {label} | " + " | ".join(texts) + " |")
            for k in sizes if len(world.classes) > 1 else ():
                r = runs[k]
                for m in UNEVEN_PRINTED:
                    t = true["judge_yes_rate" if m == "naive" else "human_yes_rate"]
                    bias = float(np.nanmean(r.points[m])) - t
                    wo = r.without_heavy[m]
                    share = r.no_heavy_labelled / reps
                    diag.append(f"| {name} | {design} | {UNEVEN_LABELS[m]} | {k} | {bias:+.4f} | "
                                f"{_cell_text(r.with_heavy[m])} | {_cell_text(wo)} ({share:.2f}) |")
            print(f"<!-- {name} {design}: {time.perf_counter() - started:.0f} s -->", file=sys.stderr, flush=True)
    return lines + diag


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[5, 10, 20, 50])
    parser.add_argument("--labelled-reps", type=int, default=800,
                        help="studies per cell of the table the labelled-user minimum is chosen from")
    parser.add_argument("--generators", nargs="+", default=["skewed-binary", "balanced-binary"])
    parser.add_argument("--quick", action="store_true", help="60 studies a cell, 10 and 20 users, one generator")
    parser.add_argument("--uneven-reps", type=int, default=300, help="studies per cell of the uneven worlds")
    parser.add_argument("--worlds", nargs="+", default=None, help="uneven worlds to run [default: all]")
    parser.add_argument("--uneven-only", action="store_true", help="only the uneven worlds (printed, not written)")
    args = parser.parse_args()
    if args.uneven_only:
        print("\n".join(uneven_tables(args.uneven_reps, names=args.worlds)))
        return
    if args.quick:
        args.reps, args.labelled_reps, args.users, args.generators = 60, 60, [10, 20], ["skewed-binary"]
    started = time.perf_counter()
    lines = [f"Coverage of the printed 95% intervals of the corrected estimates: {args.reps} simulated studies per "
             "cell; MC SE in brackets; w = median width; '-' = no interval printed; 'N without' = studies where "
             "none was printed.", "",
             "| generator | humans label | estimate | truth | " + " | ".join(f"{u} users" for u in args.users) + " |",
             "|---|---|---|---|" + "---|" * len(args.users)]
    for name in args.generators:
        gen = generators()[name]
        true = truth(gen)
        for design in DESIGNS:
            for fraction in FRACTIONS:
                runs = {u: run_cells(gen, u, design, fraction, args.reps, true) for u in args.users}
                what = f"{fraction:.0%} of {design}"
                for m in METHODS:
                    t = true["judge_yes_rate" if m == "naive" else "human_yes_rate"]
                    lines.append(f"| {name} | {what} | {LABELS[m]} | {t:.3f} | "
                                 + " | ".join(_cell_text(runs[u][m]) for u in args.users) + " |")
                print(f"<!-- {name} {what}: {time.perf_counter() - started:.0f} s -->", file=sys.stderr, flush=True)
    ks = LABELLED_GRID
    lines += ["", "Coverage of the user-clustered intervals without the labelled-user minimum, by the number of whole "
              f"users humans labelled (40 users, {args.labelled_reps} studies each):", "",
              "| generator | estimate | " + " | ".join(f"{k} labelled" for k in ks) + " |",
              "|---|---|" + "---|" * len(ks)]
    by_gen = {}
    for name in args.generators:
        gen = generators()[name]
        by_gen[name] = cells = by_labelled_users(gen, ks, args.labelled_reps, truth(gen))
        for m in UNRESTRICTED:
            lines.append(f"| {name} | {LABELS[m]} | " + " | ".join(_cell_text(cells[k][m]) for k in ks) + " |")
    least = minimum_labelled(by_gen)
    lines.append("\nFewest human-labelled users from which every one of these intervals covers at least "
                 f"{TARGET}: {least if least is not None else 'not reached in this grid'} "
                 f"(estimates.MIN_LABELLED_USERS is {MIN_LABELLED_USERS}).")
    lines += uneven_tables(args.uneven_reps if not args.quick else 60, names=args.worlds)
    lines.append(f"\n<!-- {time.perf_counter() - started:.0f} s -->")
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        TABLE.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
