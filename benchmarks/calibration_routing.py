"""Coverage of the routed (combined) estimate's interval (issue 23): does its 95% CI hold the truth 95% of the time?

Known truth, shaped like PRISM's certainties (:mod:`benchmarks.conf_coverage`'s values, shares and accuracy model):
users with 2-12 items each, a user's positive rate ``p_u ~ Beta(2, 6)`` (mean 0.25, users differ), the human label
``y ~ Bernoulli(p_u)``, the judge's certainty on 1-100, the judge right with probability
``sigmoid(a + b (c - 60) / 20 + u)`` independent of ``y``. A share ``human_share`` of the items carries a person's
label (at random): the threshold is chosen on them as ``personagap route`` does (half of the users, target accuracy),
and the routed items people labelled are a random sample of the routed ones.

The estimand is the rate of the routed labelling -- the judge's label on kept items (certainty >= t), a person's on
routed ones -- over the population of users. Item counts do not depend on anything else, so it is the per-item
expectation ``sum_v pi_v [v >= t] J_v + sum_v pi_v [v < t] pbar`` with ``pbar = E p_u`` and
``J_v = pbar m_v + (1 - pbar)(1 - m_v)`` the judge's positive rate at certainty v (``m_v`` its rate of being right,
by quadrature). The truth is taken at the threshold each study chose, so selecting the threshold is part of what
is measured. Coverage is counted over studies with a printed interval, with its Monte Carlo SE.

Run: python benchmarks/calibration_routing.py [--reps 400] [--users 10 20 50] [--human-share 1.0 0.4]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.conf_coverage import SHARES, VALUES, Generator  # noqa: E402
from personagap.analysis.coverage import Target, choose_threshold  # noqa: E402
from personagap.analysis.estimates import MIN_LABELLED_USERS  # noqa: E402
from personagap.analysis.routing import routing_estimate  # noqa: E402
from personagap.records import RELEVANCE_LABELS, DatasetScale  # noqa: E402

YES_NO = DatasetScale(kind="nominal", categories=tuple(sorted(RELEVANCE_LABELS)))
BETA = (2.0, 6.0)


@dataclass(frozen=True)
class RoutingWorld:
    """The generator: the judge's accuracy model, the users' rates and sizes, and who has a person's label."""

    judge: Generator = Generator()
    human_share: float = 1.0
    max_items: int = 12

    @property
    def pbar(self) -> float:
        """Population mean of the users' positive rates."""
        return BETA[0] / (BETA[0] + BETA[1])

    def judge_positive(self) -> np.ndarray:
        """``J_v``: the judge's rate of 'yes' at each certainty value."""
        m = self.judge.right_rate()
        return np.asarray(self.pbar * m + (1 - self.pbar) * (1 - m))

    def truth(self, threshold: float | None) -> float:
        """The routed labelling's rate at ``threshold`` (None: everything to people)."""
        if threshold is None:
            return self.pbar
        kept = VALUES >= threshold
        return float((SHARES * np.where(kept, self.judge_positive(), self.pbar)).sum())

    def study(self, n_users: int, rng: np.random.Generator) -> pd.DataFrame:
        """One study's items (:data:`personagap.analysis.routing.ITEM_COLUMNS`)."""
        sizes = rng.integers(2, self.max_items + 1, size=n_users)
        user = np.repeat(np.arange(n_users), sizes)
        rate = rng.beta(*BETA, size=n_users)[user]
        effect = rng.normal(0.0, self.judge.sigma, size=n_users)[user]
        value = VALUES[rng.choice(len(VALUES), size=user.size, p=SHARES)]
        logit = self.judge.a + self.judge.b * (value - 60.0) / 20.0 + effect
        right = rng.random(user.size) < 1.0 / (1.0 + np.exp(-logit))
        y = rng.random(user.size) < rate
        label = np.where(right == y, "yes", "no")
        human = np.where(y, "yes", "no").astype(object)
        human[rng.random(user.size) >= self.human_share] = None
        return pd.DataFrame({"item_id": [f"i{k:06d}" for k in range(user.size)],
                             "user_id": [f"u{u:04d}" for u in user], "label": label, "confidence": value,
                             "human": human})


def counts(items: pd.DataFrame) -> pd.DataFrame:
    """The confidence counts ``choose_threshold`` reads (items with a person's label), as the store builds them."""
    judged = items[items["human"].notna()]
    return (judged.groupby(["user_id", "confidence", "human", "label"]).size().rename("n").reset_index())


def simulate(n_users: int, reps: int, seed: int, world: RoutingWorld | None = None,
             target_accuracy: float = 0.8) -> dict[str, dict[str, float]]:
    """Coverage of the combined estimate's interval over ``reps`` studies of ``n_users`` users.

    Each study is scored once with the interval rule itself (no minimum of labelled users) and counted twice:
    ``rule`` over every study with an interval, ``printed`` over the studies where ``personagap route`` prints it
    (at least :data:`~personagap.analysis.estimates.MIN_LABELLED_USERS` users with a person's label, or nothing
    routed).

    Args:
        n_users: Users per study.
        reps: Studies.
        seed: Seed of the whole run.
        world: The generator.
        target_accuracy: The routing target.

    Returns:
        Per count (``rule``, ``printed``): ``coverage``, ``mc_se``, ``with_ci`` (studies with an interval),
        ``bias`` (mean estimate minus truth), ``mean_width``, ``reps``.
    """
    world = world or RoutingWorld()
    rng = np.random.default_rng(seed)
    target = Target("accuracy", target_accuracy, "given")
    hits: dict[str, list[bool]] = {"rule": [], "printed": []}
    widths: dict[str, list[float]] = {"rule": [], "printed": []}
    errors = []
    for _ in range(reps):
        items = world.study(n_users, rng)
        choice = choose_threshold(counts(items), YES_NO, target)
        result = routing_estimate(items, choice.min_confidence, "yes", min_labelled_users=0)
        est, truth = result.combined, world.truth(choice.min_confidence)
        errors.append(est.value - truth)
        if math.isnan(est.ci[0]):
            continue
        shown = ["rule"] + (["printed"] if result.labelled_users >= MIN_LABELLED_USERS or not result.routed else [])
        for name in shown:
            hits[name].append(est.ci[0] <= truth <= est.ci[1])
            widths[name].append(est.ci[1] - est.ci[0])
    out = {}
    for name, h in hits.items():
        c = float(np.mean(h)) if h else math.nan
        out[name] = {"coverage": c, "mc_se": math.sqrt(c * (1 - c) / len(h)) if h else math.nan, "with_ci": len(h),
                     "bias": float(np.nanmean(errors)), "mean_width": float(np.mean(widths[name])) if h else math.nan,
                     "reps": reps}
    return out


def main() -> None:
    """Print the coverage table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[10, 20, 50])
    parser.add_argument("--human-share", type=float, nargs="+", default=[1.0, 0.4])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| people labelled | users | count | coverage | MC SE | with a CI | bias | mean width | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for share in args.human_share:
        for n in args.users:
            start = time.monotonic()
            table = simulate(n, args.reps, args.seed + n, RoutingWorld(human_share=share))
            seconds = time.monotonic() - start
            for name, r in table.items():
                print(f"| {share:.0%} of items | {n} | {name} | {r['coverage']:.3f} | {r['mc_se']:.3f} | "
                      f"{r['with_ci']}/{r['reps']} | {r['bias']:+.4f} | {r['mean_width']:.3f} | {seconds:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
