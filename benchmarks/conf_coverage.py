"""Coverage of the confidence figures' intervals (issue 23): do the printed 95% CIs hold the truth 95% of the time?

A generator with known truth, shaped like PRISM's stated certainties: users (clusters) with 1-6 items, each item a
certainty on 1-100 drawn from the values PRISM's judges use most, and the judge right with probability
``sigmoid(a + b (c - 60) / 20 + u)``, ``u`` a user effect ~ N(0, sigma^2). The truth of each figure is its value on
population totals, computed exactly by Gauss-Hermite quadrature over ``u``:

* per certainty value v (share pi_v), the rate of right answers m_v = E_u sigmoid(a + b z_v + u);
* reliability bin agreement: sum_{v in bin} pi_v m_v / sum pi_v; Brier: sum_v pi_v (m_v (1 - p_v)^2 +
  (1 - m_v) p_v^2); ECE: sum_bins |sum_{v in bin} pi_v (m_v - p_v)|;
* accuracy at threshold t: sum_{v >= t} pi_v m_v / sum_{v >= t} pi_v; kappa there (humans A/B at 50%, errors
  symmetric): 2 accuracy - 1;
* the held-out accuracy of the chosen threshold: the truth at the threshold chosen on the other half.

Every interval is the tool's own (:func:`personagap.analysis.calibration.calibration`,
:func:`personagap.analysis.coverage.coverage_curve` / :func:`~personagap.analysis.coverage.choose_threshold`);
coverage is counted over the studies where an interval is printed, with its Monte Carlo SE.

Run: python benchmarks/conf_coverage.py [--reps 300] [--users 10 20 50] [--uneven-reps 300] [--uneven-users 20 50]
[--worlds ...] [--uneven-only]; writes benchmarks/conf_coverage_table.md (not with --uneven-only).

The uneven worlds (:func:`uneven_generators`, issue 30's audit) draw users of very unequal sizes (heavy users like
or unlike the rest) or 1-3 items each, with the judge's confidence informative, uninformative or miscalibrated.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from personagap.analysis.calibration import DEFAULT_BINS, bin_index, calibration  # noqa: E402
from personagap.analysis.coverage import Target, choose_threshold, coverage_curve  # noqa: E402
from personagap.confidence import as_probability  # noqa: E402
from personagap.records import PAIRWISE_LABELS, DatasetScale  # noqa: E402

SCALE = "1-100"
VALUES = np.array([41.0, 45.0, 60.0, 61.0, 65.0, 75.0, 81.0, 85.0, 90.0])
SHARES = np.array([0.05, 0.08, 0.3, 0.1, 0.17, 0.1, 0.06, 0.04, 0.1])
PAIR_SCALE = DatasetScale(kind="pairwise", categories=PAIRWISE_LABELS)


class Source(Protocol):
    """What the harness needs of a world: its population rates of right answers per certainty value, and studies."""

    def right_rate(self) -> np.ndarray:
        """The pooled (item-weighted) rate of right answers per value of ``VALUES``."""
        ...

    def study(self, n_users: int, rng: np.random.Generator) -> pd.DataFrame:
        """One simulated study as the store's confidence counts."""
        ...


@dataclass(frozen=True)
class Generator:
    """The judge's accuracy model and the users' sizes."""

    a: float = 0.9
    b: float = 0.6
    sigma: float = 0.6
    max_items: int = 6

    def right_rate(self) -> np.ndarray:
        """m_v = E_u sigmoid(a + b z_v + u) per certainty value, by Gauss-Hermite quadrature (60 nodes)."""
        nodes, weights = np.polynomial.hermite_e.hermegauss(60)
        z = (VALUES - 60.0) / 20.0
        logits = self.a + self.b * z[:, None] + self.sigma * nodes[None, :]
        return np.asarray((1.0 / (1.0 + np.exp(-logits))) @ (weights / weights.sum()))

    def study(self, n_users: int, rng: np.random.Generator) -> pd.DataFrame:
        """One simulated study as the store's confidence counts (one row per item, ``n`` = 1)."""
        sizes = rng.integers(1, self.max_items + 1, size=n_users)
        user = np.repeat(np.arange(n_users), sizes)
        effect = rng.normal(0.0, self.sigma, size=n_users)[user]
        value = VALUES[rng.choice(len(VALUES), size=user.size, p=SHARES)]
        right = rng.random(user.size) < 1.0 / (1.0 + np.exp(-(self.a + self.b * (value - 60.0) / 20.0 + effect)))
        human = np.where(rng.random(user.size) < 0.5, "A", "B")
        label = np.where(right, human, np.where(human == "A", "B", "A"))
        return pd.DataFrame({"user_id": [f"u{u:04d}" for u in user], "confidence": value, "human": human,
                             "label": label, "n": 1})


