"""Trained judges on the real releases: wall time of train + predict, and the grouped-CV figures vs the targets.

Run: python benchmarks/trained_judges.py [--data ../shared/data]. Prints; asserts nothing (targets are benchmarks).
Timing covers reading the items from the store, 5-fold grouped CV, the final fit, saving, and predicting every
imported item; importing the release is timed separately.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from personagap.api import import_recenter  # noqa: E402
from personagap.stages.extraction import import_laps  # noqa: E402
from personagap.stages.response import import_prism  # noqa: E402
from personagap.stages.trained import (  # noqa: E402
    judge_relevance_trained,
    judge_response_trained,
    train_preference,
    train_relevance,
    train_verifier,
    verifier_pairs,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    args = parser.parse_args()
    data = Path(args.data)
    work = Path(tempfile.mkdtemp(prefix="pg-trained-bench-"))
    db = work / "bench.duckdb"
    t = time.perf_counter()
    import_recenter(data / "recenter", db)
    import_prism(data / "prism_judge", db)
    import_laps(data / "laps", db)
    print(f"import (not part of the budget): {time.perf_counter() - t:.1f}s; cores available: {os.cpu_count()}")

    t = time.perf_counter()
    rel = train_relevance(db, work / "rel.joblib")
    judged = judge_relevance_trained(db, work / "rel.joblib")
    rel_s = time.perf_counter() - t
    print(f"\nstage 2: train (5-fold user-grouped CV + final fit + save) and predict {judged.labelled} items: "
          f"{rel_s:.1f}s (budget 30s: {'OK' if rel_s <= 30 else 'OVER'})")
    print(rel.render())
    f = rel.rows[0].figures
    print(f"target kappa >= 0.45 with over-selection <= 1.3x: kappa {f['kappa']:.3f}, over-selection "
          f"{f['over_selection']:.2f}x -> {'met' if f['kappa'] >= 0.45 and f['over_selection'] <= 1.3 else 'MISSED'}")

    t = time.perf_counter()
    pref = train_preference(db, work / "pref.joblib")
    judged = judge_response_trained(db, work / "pref.joblib")
    pref_s = time.perf_counter() - t
    print(f"\nstage 3: train (5-fold question-grouped CV + final fit + save) and predict {judged.labelled} pairs: "
          f"{pref_s:.1f}s")
    print(pref.render())
    f = pref.rows[0].figures
    print(f"target accuracy >= 0.65: {f['accuracy_decisive']:.3f} on decisive pairs "
          f"({'met' if f['accuracy_decisive'] >= 0.65 else 'MISSED'}), {f['accuracy']:.3f} counting human ties as "
          "misses")


    t = time.perf_counter()
    ver = train_verifier(db, work / "ver.joblib")
    from personagap.judges.trained import load_model

    pairs = verifier_pairs(db)
    load_model(work / "ver.joblib", "verifier").predict(pairs)
    ver_s = time.perf_counter() - t
    print(f"\nstage 1: verifier train (5-fold user-grouped CV on LAPS train + final fit + val + save) and predict "
          f"{len(pairs)} LAPS pairs: {ver_s:.1f}s")
    print(ver.render())
    for r in ver.rows:
        f = r.figures
        ci = {k: "[{:.3f}, {:.3f}]".format(*v) for k, v in r.cis.items()}
        print(f"  {r.judge}: AUC {f['auc']:.3f} {ci['auc']}, accuracy {f['accuracy']:.3f} {ci['accuracy']}, "
              f"kappa {f['kappa']:.3f} {ci['kappa']}")


if __name__ == "__main__":
    main()
