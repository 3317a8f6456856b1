"""Null simulation of ``diagnose`` (issue 21, finding 4): is the best-judge gap honest when judges are chosen?

Every judge of every stage has the same true gap to its dataset's human ceiling (about 0.15); the stages have 1, 6
and 6 judges. Picking the judge with the smallest gap on the data and reporting that gap is optimistic, and so the
1-judge stage looks worst far more often than the 1 in 3 that chance would give. Per replication, three stages of
``users`` users each (items per user drawn from ``items``, each user with its own prevalence, logit-normal) are
labelled by three blind humans (each flips the truth with ``HUMAN_FLIP``) and the judges (``judge_flip``, solved so
that the true gap is ``TRUE_GAP``), and :func:`personagap.analysis.diagnosis.diagnose` runs on the frames the store
would give it.

* **before** (the rule ``diagnose`` used until issue 21, recomputed from the same run): the smallest per-judge gap
  of the stage (``StageDiagnosis.gap``) as the stage's gap, a stage named when its gap CI lies above every other
  stage's;
* **after**: the selection-aware gap (``StageDiagnosis.selected_gap``: chosen on one half of the users, measured on
  the other) and the verdict (``Diagnosis.worst_stage``: the CI of the difference of two stages' gaps excludes 0).

The truth is exact: given a user's prevalence a pair's joint label distribution is linear in it, so the population
tables (and the true gap) follow from the mean prevalence. Printed: the bias of the reported gap, the coverage of
its 95% CI (Monte Carlo SE beside it), how often a "worst stage" is named (every one is false here) and how often
the 1-judge stage is the top of the ranking (1/3 without selection bias). Targets: |bias| <= 0.01, coverage >= 0.93,
false verdict <= 5%.

Run: python benchmarks/calibration_diagnose.py [--reps 300] [--users 30] [--seed 0]
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

from personagap.analysis.agreement import FloatArray, kappa_from_tables  # noqa: E402
from personagap.analysis.diagnosis import Diagnosis, diagnose  # noqa: E402

TRUE_GAP = 0.15
HUMAN_FLIP = 0.05
HUMANS = 3
PREVALENCE_LOGIT = (-0.8, 1.0)  # mean and sd of each user's logit prevalence
ITEMS = (8, 30)  # items per user, uniform in [low, high]
STAGE_JUDGES = {"extraction": 1, "relevance": 6, "response": 6}
TARGETS = {"bias": 0.01, "coverage": 0.93, "false_verdict": 0.05}
YN = np.array(["no", "yes"])


def _pair_table(prevalence: float, flip_a: float, flip_b: float) -> FloatArray:
    """Joint distribution of two raters who flip a binary truth independently (rows: rater a)."""
    def given(truth: int, flip: float) -> FloatArray:
        return np.array([1.0 - flip, flip] if truth == 0 else [flip, 1.0 - flip])

    return ((1.0 - prevalence) * np.outer(given(0, flip_a), given(0, flip_b))
            + prevalence * np.outer(given(1, flip_a), given(1, flip_b)))


def mean_prevalence(draws: int = 400_000, seed: int = 12345) -> float:
    """E[prevalence] over users (logit-normal): the population tables depend on nothing else."""
    z = np.random.default_rng(seed).normal(*PREVALENCE_LOGIT, size=draws)
    return float(np.mean(1.0 / (1.0 + np.exp(-z))))


def true_gap(judge_flip: float, prevalence: float) -> float:
    """Population ceiling (human pair kappa) minus the judge's population kappa with a human."""
    ceiling = float(kappa_from_tables(_pair_table(prevalence, HUMAN_FLIP, HUMAN_FLIP)))
    return ceiling - float(kappa_from_tables(_pair_table(prevalence, judge_flip, HUMAN_FLIP)))


def judge_flip_for(gap: float, prevalence: float) -> float:
    """The judge flip rate whose true gap is ``gap`` (bisection: the gap rises with the flip rate)."""
    lo, hi = HUMAN_FLIP, 0.5
    for _ in range(60):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if true_gap(mid, prevalence) < gap else (lo, mid)
    return (lo + hi) / 2.0


def study(rng: np.random.Generator, users: int, judge_flip: float) -> dict[str, pd.DataFrame]:
    """One simulated store: per stage a dataset of ``users`` users, three blind humans and its judges."""
    humans, judges, pairs, inventory = [], [], [], []
    for stage, n_judges in STAGE_JUDGES.items():
        sizes = rng.integers(ITEMS[0], ITEMS[1] + 1, size=users)
        user = np.repeat(np.arange(users), sizes)
        prevalence = 1.0 / (1.0 + np.exp(-rng.normal(*PREVALENCE_LOGIT, size=users)))
        truth = rng.random(user.size) < prevalence[user]
        ids = np.array([f"{stage}-{k}" for k in range(user.size)])
        user_ids = np.array([f"{stage}-u{u:03d}" for u in range(users)])[user]
        votes = np.zeros(user.size, dtype=np.int64)
        for h in range(HUMANS):
            label = truth ^ (rng.random(user.size) < HUMAN_FLIP)
            votes += label
            humans.append(pd.DataFrame({"stage": stage, "dataset": f"{stage}-ds", "item_id": ids, "rater": f"h{h}",
                                        "label": YN[label.astype(int)], "user_id": user_ids}))
        majority = YN[(votes * 2 > HUMANS).astype(int)]
        for j in range(n_judges):
            label = YN[(truth ^ (rng.random(user.size) < judge_flip)).astype(int)]
            judges.append(pd.DataFrame({"stage": stage, "dataset": f"{stage}-ds", "item_id": ids, "rater": f"j{j}",
                                        "rater_kind": "llm", "condition": "", "label": label, "user_id": user_ids}))
            counts = (pd.DataFrame({"user_id": user_ids, "human": majority, "label": label})
                      .groupby(["user_id", "human", "label"]).size().rename("n").reset_index())
            pairs.append(counts.assign(stage=stage, dataset=f"{stage}-ds", rater=f"j{j}", rater_kind="llm",
                                       condition=""))
        inventory.append({"stage": stage, "n_items": user.size, "n_labels": user.size * (HUMANS + n_judges),
                          "n_human_labels": user.size * HUMANS, "n_judge_labels": user.size * n_judges})
    return {"pairs": pd.concat(pairs, ignore_index=True), "humans": pd.concat(humans, ignore_index=True),
            "judge_items": pd.concat(judges, ignore_index=True), "inventory": pd.DataFrame(inventory)}


