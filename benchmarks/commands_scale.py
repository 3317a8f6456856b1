"""Benchmark (issue 31): `plan`, `route`, `jury` and every dashboard page beside `diagnose` and the reports.

The store is ``report_memory.py``'s relevance store (one human and four LLM judges per item, 100 items per user,
imported through the generic importer; its :func:`benchmarks.report_memory.make_labels` builds the labels) with one
addition: each judge label carries a stated confidence on a 0-1 scale (higher where the judge copies the human), so
that ``route`` has something to threshold and ``jury --weighting confidence`` something to weigh.

Each cell runs in a new interpreter and prints its wall time, peak resident memory (``ru_maxrss`` of that child
alone) and its ratio to the floor: DuckDB building every per-(judge, user) confusion table
(:data:`benchmarks.report_memory.FLOOR`, also in a new interpreter). The load average is printed beside each cell:
the machine is shared, and a cell measured beside other work is slower than it would be alone.

Cells:

- ``diagnose``, ``report-relevance``, ``plan``: the commands, ``--json``.
- ``route``: ``route --judge judge-a --target-accuracy 0.8 --json`` (writes the routing decision into the store).
- ``jury``: ``jury --judges judge-a,judge-b,judge-c`` (writes the jury's labels; a fresh copy of the store is used
  so that the other cells never see the jury).
- ``page-<name>``: a dashboard page rendered headless with Streamlit's AppTest (cold caches, a new interpreter; the
  Overview page runs first in every cell, as it does when the app opens, so it is measured alone too and the page's
  own time is the difference). ``page-annotate`` enters a name and renders each queue order.
- ``annotate-queues``: every Annotate queue order's data (:func:`personagap.dashboard.annotate.queue_inputs` and
  :func:`~personagap.dashboard.annotate.order_items`) without Streamlit.

Target (issue 31) at 10^7 labels on 2 cores: <= 15 s and <= 2 GB per cell.

Run: python benchmarks/commands_scale.py [--labels 1000000 10000000] [--cells ...] [--keep /tmp/pg-commands-scale]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report_memory import FLOOR, PERSONAGAP, make_labels  # noqa: E402

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
COMMANDS: dict[str, list[str]] = {
    "diagnose": ["diagnose", "--json"],
    "report-relevance": ["report", "relevance", "--json"],
    "plan": ["plan", "--stage", "relevance", "--json"],
    "route": ["route", "--stage", "relevance", "--dataset", "bench", "--judge", "judge-a",
              "--target-accuracy", "0.8", "--json"],
    "jury": ["jury", "--stage", "relevance", "--dataset", "bench", "--judges", "judge-a,judge-b,judge-c"],
}
PAGES = {"overview": None, "stage1": "page_stage1.py", "stage2": "page_stage2.py", "stage3": "page_stage3.py",
         "agreement": "page_agreement.py", "disagreements": "page_disagreements.py", "runs": "page_runs.py",
         "annotate": "page_annotate.py"}
CELLS = [*COMMANDS, *(f"page-{p}" for p in PAGES), "annotate-queues"]

# A page under AppTest, cold (a new interpreter): the app's first run (the Overview page), then the page.
PAGE = """
import os, sys, time
from streamlit.testing.v1 import AppTest
os.environ["PERSONAGAP_DB"] = sys.argv[1]
app, page = sys.argv[2], sys.argv[3]
t = time.perf_counter()
at = AppTest.from_file(app, default_timeout=3600).run()
assert not at.exception, [e.value for e in at.exception]
first = time.perf_counter() - t
if page != "-":
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    if page == "page_annotate.py":
        at.text_input[0].input("bench-annotator")
        next(b for b in at.button if b.label == "Start labelling").click().run()
        for order in ("disagreement", "uncertain", "random"):
            at.selectbox(key="annotate_order").set_value(order).run()
            assert not at.exception, [e.value for e in at.exception]
print(f"overview {first:.2f} page {time.perf_counter() - t - first:.2f}", file=sys.stderr)
"""

QUEUES = """
import sys
from personagap.dashboard import annotate
items, labels = annotate.queue_inputs(sys.argv[1], "relevance", "bench", meta_of="judge-a")
for order in ("disagreement", "uncertain", "random"):
    annotate.order_items(items, labels, order, best_judge="judge-a", seed=0)