@dataclass(frozen=True)
class Truth:
    """The population values of every figure."""

    bins: dict[int, float]
    brier: float
    ece: float
    accuracy: dict[float, float]

    @classmethod
    def of(cls, gen: Source) -> Truth:
        """Exact truths from the generator (see the module docstring)."""
        m, p = gen.right_rate(), as_probability(VALUES, SCALE)
        bins = bin_index(p, DEFAULT_BINS)
        agreement = {int(b): float((SHARES * m)[bins == b].sum() / SHARES[bins == b].sum()) for b in set(bins)}
        brier = float((SHARES * (m * (1 - p) ** 2 + (1 - m) * p ** 2)).sum())
        ece = float(sum(abs((SHARES * (m - p))[bins == b].sum()) for b in set(bins)))
        accuracy = {float(v): float((SHARES * m)[VALUES >= v].sum() / SHARES[VALUES >= v].sum()) for v in VALUES}
        return cls(agreement, brier, ece, accuracy)


@dataclass
class Tally:
    """Studies with a printed interval, and how many held the truth."""

    printed: dict[str, int] = field(default_factory=dict)
    covered: dict[str, int] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    """Figures computed, with or without an interval (the share printed is ``printed / seen``)."""
    widths: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, ci: tuple[float, float], truth: float, users: int | None = None) -> None:
        """Count one interval (none printed -- NaN -- is not counted), by the users it is over when given."""
        if users is not None:
            name += f" ({_band(users)} users)"
        self.seen[name] = self.seen.get(name, 0) + 1
        if math.isnan(ci[0]) or math.isnan(ci[1]):
            return
        self.printed[name] = self.printed.get(name, 0) + 1
        self.covered[name] = self.covered.get(name, 0) + int(ci[0] <= truth <= ci[1])
        self.widths.setdefault(name, []).append(ci[1] - ci[0])

    def details(self) -> dict[str, tuple[float, float, int, int, float]]:
        """Figure -> (coverage, MC SE, intervals printed, figures computed, median width); NaN where none printed."""
        out = {}
        for name, seen in sorted(self.seen.items()):
            n = self.printed.get(name, 0)
            c = self.covered.get(name, 0) / n if n else float("nan")
            se = math.sqrt(c * (1 - c) / n) if n else float("nan")
            out[name] = (c, se, n, seen, float(np.median(self.widths[name])) if n else float("nan"))
        return out

    def coverage(self) -> dict[str, tuple[float, float, int]]:
        """Figure -> (coverage, Monte Carlo SE, studies with an interval)."""
        out = {}
        for name, n in sorted(self.printed.items()):
            c = self.covered[name] / n
            out[name] = (c, math.sqrt(c * (1 - c) / n), n)
        return out


# --------------------------------------------------------------------------- uneven worlds (issue 30 audit)
# Written for this audit, not taken from benchmarks/calibration_uneven.py: users from a mixture of classes of
# different sizes, each class with its own accuracy model; the certainty values are drawn alike for every user, so
# the pooled rate of right answers at a value is the item-weighted mixture of the classes' rates (exact).

@dataclass(frozen=True)
class ConfClass:
    """Users of one kind: share, items per user (inclusive), and right ~ sigmoid(a + b (c - 60) / 20 + u)."""

    share: float
    low: int
    high: int
    a: float
    b: float
    sigma: float = 0.6

    def right_rate(self) -> np.ndarray:
        """The class's rate of right answers per certainty value (Gauss-Hermite over the user effect)."""
        return Generator(self.a, self.b, self.sigma).right_rate()


