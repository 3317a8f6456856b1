"""Benchmark: import 1,000,000 label rows in the generic format, from Parquet and from JSONL, beside the floor.

The floor is DuckDB's own reader loading the same file into a bare table of a fresh database file
(``CREATE TABLE t AS SELECT * FROM read_parquet(...)`` / ``read_json(...)``): no validation, no keys, no
ids: the least any import of that file can cost here. PersonaGap's import (read, validate every row,
hash item ids, build items/users, write them in one transaction) is timed into a fresh database file too,
and the ratio to the floor is printed. Target (issue 14): <= 3x. The two are timed alternately, each run
after deleting both files, so that a busy machine slows both alike; the median of the runs is printed,
first within this process (after one warm-up run of each), then with every run in a new interpreter.

The rows are made up (no human data): 200,000 items of 40,000 users, four human annotators and one LLM
per item, yes/no labels, a reason on the LLM's rows.

Run: python benchmarks/import_generic.py [--rows 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from personagap.human_data.labels import LabelSpec, Source, load_label_sources
from personagap.labels_api import import_labels, write_label_import

RATERS = ("ann-1", "ann-2", "ann-3", "ann-4", "gpt-x")


def make_rows(n_rows: int) -> pa.Table:
    """``n_rows`` labels: items of 5 raters each (4 human, 1 LLM), 5 items per user."""
    n_items = n_rows // len(RATERS)
    item = [f"item-{i:07d}" for i in range(n_items) for _ in RATERS]
    user = [f"user-{i // 5:06d}" for i in range(n_items) for _ in RATERS]
    rater = list(RATERS) * n_items
    kind = ["human", "human", "human", "human", "llm"] * n_items
    label = ["yes" if (i * 7 + k * 3) % 5 < 2 else "no" for i in range(n_items) for k in range(len(RATERS))]
    reason = [None, None, None, None, "made-up reason"] * n_items
    return pa.table({"item_id": item, "user_id": user, "rater": rater, "rater_kind": kind, "label": label,
                     "reason": reason})


def timed_alternately(fns: list[Callable[[], object]], repeat: int, fresh: Callable[[], None]) -> list[float]:
    """Median wall time of each of ``fns`` over ``repeat`` rounds; each round runs them in turn after ``fresh()``."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, out in zip(fns, times, strict=True):
            fresh()
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


# One operation in a new interpreter, as a user's command runs; only the operation is timed (not Python's
# start-up nor the imports). argv: operation, file, database.
_IN_NEW_PROCESS = """
import sys, time
op, path, db = sys.argv[1:4]
if op == "floor":
    import duckdb
    reader = "read_parquet" if path.endswith(".parquet") else "read_json"
    start = time.perf_counter()
    with duckdb.connect(db) as con:
        con.execute(f"CREATE TABLE t AS SELECT * FROM {reader}('{path}')")
else:
    from personagap.labels_api import import_labels
    start = time.perf_counter()
    import_labels(path, stage="relevance", dataset="bench", db=db)
print(time.perf_counter() - start)
"""


def in_new_process(op: str, path: Path, db: Path) -> Callable[[], float]:
    """A callable running ``op`` ('floor' or 'import') on ``path`` in a new interpreter; returns its timing."""
    def run() -> float:
        out = subprocess.run([sys.executable, "-c", _IN_NEW_PROCESS, op, str(path), str(db)], check=True,
                             capture_output=True, text=True, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
        return float(out.stdout.strip().splitlines()[-1])
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (the median is printed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        table = make_rows(args.rows)
        files = {"parquet": root / "labels.parquet", "jsonl": root / "labels.jsonl"}
        pq.write_table(table, files["parquet"])
        with duckdb.connect() as con:
            con.register("t", table)
            con.execute(f"COPY t TO '{files['jsonl']}' (FORMAT json)")
        floor_db, ours_db = root / "floor.duckdb", root / "ours.duckdb"

        def fresh() -> None:
            for db in (floor_db, ours_db):
                for p in (db, db.with_suffix(".duckdb.wal")):
                    p.unlink(missing_ok=True)

        print(f"{table.num_rows:,} label rows ({table.num_rows // len(RATERS):,} items, {len(RATERS)} raters each)")
        print("\nIn this process, after a first run of each (warm: the way a notebook or service imports):")
        print(f"{'format':<9}{'size MB':>9}{'floor s':>10}{'import s':>10}{'ratio':>8}"
              f"{'= read+check s':>16}{'+ write s':>11}")
        for fmt, path in files.items():
            reader = f"read_parquet('{path}')" if fmt == "parquet" else f"read_json('{path}')"

            def floor(reader: str = reader) -> None:
                with duckdb.connect(str(floor_db)) as con:
                    con.execute(f"CREATE TABLE t AS SELECT * FROM {reader}")

            def ours(path: Path = path) -> None:
                import_labels(path, stage="relevance", dataset="bench", db=ours_db)

            timed_alternately([floor, ours], 1, fresh)  # first runs: caches, allocator, lazy initialisation
            t_floor, t_ours = timed_alternately([floor, ours], args.repeat, fresh)
            # The two halves of an import, once each: reading + validating + staging rows (no database),
            # then writing them into the store (one transaction, commit).
            start = time.perf_counter()
            with load_label_sources([Source.of_path(path)], LabelSpec(stage="relevance", dataset="bench")) as built:
                t_read = time.perf_counter() - start
                fresh()
                start = time.perf_counter()
                write_label_import(ours_db, built)
                t_write = time.perf_counter() - start
            print(f"{fmt:<9}{path.stat().st_size / 1e6:>9.1f}{t_floor:>10.2f}{t_ours:>10.2f}"
                  f"{t_ours / t_floor:>7.1f}x{t_read:>16.2f}{t_write:>11.2f}")
        print("\nEach run in a new interpreter (cold: the way `personagap import labels` runs; start-up not timed):")
        print(f"{'format':<9}{'floor s':>10}{'import s':>10}{'ratio':>8}")
        for fmt, path in files.items():
            runs: list[list[float]] = [[], []]
            for _ in range(args.repeat):
                for out, op in zip(runs, ("floor", "import"), strict=True):
                    fresh()
                    out.append(in_new_process(op, path, floor_db if op == "floor" else ours_db)())
            t_floor, t_ours = (statistics.median(r) for r in runs)
            print(f"{fmt:<9}{t_floor:>10.2f}{t_ours:>10.2f}{t_ours / t_floor:>7.1f}x")
        print("\ntarget: <= 3x the floor")


if __name__ == "__main__":
    main()
