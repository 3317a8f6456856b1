"""The offline relevance matcher: user-grouped CV figures (lexical vs embed) and the learning curve.

Run: python benchmarks/learning_curve.py [--data ../shared/data] [--features lexical embed] [--repeats 3]
Prints; asserts nothing. `embed` needs the optional extra (pip install 'personagap[embed]'); without it only
`lexical` runs.

1. Full user-grouped 5-fold CV on recenter-stage2 (every labelled user): kappa with its user-clustered 95%
   bootstrap CI, over-selection, precision/recall/F1, for each feature set and three fold seeds.
2. Learning curve: the test users of each fold stay fixed; the model is fitted on N users drawn (seeded,
   ``--repeats`` draws) from that fold's training users only, and the pooled out-of-fold kappa and
   over-selection are reported as the mean (min-max) over draws. So a team knows how many users it must label.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from personagap.analysis.agreement import agreement  # noqa: E402
from personagap.api import import_recenter  # noqa: E402
from personagap.judges.embed import available  # noqa: E402
from personagap.judges.trained import (  # noqa: E402
    cross_val_relevance,
    fit_relevance,
    grouped_folds,
    warm_embeddings,
)
from personagap.stages.trained import relevance_items  # noqa: E402

METRICS = ("kappa", "over_selection", "precision", "recall", "f1")


def figures(y: np.ndarray, labels: list[str] | np.ndarray, users: np.ndarray) -> str:
    j = (np.asarray(labels) == "yes").astype(int)
    est = agreement(y, j, users, metrics=METRICS)
    k = est["kappa"]
    return (f"kappa {k.value:.3f} [{k.ci[0]:.3f}, {k.ci[1]:.3f}]  over-selection {est['over_selection'].value:.2f}x "
            f"[{est['over_selection'].ci[0]:.2f}, {est['over_selection'].ci[1]:.2f}]  P {est['precision'].value:.3f}"
            f"  R {est['recall'].value:.3f}  F1 {est['f1'].value:.3f}")


def learning_curve(items: pd.DataFrame, y: np.ndarray, features: str, sizes: list[int], repeats: int,
                   n_splits: int = 5) -> list[tuple[int, list[float], list[float]]]:
    users = items["user_id"].astype(str).to_numpy()
    out = []
    for size in sizes:
        kappas, oversel = [], []
        for r in range(repeats):
            pred = np.empty(len(items), dtype=object)
            for f, (train, test) in enumerate(grouped_folds(users, n_splits, seed=0)):
                pool = np.unique(users[train])
                pick = np.random.default_rng(1000 * r + f).choice(pool, size=min(size, len(pool)), replace=False)
                rows = train[np.isin(users[train], pick)]
                if len(set(y[rows].tolist())) < 2:
                    pred[test] = "no"
                    continue
                model = fit_relevance(items.iloc[rows], y[rows], features=features)  # type: ignore[arg-type]
                pred[test] = model.predict(items.iloc[test])
            est = agreement(y, (pred == "yes").astype(int), users, metrics=("kappa", "over_selection"))
            kappas.append(est["kappa"].value)
            oversel.append(est["over_selection"].value)
        out.append((size, kappas, oversel))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--db", default=None, help="An existing database with the Re-Centering release imported.")
    parser.add_argument("--features", nargs="+", default=["lexical", "embed"], choices=["lexical", "embed"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 6, 10, 15, 20, 26])
    args = parser.parse_args()
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="pg-curve-")) / "curve.duckdb"
    if not args.db:
        import_recenter(Path(args.data) / "recenter", db)
    items = relevance_items(db, ("recenter-stage2",))
    labelled = items[items["human"].notna()].reset_index(drop=True)
    y = (labelled["human"] == "yes").astype(int).to_numpy()
    users = labelled["user_id"].astype(str).to_numpy()
    print(f"recenter-stage2: {len(labelled)} labelled items of {len(set(users))} users; human yes-rate "
          f"{y.mean():.3f}; 5-fold CV grouped by user (every fold's model fitted on its training users only)")
    features = [f for f in args.features if f == "lexical" or available()]
    if len(features) < len(args.features):
        print("embed: skipped (the optional `embed` extra is not installed: pip install 'personagap[embed]')")
    for f in features:
        if f == "embed":
            t = time.perf_counter()
            warm_embeddings(labelled)
            print(f"embed: encoded {len(set(labelled['attribute']) | set(labelled['prompt_text']))}+ distinct texts "
                  f"in {time.perf_counter() - t:.1f}s (cached for every fold)")
    print("\n1. user-grouped CV (95% CIs: bootstrap over users, 1000 resamples)")
    for f in features:
        for seed in (0, 1, 2):
            t = time.perf_counter()
            cv = cross_val_relevance(labelled, y, n_splits=5, seed=seed, features=f)  # type: ignore[arg-type]
            assert all(fold.disjoint and fold.fitted_on_train_only for fold in cv.folds)
            print(f"  {f:<8} fold seed {seed}: {figures(y, cv.labels, users)}  ({time.perf_counter() - t:.1f}s)")
    print(f"\n2. learning curve: kappa (over-selection) vs number of training users; mean [min, max] over "
          f"{args.repeats} seeded draws per fold, test users fixed by the 5 folds")
    for f in features:
        for size, kappas, over in learning_curve(labelled, y, f, args.sizes, args.repeats):
            print(f"  {f:<8} {size:>3} users: kappa {np.mean(kappas):.3f} [{min(kappas):.3f}, {max(kappas):.3f}]"
                  f"  over-selection {np.mean(over):.2f}x [{min(over):.2f}, {max(over):.2f}]")


if __name__ == "__main__":
    main()