@dataclass(frozen=True)
class UnevenGenerator:
    """Users drawn from :class:`ConfClass` es (a study may lack a class, as a small sample lacks heavy users)."""

    name: str
    classes: tuple[ConfClass, ...]
    about: str

    def right_rate(self) -> np.ndarray:
        """The pooled rate per value: classes weighted by their expected items."""
        w = np.array([c.share * (c.low + c.high) / 2.0 for c in self.classes])
        rates = np.stack([c.right_rate() for c in self.classes])
        return np.asarray((w[:, None] * rates).sum(axis=0) / w.sum())

    def study(self, n_users: int, rng: np.random.Generator) -> pd.DataFrame:
        """One simulated study as the store's confidence counts (one row per item, ``n`` = 1)."""
        kind = rng.choice(len(self.classes), n_users, p=[c.share for c in self.classes])
        low = np.array([c.low for c in self.classes])[kind]
        high = np.array([c.high for c in self.classes])[kind]
        sizes = rng.integers(low, high + 1)
        user = np.repeat(np.arange(n_users), sizes)
        a, b, sigma = (np.array([getattr(c, k) for c in self.classes])[kind][user] for k in ("a", "b", "sigma"))
        effect = (rng.normal(0.0, 1.0, n_users)[user]) * sigma
        value = VALUES[rng.choice(len(VALUES), size=user.size, p=SHARES)]
        right = rng.random(user.size) < 1.0 / (1.0 + np.exp(-(a + b * (value - 60.0) / 20.0 + effect)))
        human = np.where(rng.random(user.size) < 0.5, "A", "B")
        label = np.where(right, human, np.where(human == "A", "B", "A"))
        return pd.DataFrame({"user_id": [f"u{u:04d}" for u in user], "confidence": value, "human": human,
                             "label": label, "n": 1})


def uneven_generators() -> dict[str, UnevenGenerator]:
    """The audit's worlds by name: very unequal sizes (heavy users like / unlike), 1-3 items a user, and the
    judge's confidence informative, uninformative (b = 0) or miscalibrated (overconfident: right about half the
    time at a stated 60-90)."""
    def sizes(a: float, b: float, heavy: tuple[float, float] | None = None) -> tuple[ConfClass, ...]:
        ha, hb = heavy or (a, b)
        return (ConfClass(0.6, 1, 3, a, b), ConfClass(0.3, 10, 40, a, b), ConfClass(0.1, 150, 300, ha, hb))

    out = [
        UnevenGenerator("unequal-like informative", sizes(0.9, 0.6),
                        "60% of users 1-3 items, 30% 10-40, 10% 150-300, all alike; a 0.9, b 0.6"),
        UnevenGenerator("unequal-unlike informative", sizes(0.4, 0.4, (2.2, 1.2)),
                        "same sizes; heavy users a 2.2, b 1.2 (judge far better and more confident-right on them), "
                        "the rest a 0.4, b 0.4"),
        UnevenGenerator("unequal-unlike uninformative", sizes(0.9, 0.0, (2.0, 0.0)),
                        "same sizes; b 0; heavy users a 2.0, the rest a 0.9"),
        UnevenGenerator("unequal-like miscalibrated", sizes(-0.1, 0.3),
                        "same sizes, all alike; a -0.1, b 0.3 (overconfident)"),
        UnevenGenerator("few-items informative", (ConfClass(1.0, 1, 3, 0.9, 0.6),), "1-3 items a user; a 0.9, b 0.6"),
        UnevenGenerator("few-items uninformative", (ConfClass(1.0, 1, 3, 0.9, 0.0),), "1-3 items a user; b 0"),
        UnevenGenerator("few-items miscalibrated", (ConfClass(1.0, 1, 3, -0.1, 0.3),),
                        "1-3 items a user; a -0.1, b 0.3"),
    ]
    return {g.name: g for g in out}


def _band(users: int) -> str:
    # Points of a curve and bins span fewer users than the study: coverage is reported by the users they span.
    return next(f"{lo}-{hi}" for lo, hi in ((1, 9), (10, 19), (20, 49), (50, 10**9)) if users <= hi).replace(
        "-1000000000", "+")


def simulate(n_users: int, reps: int, seed: int, gen: Source | None = None,
             target_accuracy: float = 0.75) -> dict[str, tuple[float, float, int]]:
    """Coverage of every confidence figure's interval over ``reps`` studies of ``n_users`` users."""
    return run(n_users, reps, seed, gen, target_accuracy).coverage()


