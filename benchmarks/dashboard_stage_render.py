"""Benchmark (not a test): a stage page of the dashboard with 1,000,000 labels, and its robust agreement panel.

Two measurements on the store `dashboard_first_render.py` builds (100,000 relevance items of 2,000 users with
a human majority, 7 LLM judges and 3 individual humans; stage-1 human labels):

1. In process, the stage's prevalence-robust panel computed two ways: the old way (reload every label of the
   stage with ``store.load_labels`` and run ``analysis.robust.panel_rows``) and the dashboard's way now
   (:mod:`personagap.dashboard.robust_panel`: the diagnosis's judge scores plus two small aggregate queries).
   Both must give the same rows (checked, figure by figure), then the times and their ratio are printed.
2. In headless Chromium (Debian's), each run a fresh ``personagap dashboard`` server (cold caches): seconds from
   opening the stage page to its robust panel on screen, and to the whole page rendered and idle.

Run (``--skip-browser`` for part 1 only)::

    python benchmarks/dashboard_stage_render.py [--labels 1000000] [--runs 2] [--stage relevance] \\
        [--save before.json | --baseline before.json] [--db EXISTING.duckdb]

Before/after a change: serve the older checkout (``--save before.json``), then this one (``--baseline
before.json`` prints the ratios). The server is ``python -m personagap.dashboard.serve``, so run from outside the
repository with ``PYTHONPATH`` pointing at a package tree of the older checkout laid out as ``.ci/typecheck``
builds one; ``--db`` reuses one built store for both.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dashboard_first_render import build  # noqa: E402
from personagap.analysis.agreement import DEFAULT_SEED  # noqa: E402
from personagap.analysis.diagnosis_store import diagnose_store  # noqa: E402
from personagap.dashboard import queries  # noqa: E402
from tests.support.browser_helpers import browser, find_chromium, serve_dashboard  # noqa: E402

PANEL_TITLE = "Prevalence-robust agreement"
LAST_SECTION = "What is stored for this stage"
URL_PATHS = {"extraction": "stage1", "relevance": "stage2", "response": "stage3"}
PAGE_TIMEOUT_MS = 900_000  # a stage page of 10^6 labels takes minutes before this change


def _old_panel(db: Path, stage: str, datasets: list[str]) -> list[dict[str, Any]]:
    """What the stage page did before: every label of the stage reloaded, then the tidy-frame panel."""
    from personagap.store import load_labels
    from tests.support.oracles import panel_rows

    with queries.read_only(db) as con:
        labels = load_labels(con, stage=stage)
    return [r for ds in datasets for r in panel_rows(labels, ds)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return bool(a == b)


def compare_panel(db: Path, stage: str) -> None:
    """Time the old and the new panel on ``db`` (the diagnosis is computed once, as the Overview caches it)."""
    from personagap.dashboard.robust_panel import stage_panel

    t = time.perf_counter()
    diagnosis = diagnose_store(db, seed=DEFAULT_SEED).diagnosis
    diag_s = time.perf_counter() - t
    datasets = sorted({j.dataset for j in diagnosis.stage(stage).judges})
    t = time.perf_counter()
    old = _old_panel(db, stage, datasets)
    old_s = time.perf_counter() - t
    t = time.perf_counter()
    new = stage_panel(db, diagnosis, stage, datasets)
    new_s = time.perf_counter() - t
    assert len(old) == len(new), (len(old), len(new))
    for a, b in zip(old, new, strict=True):
        diff = [k for k in a if not _same(a[k], b.get(k))]
        assert not diff, (a["judge"], [(k, a[k], b.get(k)) for k in diff])
    print(f"robust panel of {stage} ({len(new)} rows on {len(datasets)} dataset(s)), identical figures: "
          f"reload + panel_rows {old_s:.2f} s, from the diagnosis {new_s:.3f} s: {old_s / new_s:.0f}x faster "
          f"(the diagnosis itself, computed once for every page: {diag_s:.2f} s)")


def stage_times(db: Path, chromium: str, stage: str) -> tuple[float, float]:
    """Fresh server, stage page opened once: seconds to the robust panel on screen and to the idle page."""
    with serve_dashboard(db, timeout=120) as url, browser(chromium) as ctx:
        page = ctx.new_page()
        start = time.perf_counter()
        page.goto(f"{url}/{URL_PATHS[stage]}")
        page.get_by_text(PANEL_TITLE, exact=False).first.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
        panel = time.perf_counter() - start
        page.get_by_text(LAST_SECTION, exact=False).first.wait_for(state="visible", timeout=PAGE_TIMEOUT_MS)
        page.wait_for_function(
            "() => { const a = document.querySelector('.stApp');"
            " return a && a.getAttribute('data-test-script-state') !== 'running'; }", timeout=PAGE_TIMEOUT_MS)
        whole = time.perf_counter() - start
    return panel, whole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=2, help="Fresh servers, each opening the stage page once.")
    parser.add_argument("--stage", default="relevance", choices=sorted(URL_PATHS))
    parser.add_argument("--skip-browser", action="store_true", help="Only the in-process panel comparison.")
    parser.add_argument("--db", type=Path, help="Use this existing store (read only) instead of building one.")
    parser.add_argument("--save", type=Path, help="Write the page times to this JSON file (e.g. before a change).")
    parser.add_argument("--baseline", type=Path, help="A --save file of an earlier checkout: print the ratio.")
    args = parser.parse_args()
    chromium = None if args.skip_browser else find_chromium()
    if not args.skip_browser and chromium is None:
        sys.exit("chromium not found: apt-get install chromium (see .ci/install_browser.sh), or --skip-browser")
    work = Path(tempfile.mkdtemp(prefix="pg-bench-stage-"))
    try:
        if args.db:
            db = args.db
            n = queries.db_state(db)["labels"]
            print(f"store {db}: {n:,} labels on {queries.db_state(db)['items']:,} items")
        else:
            db = work / "million.duckdb"
            t = time.perf_counter()
            n = build(db, args.labels)
            print(f"built {n:,} labels on {queries.db_state(db)['items']:,} items in {time.perf_counter() - t:.1f} s")
        try:
            compare_panel(db, args.stage)
        except ImportError:  # a checkout from before the panel was built from the diagnosis
            print("robust panel from the diagnosis: not in this checkout (page times below are the old path)")
        if chromium is None:
            return
        results = [stage_times(db, chromium, args.stage) for _ in range(args.runs)]
        panel = [r[0] for r in results]
        whole = [r[1] for r in results]
        print(f"{URL_PATHS[args.stage]} page with {n:,} labels, {args.runs} fresh servers (cold caches), headless "
              f"Chromium: robust panel on screen after median {statistics.median(panel):.1f} s (all: "
              + ", ".join(f"{x:.1f}" for x in panel) + f"); whole page idle after median "
              f"{statistics.median(whole):.1f} s (all: " + ", ".join(f"{x:.1f}" for x in whole) + ")")
        times = {"panel": statistics.median(panel), "whole": statistics.median(whole), "labels": n}
        if args.save:
            args.save.write_text(json.dumps(times))
        if args.baseline:
            before = json.loads(args.baseline.read_text())
            for key, what in (("panel", "robust panel on screen"), ("whole", "whole page idle")):
                print(f"{what}: {before[key]:.1f} s before, {times[key]:.1f} s now: "
                      f"{before[key] / times[key]:.1f}x faster")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