def old_verdict(d: Diagnosis) -> str | None:
    """The rule before issue 21: the largest smallest-gap stage, named when its CI clears every other stage's."""
    with_gap = sorted((s for s in d.stages if s.gap is not None), key=lambda s: -(s.gap.gap if s.gap else 0.0))
    if len(with_gap) < 2 or with_gap[0].gap is None:
        return None
    lo = with_gap[0].gap.gap_ci[0]
    his = [s.gap.gap_ci[1] for s in with_gap[1:] if s.gap is not None]
    return with_gap[0].stage if not math.isnan(lo) and all(lo > h for h in his) else None


@dataclass
class Tally:
    """Per rule: reported gaps, whether each CI held the truth, verdicts and the top stage of each run."""

    errors: list[float]
    covered: list[bool]
    verdicts: int = 0
    single_on_top: int = 0
    runs: int = 0

    def row(self) -> dict[str, float]:
        """Bias, coverage and their Monte Carlo SEs; false-verdict and 1-judge-on-top rates."""
        e, c = np.array(self.errors), np.array(self.covered, dtype=float)
        return {"bias": float(e.mean()), "bias_se": float(e.std(ddof=1) / math.sqrt(e.size)),
                "coverage": float(c.mean()), "coverage_se": float(math.sqrt(c.mean() * (1 - c.mean()) / c.size)),
                "false_verdict": self.verdicts / self.runs, "single_on_top": self.single_on_top / self.runs}


def run(reps: int, users: int, seed: int) -> dict[str, dict[str, float]]:
    """``reps`` null replications; per rule (``before``, ``after``) its row of :meth:`Tally.row`."""
    prevalence = mean_prevalence()
    flip = judge_flip_for(TRUE_GAP, prevalence)
    truth = true_gap(flip, prevalence)
    rng = np.random.default_rng(seed)
    before, after = Tally([], []), Tally([], [])
    empty = pd.DataFrame(columns=["stage", "dataset", "rater", "rater_kind", "condition", "failures"])
    single = next(s for s, n in STAGE_JUDGES.items() if n == 1)
    for _ in range(reps):
        d = diagnose(failures=empty, seed=int(rng.integers(2**31)), **study(rng, users, flip))
        for s in d.stages:
            if s.gap is not None:
                before.errors.append(s.gap.gap - truth)
                before.covered.append(s.gap.gap_ci[0] <= truth <= s.gap.gap_ci[1])
            if s.selected_gap is not None:
                after.errors.append(s.selected_gap.gap - truth)
                after.covered.append(s.selected_gap.gap_ci[0] <= truth <= s.selected_gap.gap_ci[1])
        with_gap = sorted((s for s in d.stages if s.gap is not None), key=lambda s: -(s.gap.gap if s.gap else 0.0))
        before.single_on_top += bool(with_gap) and with_gap[0].stage == single
        before.verdicts += old_verdict(d) is not None
        after.single_on_top += bool(d.ranking) and d.ranking[0] == single
        after.verdicts += d.worst_stage is not None
        before.runs += 1
        after.runs += 1
    return {"before": before.row(), "after": after.row()}


def main() -> None:
    """Print the before/after table and whether the targets are met."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = run(args.reps, args.users, args.seed)
    print(f"Null simulation of diagnose: true gap {TRUE_GAP} for every judge; stages with "
          f"{', '.join(str(n) for n in STAGE_JUDGES.values())} judges; {args.users} users per stage, {args.reps} "
          f"replications, seed {args.seed} ({time.perf_counter() - start:.0f} s)")
    print("| rule | bias of the reported gap | 95% CI coverage | false 'worst stage' | 1-judge stage on top |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['bias']:+.3f} (MC SE {r['bias_se']:.3f}) | {r['coverage']:.3f} "
              f"(MC SE {r['coverage_se']:.3f}) | {r['false_verdict']:.3f} | {r['single_on_top']:.3f} |")
    a = rows["after"]
    met = (abs(a["bias"]) <= TARGETS["bias"] and a["coverage"] >= TARGETS["coverage"]
           and a["false_verdict"] <= TARGETS["false_verdict"])
    print(f"targets (|bias| <= {TARGETS['bias']}, coverage >= {TARGETS['coverage']}, false verdict <= "
          f"{TARGETS['false_verdict']:.0%}): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