def run(n_users: int, reps: int, seed: int, gen: Source | None = None, target_accuracy: float = 0.75) -> Tally:
    """Every confidence figure's interval over ``reps`` studies of ``n_users`` users, tallied."""
    gen = gen or Generator()
    truth = Truth.of(gen)
    rng = np.random.default_rng(seed)
    tally = Tally()
    p = as_probability(VALUES, SCALE)
    bin_of = dict(zip(VALUES.tolist(), bin_index(p, DEFAULT_BINS).tolist(), strict=True))
    for _ in range(reps):
        rows = gen.study(n_users, rng)
        cal = calibration(rows, SCALE)
        tally.add("brier", cal.brier.ci, truth.brier)
        tally.add("ece", cal.ece.ci, truth.ece)
        for b in cal.bins:
            lo_bin = bin_of[min(v for v in VALUES if b.lo <= v <= b.hi)]
            tally.add("bin agreement", b.agreement.ci, truth.bins[lo_bin], b.agreement.n_clusters)
        for point in coverage_curve(rows, PAIR_SCALE):
            acc = truth.accuracy[point.min_confidence]
            tally.add("accuracy at threshold", point.accuracy.ci, acc, point.accuracy.n_clusters)
            tally.add("kappa at threshold", point.kappa.ci, 2 * acc - 1, point.kappa.n_clusters)
        choice = choose_threshold(rows, PAIR_SCALE, Target("accuracy", target_accuracy, "given"))
        if choice.held_out is not None and choice.min_confidence is not None:
            acc = truth.accuracy[choice.min_confidence]
            tally.add("held-out accuracy", choice.held_out.accuracy.ci, acc, choice.held_out.accuracy.n_clusters)
            tally.add("held-out kappa", choice.held_out.kappa.ci, 2 * acc - 1, choice.held_out.kappa.n_clusters)
    return tally


def self_agreement_truth(mu: float = 1.0, sigma_user: float = 0.5, sigma_item: float = 1.0) -> float:
    """Pooled pair agreement of the self-agreement generator: E[q^2 + (1 - q)^2], q = sigmoid(mu + u + e)."""
    rng = np.random.default_rng(12345)
    q = 1.0 / (1.0 + np.exp(-(mu + rng.normal(0, sigma_user, 4_000_000) + rng.normal(0, sigma_item, 4_000_000))))
    return float(np.mean(q ** 2 + (1 - q) ** 2))


def simulate_self_agreement(n_users: int, reps: int, seed: int, k: int = 3, mu: float = 1.0,
                            sigma_user: float = 0.5, sigma_item: float = 1.0) -> dict[str, tuple[float, float, int]]:
    """Coverage of the self-agreement interval: K binary samples per item, the item's rate q = sigmoid(mu + u + e)."""
    from personagap.analysis.self_agreement import self_agreement

    truth = self_agreement_truth(mu, sigma_user, sigma_item)
    rng = np.random.default_rng(seed)
    tally = Tally()
    for _ in range(reps):
        sizes = rng.integers(1, 7, size=n_users)
        user = np.repeat(np.arange(n_users), sizes)
        logit = mu + rng.normal(0, sigma_user, n_users)[user] + rng.normal(0, sigma_item, user.size)
        q = 1.0 / (1.0 + np.exp(-logit))
        labels = np.where(rng.random((user.size, k)) < q[:, None], "A", "B")
        frame = pd.DataFrame({"item_id": np.repeat(np.arange(user.size), k), "user_id": np.repeat(user, k),
                              "sample": np.tile(np.arange(k), user.size), "label": labels.ravel()})
        tally.add("self-agreement", self_agreement(frame, k).agreement.ci, truth)
    return tally.coverage()


def ece_by_size(gen: Source, n_users: int, reps: int, seed: int) -> tuple[float, float, float, float, float]:
    """ECE's interval by the rule with no minimum (users or items): (mean items, truth, mean ECE, coverage, MC SE).

    What :data:`personagap.analysis.calibration.ECE_MIN_ITEMS_FOR_CI` is chosen from.
    """
    from personagap.analysis.calibration import _ece, per_user_sums
    from personagap.analysis.ci_rule import interval_from_leave_outs, leave_one_out

    truth = Truth.of(gen).ece
    rng = np.random.default_rng(seed)
    covered, points, items = 0, [], []
    for _ in range(reps):
        _, per = per_user_sums(gen.study(n_users, rng), SCALE)
        point, theta = leave_one_out(_ece, per)
        lo, hi = interval_from_leave_outs(point, theta, bounds=(0.0, 1.0), min_users=2).ci
        covered += int(lo <= truth <= hi)
        points.append(point)
        items.append(float(per[..., 0].sum()))
    c = covered / reps
    return float(np.mean(items)), truth, float(np.mean(points)), c, math.sqrt(c * (1 - c) / reps)


TARGET = 0.93
TABLE = Path(__file__).with_name("conf_coverage_table.md")


