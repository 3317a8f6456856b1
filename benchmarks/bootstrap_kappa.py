"""Benchmark: kappa + 1,000-resample user-clustered bootstrap CI over 1,000,000 labels.

Compares PersonaGap's vectorised cluster bootstrap (per-user confusion tables, resampled by a
matrix product) with a plain loop that resamples users and calls sklearn's cohen_kappa_score.
The loop is slow, so by default it runs a few resamples and its full time is extrapolated
linearly (printed as such); pass --loop-resamples 1000 to time it in full.

Run: python benchmarks/bootstrap_kappa.py [--labels 1000000] [--users 10000] [--loop-resamples 20]
Targets (issue 2): vectorised <= 5 s, ratio >= 50x.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from sklearn.metrics import cohen_kappa_score

from personagap.analysis.agreement import agreement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labels", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--loop-resamples", type=int, default=20)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    users = rng.integers(0, args.users, args.labels)
    human = (rng.random(args.labels) < 0.2).astype(np.int64)
    judge = np.where(rng.random(args.labels) < 0.75, human, (rng.random(args.labels) < 0.45).astype(np.int64))

    start = time.perf_counter()
    est = agreement(human, judge, users, metrics=("kappa",), n_resamples=args.resamples, seed=0)["kappa"]
    fast = time.perf_counter() - start
    print(f"vectorised: kappa {est.value:.4f}, 95% CI [{est.ci[0]:.4f}, {est.ci[1]:.4f}], "
          f"{args.resamples} resamples over {args.labels:,} labels / {args.users:,} users: {fast:.2f} s")

    order = np.argsort(users, kind="stable")
    bounds = np.searchsorted(users[order], np.arange(args.users + 1))
    start = time.perf_counter()
    loop_rng = np.random.default_rng(0)
    kappas = []
    for _ in range(args.loop_resamples):
        drawn = loop_rng.integers(0, args.users, args.users)
        idx = np.concatenate([order[bounds[u]:bounds[u + 1]] for u in drawn])
        kappas.append(cohen_kappa_score(human[idx], judge[idx]))
    loop = time.perf_counter() - start
    full = loop / args.loop_resamples * args.resamples
    kind = "measured" if args.loop_resamples == args.resamples else f"extrapolated from {args.loop_resamples}"
    print(f"plain loop (sklearn cohen_kappa_score per resample): {loop:.2f} s for {args.loop_resamples} resamples; "
          f"{args.resamples} resamples = {full:.1f} s ({kind})")
    print(f"ratio: {full / fast:.0f}x faster (target >= 50x); vectorised time {fast:.2f} s (target <= 5 s)")


if __name__ == "__main__":
    main()
