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

Run: python benchmarks/conf_coverage.py [--reps 400] [--users 10 20 50]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    def of(cls, gen: Generator) -> Truth:
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

    def add(self, name: str, ci: tuple[float, float], truth: float, users: int | None = None) -> None:
        """Count one interval (none printed -- NaN -- is not counted), by the users it is over when given."""
        if math.isnan(ci[0]) or math.isnan(ci[1]):
            return
        if users is not None:
            name += f" ({_band(users)} users)"
        self.printed[name] = self.printed.get(name, 0) + 1
        self.covered[name] = self.covered.get(name, 0) + int(ci[0] <= truth <= ci[1])

    def coverage(self) -> dict[str, tuple[float, float, int]]:
        """Figure -> (coverage, Monte Carlo SE, studies with an interval)."""
        out = {}
        for name, n in sorted(self.printed.items()):
            c = self.covered[name] / n
            out[name] = (c, math.sqrt(c * (1 - c) / n), n)
        return out


def _band(users: int) -> str:
    # Points of a curve and bins span fewer users than the study: coverage is reported by the users they span.
    return next(f"{lo}-{hi}" for lo, hi in ((1, 9), (10, 19), (20, 49), (50, 10**9)) if users <= hi).replace(
        "-1000000000", "+")


def simulate(n_users: int, reps: int, seed: int, gen: Generator | None = None,
             target_accuracy: float = 0.75) -> dict[str, tuple[float, float, int]]:
    """Coverage of every confidence figure's interval over ``reps`` studies of ``n_users`` users."""
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
    return tally.coverage()


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


def main() -> None:
    """Print the coverage table (markdown)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[10, 20, 50])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| users | figure | coverage | MC SE | studies with a CI |\n|---|---|---|---|---|")
    for n_users in args.users:
        started = time.monotonic()
        table = simulate(n_users, args.reps, args.seed + n_users)
        table |= simulate_self_agreement(n_users, args.reps, args.seed + n_users)
        for name, (c, se, n) in table.items():
            print(f"| {n_users} | {name} | {c:.3f} | {se:.3f} | {n} |")
        print(f"<!-- {n_users} users: {time.monotonic() - started:.1f}s -->", file=sys.stderr)


if __name__ == "__main__":
    main()