def _row(world: str, n_users: int, name: str, c: float, se: float, n: int, seen: int, width: float) -> str:
    fails = n > 0 and c + 1.645 * se < TARGET
    cov = "-" if not n else (f"**{c:.3f}**" if fails else f"{c:.3f}")
    return (f"| {world} | {n_users} | {name} | {cov} | {'-' if not n else f'{se:.3f}'} | {n}/{seen} | "
            f"{'-' if not n else f'{width:.2f}'} |")


def main() -> None:
    """Write the coverage tables (markdown): the first generator and the uneven worlds."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--users", type=int, nargs="+", default=[10, 20, 50])
    parser.add_argument("--uneven-reps", type=int, default=300)
    parser.add_argument("--uneven-users", type=int, nargs="+", default=[20, 50])
    parser.add_argument("--worlds", nargs="+", default=None, help="uneven worlds [default: all]")
    parser.add_argument("--uneven-only", action="store_true", help="only the uneven worlds, printed, not written")
    parser.add_argument("--ece-reps", type=int, default=200, help="studies per size of the ECE-by-size table")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    head = ["| world | users | figure | coverage | MC SE | printed / computed | median width |",
            "|---|---|---|---|---|---|---|"]
    lines: list[str] = []
    started = time.monotonic()
    if not args.uneven_only:
        lines += ["Coverage of the confidence figures' 95% intervals (`benchmarks/conf_coverage.py`). Points of a "
                  "curve and bins are counted by the users they span; curve points of one study are correlated, so "
                  "the MC SE of those rows is a lower bound. **Bold**: coverage + 1.645 MC SE < 0.93. 'printed / "
                  "computed': figures with an interval of those computed.", "",
                  f"## The first generator (PRISM-like, 1-6 items a user; {args.reps} studies a size)", "", *head]
        for n_users in args.users:
            table = run(n_users, args.reps, args.seed + n_users).details()
            from personagap.analysis.self_agreement import self_agreement  # noqa: F401  (checked importable)

            for name, (c, se, n, seen, width) in table.items():
                lines.append(_row("PRISM-like", n_users, name, c, se, n, seen, width))
            for name, (c, se, n) in simulate_self_agreement(n_users, args.reps, args.seed + n_users).items():
                lines.append(_row("self-agreement K=3", n_users, name, c, se, n, n, float("nan")))
            print(f"<!-- {n_users} users: {time.monotonic() - started:.1f}s -->", file=sys.stderr, flush=True)
    gens = uneven_generators()
    names = args.worlds or list(gens)
    lines += ["", f"## Uneven worlds (issue 30 audit; {args.uneven_reps} studies a cell)", ""]
    lines += [f"- `{n}`: {gens[n].about}" for n in names]
    lines += ["", *head]
    for name in names:
        for n_users in args.uneven_users:
            table = run(n_users, args.uneven_reps, args.seed + 1000 + n_users, gens[name]).details()
            for fig, (c, se, n, seen, width) in table.items():
                lines.append(_row(name, n_users, fig, c, se, n, seen, width))
            print(f"<!-- {name} {n_users}: {time.monotonic() - started:.1f}s -->", file=sys.stderr, flush=True)
    if not args.uneven_only:
        lines += ["", f"## ECE's interval with no minimum, by study size ({args.ece_reps} studies a size)", "",
                  "What `ECE_MIN_ITEMS_FOR_CI` (400) is chosen from: ECE is biased upward with few items a bin and "
                  "the interval is centred on it; coverage follows the items, not the users.", "",
                  "| world | users | mean items | truth | mean ECE | coverage | MC SE |",
                  "|---|---|---|---|---|---|---|"]
        sizes: list[tuple[str, Source]] = [("PRISM-like", Generator()),
                                            *((n, gens[n]) for n in ("few-items informative", "few-items uninformative",
                                                                     "few-items miscalibrated"))]
        for name, gen in sizes:
            for n_users in (20, 50, 100, 200):
                items, truth, mean, c, se = ece_by_size(gen, n_users, args.ece_reps, args.seed + 7 * n_users)
                cov = f"**{c:.3f}**" if c + 1.645 * se < TARGET else f"{c:.3f}"
                lines.append(f"| {name} | {n_users} | {items:.0f} | {truth:.3f} | {mean:.3f} | {cov} | {se:.3f} |")
            print(f"<!-- ece {name}: {time.monotonic() - started:.1f}s -->", file=sys.stderr, flush=True)
    text = "\n".join(lines)
    print(text)
    if not args.uneven_only:
        TABLE.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