"""


def with_confidence(table: pa.Table, seed: int = 1) -> pa.Table:
    """Each LLM label gets a 0-1 confidence: ~U(0.6, 1) where it copies the human, ~U(0.5, 0.9) where not."""
    rng = np.random.default_rng(seed)
    kind = np.asarray(table.column("rater_kind").to_numpy(zero_copy_only=False))
    label = np.asarray(table.column("label").to_numpy(zero_copy_only=False))
    item = np.asarray(table.column("item_id").to_numpy(zero_copy_only=False))
    n_items = int((kind == "human").sum())
    human = np.tile(label[:n_items], len(label) // n_items)  # make_labels writes rater blocks in the items' order
    assert (item[:n_items] == item[n_items:2 * n_items]).all()
    agree = label == human
    conf = np.where(agree, rng.uniform(0.6, 1.0, len(label)), rng.uniform(0.5, 0.9, len(label))).round(2)
    llm = kind == "llm"
    return (table.append_column("confidence", pa.array(np.where(llm, conf, np.nan), mask=~llm))
                 .append_column("confidence_scale", pa.array(np.where(llm, "0-1", None).astype(object))))


def build(db: Path, n_labels: int) -> None:
    """The relevance store of ``n_labels`` labels with the judges' confidences (kept if it exists)."""
    if db.exists():
        return
    parquet = db.with_suffix(".parquet")
    pq.write_table(with_confidence(make_labels(n_labels, "relevance")), parquet)
    subprocess.run([*PERSONAGAP, "import", "labels", str(parquet), "--stage", "relevance",
                    "--dataset", "bench", "--db", str(db)], check=True, stdout=subprocess.DEVNULL)
    parquet.unlink()


def isolated(cmd: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS (GB) of the command alone, its exit code and the last line of its stderr."""
    # A helper interpreter runs the command and reports its own children's peak RSS (report_memory.py's way).
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
            "w = time.perf_counter() - t; "
            "print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode); "
            "sys.stderr.write(r.stderr[-2000:])")
    done = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True)
    wall, kb, rc = done.stdout.split()
    tail = (done.stderr.strip().splitlines() or [""])[-1]
    return float(wall), int(kb) / 1e6, int(rc), tail


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def command(cell: str, db: Path, scratch: Path) -> tuple[list[str], Path | None]:
    """The command line of a cell and the store copy it writes to (None: it reads ``db`` only)."""
    if cell in ("route", "jury"):
        copy = scratch / f"{cell}-{db.name}"
        shutil.copyfile(db, copy)
        return [*PERSONAGAP, *COMMANDS[cell], "--db", str(copy)], copy
    if cell in COMMANDS:
        return [*PERSONAGAP, *COMMANDS[cell], "--db", str(db)], None
    if cell == "annotate-queues":
        return [sys.executable, "-c", QUEUES, str(db)], None
    page = PAGES[cell.removeprefix("page-")]
    return [sys.executable, "-c", PAGE, str(db), str(APP), page or "-"], None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labels", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--cells", nargs="+", default=CELLS, choices=CELLS)
    parser.add_argument("--keep", type=Path, default=Path("/tmp/pg-commands-scale"),
                        help="folder to keep (or reuse) the built stores in")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each cell")
    args = parser.parse_args()
    args.keep.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores; stores in {args.keep}")
    print(f"{'labels':>12} {'cell':<18} {'wall s':>8} {'peak GB':>8} {'floor s':>8} {'ratio':>6}  load 1/5/15")
    for n in args.labels:
        db = args.keep / f"commands-{n}.duckdb"
        t = time.perf_counter()
        build(db, n)
        print(f"{n:>12,} {'(build)':<18} {time.perf_counter() - t:>8.1f}", flush=True)
        before = load()
        floor_s, floor_gb, _, _ = isolated([sys.executable, "-c", FLOOR, str(db)])
        print(f"{n:>12,} {'floor':<18} {floor_s:>8.2f} {floor_gb:>8.2f} {'':>8} {'':>6}  {before}", flush=True)
        for cell in args.cells:
            for _ in range(args.repeat):
                before = load()
                cmd, copy = command(cell, db, args.keep)
                wall, gb, code, tail = isolated(cmd)
                if copy is not None:
                    copy.unlink(missing_ok=True)
                    Path(str(copy) + ".wal").unlink(missing_ok=True)
                status = (f"  ({tail})" if cell.startswith("page-") else "") if code == 0 \
                    else f"  (exit {code}: {tail[:300]})"
                print(f"{n:>12,} {cell:<18} {wall:>8.2f} {gb:>8.2f} {floor_s:>8.2f} {wall / floor_s:>6.1f}  "
                      f"{before}{status}", flush=True)


if __name__ == "__main__":
    main()
