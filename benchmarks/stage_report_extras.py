"""Benchmark (not a test): the stage report behind the dashboard's alternative-annotator section, at 10^6 labels.

On the store ``dashboard_first_render.py`` builds (100,000 relevance items, 7 LLM judges, a stored human majority
and 3 individual humans on half the items), in process and after the stage's labels are loaded once, times:

* ``reference_labels`` (blind and anchored) of each relevance dataset: the one comparability rule's reference;
* ``alt_test_rows`` (blind and anchored humans) and the corrected estimates (blind) from the store's counts
  (``label_counts`` + ``estimate_rows_from_counts``, the reports' one path).

Before/after a change, run it on one store with each checkout and compare (``--save`` writes the times and
every figure; ``--baseline`` checks that the figures are identical, to the last bit, and prints the ratios)::

    python benchmarks/stage_report_extras.py --db STORE.duckdb --save /tmp/before.json   # older checkout
    python benchmarks/stage_report_extras.py --db STORE.duckdb --baseline /tmp/before.json

Run the older checkout from outside the repository with ``PYTHONPATH`` pointing at a package tree of it laid out
as ``.ci/typecheck`` builds one. Without ``--db`` a store of ``--labels`` labels is built in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pandas as pd

sys.path.append(str(Path(__file__).resolve().parents[1]))  # after PYTHONPATH: an older checkout can be timed

from personagap.analysis.aggregated import estimate_rows_from_counts  # noqa: E402
from personagap.analysis.alt_test import alt_test_rows  # noqa: E402
from personagap.analysis.comparable import reference_labels  # noqa: E402
from personagap.dashboard import queries  # noqa: E402
from personagap.store import load_labels  # noqa: E402
from personagap.store.aggregates import label_counts  # noqa: E402

STEPS = ("reference_labels", "alt_test_rows", "estimates_from_counts")


def same(a: Any, b: Any) -> bool:
    """Equal figures: the same keys and types, NaN equal to NaN, floats to the last bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, pd.Series):
        return isinstance(b, pd.Series) and a.index.tolist() == b.index.tolist() and same(a.tolist(), b.tolist())
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and bool(a == b)


def _timed(f: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def measure(db: Path, stage: str) -> tuple[dict[str, float], dict[str, Any]]:
    """Seconds per step (summed over datasets and human sets) and every output, keyed by step and case."""
    with queries.read_only(db) as con:
        labels, load_s = _timed(lambda: load_labels(con, stage=stage))
        print(f"{len(labels):,} {stage} labels loaded in {load_s:.1f} s")
        times = dict.fromkeys(STEPS, 0.0)
        outputs: dict[str, Any] = {}

        def estimates(ds: str) -> list[dict[str, Any]]:
            # The reports' one path: DuckDB's counts, then the rows from them.
            judges, reference = label_counts(con, stage, "blind", dataset=ds)
            return estimate_rows_from_counts(judges, reference, ds, positive="yes")

        for ds in sorted(set(labels["dataset"])):
            frame = labels[labels["dataset"] == ds]
            for which in ("blind", "anchored"):
                cases: list[tuple[str, Callable[[], Any]]] = [
                    ("reference_labels", partial(reference_labels, frame, which)),
                    ("alt_test_rows", partial(alt_test_rows, labels, ds, humans=which))]
                if which == "blind":  # the reports estimate blind rates (anchored only for the pilot)
                    cases.append(("estimates_from_counts", partial(estimates, ds)))
                for step, f in cases:
                    out, s = _timed(f)
                    times[step] += s
                    outputs[f"{step} {ds} {which}"] = out
    return times, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=1_000_000)
    parser.add_argument("--stage", default="relevance")
    parser.add_argument("--db", type=Path, help="Use this existing store (read only) instead of building one.")
    parser.add_argument("--save", type=Path, help="Write times (JSON) and figures (FILE.pkl) of this checkout.")
    parser.add_argument("--baseline", type=Path, help="A --save file of an earlier checkout: check and compare.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pg-bench-extras-"))
    try:
        db = args.db
        if db is None:
            from benchmarks.dashboard_first_render import build

            db = work / "million.duckdb"
            build(db, args.labels)
        times, outputs = measure(db, args.stage)
        times["total"] = sum(times.values())
        for step, s in times.items():
            print(f"{step}: {s:.2f} s")
        if args.save:
            args.save.write_text(json.dumps(times))
            args.save.with_suffix(".pkl").write_bytes(pickle.dumps(outputs))
        if args.baseline:
            before = json.loads(args.baseline.read_text())
            earlier = pickle.loads(args.baseline.with_suffix(".pkl").read_bytes())  # noqa: S301 (our own file)
            differ = [k for k in earlier if k not in outputs or not same(earlier[k], outputs[k])]
            if differ or set(outputs) != set(earlier):
                sys.exit(f"figures differ from the baseline: {differ or sorted(set(outputs) ^ set(earlier))}")
            print(f"identical figures in all {len(outputs)} outputs")
            for step, s in times.items():
                print(f"{step}: {before[step]:.2f} s before, {s:.2f} s now: {before[step] / s:.1f}x faster")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
