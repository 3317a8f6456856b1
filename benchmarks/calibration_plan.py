"""Does ``personagap plan`` keep its promise (issue 21, finding 5)? Simulated studies of the planned size.

A known generator (the calibration harness's stage-2-like ``skewed-binary``: skewed items per user, rare yes, user
effects on prevalence, sensitivity and false-positive rate) gives a pilot of ``--pilot`` users; ``plan`` sizes a
study from it for a kappa CI half-width of ``--target``, and ``--studies`` fresh studies of that size are drawn from
the same generator, each with its kappa CI by the one CI rule as the reports print it. The share of those studies
reaching the target is what the plan promised (80%); over ``--pilots`` pilots it is printed per pilot and pooled.

* **before**: the plan sized for the median half-width (the rule until issue 21; ``assurance`` 0.5 here);
* **after**: sized for an 80% chance (``assurance`` 0.8), with its range from resampling the pilot's users.

The truth (the smallest size at which 80% of fresh studies reach the target) is found the same way on the generator
itself. Targets: the pooled share >= 0.80 after.

Run: python benchmarks/calibration_plan.py [--pilots 20] [--pilot 47] [--studies 200] [--target 0.05] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration_generators import Generator, generators  # noqa: E402
from personagap.analysis.agreement import FloatArray, estimate  # noqa: E402
from personagap.analysis.budget import kappa_budget, smallest_sufficient  # noqa: E402

GENERATOR = "skewed-binary"
ASSURANCE = 0.8
BEFORE = 0.5  # the median half-width: half of the studies reach it


def reached(gen: Generator, n_users: int, target: float, studies: int, rng: np.random.Generator) -> FloatArray:
    """Whether each of ``studies`` fresh studies of ``n_users`` users has a kappa CI half-width <= ``target``."""
    out = np.empty(studies)
    for k in range(studies):
        e = estimate(gen.draw(rng, n_users), "kappa")
        out[k] = (e.ci[1] - e.ci[0]) / 2.0 <= target  # NaN (no interval) compares False: not reached
    return out


def true_size(gen: Generator, target: float, studies: int, seed: int) -> int | None:
    """Smallest study size at which ``ASSURANCE`` of fresh studies reach the target (common random numbers)."""
    def ok(n: int) -> bool:
        return float(reached(gen, n, target, studies, np.random.default_rng([seed, 7])).mean()) >= ASSURANCE
    return smallest_sufficient(ok, 50, lowest=5, highest=5000)


def run(pilots: int, pilot_users: int, studies: int, target: float, seed: int, *, simulations: int = 100,
        replans: int = 10, generator: str = GENERATOR) -> dict[str, object]:
    """Per pilot the plan before and after and the share of fresh studies of that size reaching the target."""
    gen = generators()[generator]
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(pilots):
        pilot = gen.draw(rng, pilot_users)
        row: dict[str, object] = {"pilot": p}
        for name, assurance, replan in (("before", BEFORE, 0), ("after", ASSURANCE, replans)):
            plan = kappa_budget(pilot, target=target, assurance=assurance, simulations=simulations, replans=replan,
                                seed=seed + p)
            n = plan.users_needed
            row[name] = n
            row[f"{name}_share"] = float("nan") if n is None else float(reached(gen, n, target, studies, rng).mean())
            if name == "after":
                row["range"] = plan.users_range
        rows.append(row)
    return {"rows": rows, "truth": true_size(gen, target, studies, seed)}


def main() -> None:
    """Print the per-pilot plans and the pooled shares."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pilots", type=int, default=20)
    parser.add_argument("--pilot", type=int, default=47)
    parser.add_argument("--studies", type=int, default=200)
    parser.add_argument("--target", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generator", default=GENERATOR, choices=["skewed-binary", "balanced-binary"])
    args = parser.parse_args()
    start = time.perf_counter()
    result = run(args.pilots, args.pilot, args.studies, args.target, args.seed, generator=args.generator)
    rows = result["rows"]
    assert isinstance(rows, list)
    print(f"plan on {args.generator}: pilots of {args.pilot} users, target half-width {args.target}, "
          f"{args.studies} fresh "
          f"studies per plan, seed {args.seed}; truth (80% of studies reach it): {result['truth']} users "
          f"({time.perf_counter() - start:.0f} s)")
    print("| pilot | before: users (median rule) | share reaching | after: users (80% rule) | range | share reaching |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["range"]
        print(f"| {r['pilot']} | {r['before']} | {r['before_share']:.2f} | {r['after']} | {lo}-{hi} | "
              f"{r['after_share']:.2f} |")
    for name in ("before", "after"):
        shares = np.array([r[f"{name}_share"] for r in rows], dtype=float)
        sizes = [r[name] for r in rows if r[name] is not None]
        print(f"{name}: pooled share of studies reaching the target {np.nanmean(shares):.3f} (MC SE "
              f"{np.nanstd(shares, ddof=1) / np.sqrt(np.isfinite(shares).sum()):.3f}); planned users "
              f"{min(sizes)}-{max(sizes)}, median {int(np.median(sizes))}")
    covered = np.mean([r["range"][0] is not None and r["range"][1] is not None and r["range"][0] <= result["truth"]
                       <= r["range"][1] for r in rows]) if result["truth"] is not None else float("nan")
    print(f"after: the range holds the true size in {covered:.2f} of pilots")


if __name__ == "__main__":
    main()
