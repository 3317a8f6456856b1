"""Benchmark: kappa + its user-clustered 95% CI over 1,000,000 labels (the one CI rule's cost).

Times the tool's CI (:func:`personagap.analysis.agreement.agreement`: per-user confusion tables, a jackknife-t
over users, i.e. U leave-one-user-out totals) against the percentile bootstrap it replaced (1,000 resamples by
a matrix product) and against a plain loop calling sklearn's cohen_kappa_score without each user in turn. The
loop is slow, so by default it runs a few users and its full time is extrapolated linearly (printed as such).

Run: python benchmarks/bootstrap_kappa.py [--labels 1000000] [--users 10000] [--loop-users 20]
Targets (issue 2): the tool's CI <= 5 s, ratio to the plain loop >= 50x.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.metrics import cohen_kappa_score

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.old_bootstrap import bootstrap_estimate, bootstrap_tables, resample_weights  # noqa: E402
from personagap.analysis.agreement import agreement, cluster_tables, kappa_from_tables  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=1000, help="of the old percentile bootstrap")
    parser.add_argument("--loop-users", type=int, default=20)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    users = rng.integers(0, args.users, args.labels)
    human = (rng.random(args.labels) < 0.2).astype(np.int64)
    judge = np.where(rng.random(args.labels) < 0.75, human, (rng.random(args.labels) < 0.45).astype(np.int64))

    start = time.perf_counter()
    est = agreement(human, judge, users, metrics=("kappa",))["kappa"]
    fast = time.perf_counter() - start
    print(f"the tool (jackknife-t): kappa {est.value:.4f}, 95% CI [{est.ci[0]:.4f}, {est.ci[1]:.4f}] over "
          f"{args.labels:,} labels / {args.users:,} users: {fast:.2f} s")

    start = time.perf_counter()
    tables, _ = cluster_tables(human, judge, users, 2)
    boot = kappa_from_tables(bootstrap_tables(tables, resample_weights(len(tables), args.resamples, 0)))
    old = bootstrap_estimate(float(kappa_from_tables(tables.sum(axis=0))), boot, len(tables))
    print(f"before (percentile bootstrap, {args.resamples} resamples): CI [{old.ci[0]:.4f}, {old.ci[1]:.4f}]: "
          f"{time.perf_counter() - start:.2f} s")

    start = time.perf_counter()
    for u in range(args.loop_users):
        keep = users != u
        cohen_kappa_score(human[keep], judge[keep])
    loop = time.perf_counter() - start
    full = loop / args.loop_users * args.users
    kind = "measured" if args.loop_users == args.users else f"extrapolated from {args.loop_users}"
    print(f"plain loop (sklearn cohen_kappa_score without each user): {loop:.2f} s for {args.loop_users} users; "
          f"{args.users:,} users = {full:.1f} s ({kind})")
    print(f"ratio: {full / fast:.0f}x faster (target >= 50x); the tool's time {fast:.2f} s (target <= 5 s)")


if __name__ == "__main__":
    main()
