"""Benchmark (issues 20, 31): time and peak memory of `diagnose`, each `report` and `plan` on a large store.

The stores are made up (no human data), one per stage: a dataset of ``labels / 5`` items, 100 items per user, one
human and four LLM judges per item (the shape of a team judging production conversations with a few judges),
imported through the generic importer from a Parquet file: relevance (yes/no; ``diagnose``, ``report relevance`` and
``plan --stage relevance`` run on it), pairwise responses (A/B/tie with the two answers, for ``report response``)
and extraction verdicts (ok/bad/unsure with the attribute, for ``report extraction``). Each command runs in a new
interpreter (``personagap diagnose --json`` / ``personagap report STAGE --json``), and its wall time and peak
resident memory (``ru_maxrss`` of the child) are printed.

The floor is what any report of this store must at least do: DuckDB building every per-(judge, user) confusion
table (the GROUP BY a report's figures and their bootstrap need), run in a new interpreter too so that both pay
for starting Python and opening the file. Target at 10^7 labels on a 2-core machine (issue 20): <= 10 s and
<= 2 GB per command, <= 5x the floor.

``diagnose`` computes the pipeline view and the judges' diagnosis together
(:func:`personagap.analysis.diagnosis_store.diagnose_store`: one blind reference, one count of the judge
labels). ``diagnose-aggregates`` (not run by default) is the judges' diagnosis and its best-judge rows alone
(the same function without ``view``): what the pipeline view adds.

Run: python benchmarks/report_memory.py [--labels 1000000 10000000]
     [--commands diagnose report-relevance report-response report-extraction plan [diagnose-aggregates]]
     [--keep DIR]   (reuse or keep the built stores there)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

JUDGES = ("judge-a", "judge-b", "judge-c", "judge-d")
ITEMS_PER_USER = 100
PERSONAGAP = [sys.executable, "-c", "import sys; from personagap.cli import main; sys.argv[0] = 'personagap'; main()"]
COMMANDS: dict[str, list[str]] = {
    "diagnose": ["diagnose", "--json"],
    "report-relevance": ["report", "relevance", "--json"],
    "report-response": ["report", "response", "--json"],
    "report-extraction": ["report", "extraction", "--json"],
    "plan": ["plan", "--stage", "relevance", "--json"],
}
STAGE_OF = {"report-response": "response", "report-extraction": "extraction"}
"""The store a command runs on (every other command: the relevance store)."""
# Per stage: the human's labels (the first is the one the human gives 20% of the time, judges agree ~80%).
VOCABULARY = {"relevance": ("yes", "no"), "response": ("A", "B", "tie"), "extraction": ("bad", "ok", "unsure")}
# The judges' diagnosis and its best-judge rows without the pipeline view (diagnosis_store.diagnose_store):
# `diagnose --json` minus the view, measured the same way (on demand only: no command runs it).
DIAGNOSE_FROM_AGGREGATES = [sys.executable, "-c", """
import json, sys
from personagap.analysis.agreement import json_safe
from personagap.analysis.diagnosis_store import diagnose_store
done = diagnose_store(sys.argv[1], extras=True)
print(json.dumps(done.diagnosis.to_json_dict() | {"best_judge_vs_humans": json_safe(done.extras)}, indent=2))
"""]

FLOOR = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
con.execute('''
    WITH h AS (SELECT item_id, label AS human FROM labels WHERE rater_kind = 'human')
    SELECT l.rater, i.user_id, h.human, l.label, count(*) AS n
    FROM labels l JOIN h USING (item_id) JOIN items i USING (item_id)
    WHERE l.rater_kind = 'llm' GROUP BY ALL
''').fetchall()
"""


def make_labels(n_labels: int, stage: str = "relevance", seed: int = 0) -> pa.Table:
    """One human and four judges per item; the human gives the stage's first label 20% of the time, else the
    others evenly; a judge copies the human ~80% of the time, else gives another label at random.

    Pairs carry two answers of random lengths (length bias is computed from them), verdicts the attribute.
    """
    rng = np.random.default_rng(seed)
    vocab = np.array(VOCABULARY[stage], dtype=object)
    n_items = n_labels // (1 + len(JUDGES))
    items = np.char.add("i", np.arange(n_items).astype(str))
    users = np.char.add("u", (np.arange(n_items) // ITEMS_PER_USER).astype(str))
    human = np.where(rng.random(n_items) < 0.2, 0, rng.integers(1, len(vocab), n_items))
    raters = ["ann-1", *JUDGES]
    kinds = ["human"] + ["llm"] * len(JUDGES)
    cols: dict[str, list[np.ndarray]] = {"item_id": [], "user_id": [], "rater": [], "rater_kind": [], "label": []}
    for rater, kind in zip(raters, kinds, strict=True):
        other = (human + rng.integers(1, len(vocab), n_items)) % len(vocab)
        said = human if kind == "human" else np.where(rng.random(n_items) < 0.8, human, other)
        cols["item_id"].append(items)
        cols["user_id"].append(users)
        cols["rater"].append(np.full(n_items, rater))
        cols["rater_kind"].append(np.full(n_items, kind))
        cols["label"].append(vocab[said])
    table = {k: pa.array(np.concatenate(v).astype(object)) for k, v in cols.items()}
    n_rows = n_items * len(raters)
    if stage == "response":
        # The item context on every row (rows that repeat it must agree): short answers, lengths 1-40.
        for side in ("a", "b"):
            length = np.tile(rng.integers(1, 41, n_items), len(raters))
            table[f"response_{side}"] = pa.array(np.char.multiply(side, length).astype(object))
    elif stage == "extraction":
        table["attribute"] = pa.array(np.tile(np.char.add("likes topic ", (np.arange(n_items) % 50).astype(str)),
                                              len(raters)).astype(object))
    assert all(len(v) == n_rows for v in table.values())
    return pa.table(table)


def build(db: Path, n_labels: int, stage: str = "relevance") -> None:
    """Write the made-up labels to Parquet and import them with ``personagap import labels``."""
    if db.exists():
        return
    parquet = db.with_suffix(".parquet")
    pq.write_table(make_labels(n_labels, stage), parquet)
    subprocess.run([*PERSONAGAP, "import", "labels", str(parquet), "--stage", stage,
                    "--dataset", "bench", "--db", str(db)], check=True, stdout=subprocess.DEVNULL)
    parquet.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labels", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=[*COMMANDS, "diagnose-aggregates"])
    parser.add_argument("--keep", type=Path, help="folder to keep (or reuse) the built stores in")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="pg-report-memory-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{os.cpu_count()} cores; stores in {root}")
    print(f"{'labels':>12} {'command':<18} {'wall s':>8} {'peak GB':>8} {'floor s':>8} {'ratio':>6}")
    for n in args.labels:
        floors: dict[str, float] = {}
        for name in args.commands:
            stage = STAGE_OF.get(name, "relevance")
            # The relevance store keeps its old name, so stores kept by earlier runs are reused.
            db = root / (f"bench-{n}.duckdb" if stage == "relevance" else f"bench-{stage}-{n}.duckdb")
            if stage not in floors:
                t = time.perf_counter()
                build(db, n, stage)
                print(f"{n:>12,} {'(build ' + stage + ')':<18} {time.perf_counter() - t:>8.1f}")
                # Each measurement in its own grandchild so ru_maxrss is that command's alone.
                floor_s, floor_gb, _ = _isolated([sys.executable, "-c", FLOOR, str(db)])
                floors[stage] = floor_s
                print(f"{n:>12,} {'floor ' + stage:<18} {floor_s:>8.2f} {floor_gb:>8.2f}")
            cmd = ([*DIAGNOSE_FROM_AGGREGATES, str(db)] if name == "diagnose-aggregates"
                   else [*PERSONAGAP, *COMMANDS[name], "--db", str(db)])
            wall, gb, code = _isolated(cmd)
            status = "" if code == 0 else f"  (exit {code})"
            floor_s = floors[stage]
            print(f"{n:>12,} {name:<18} {wall:>8.2f} {gb:>8.2f} {floor_s:>8.2f} {wall / floor_s:>6.1f}{status}")


def _isolated(cmd: list[str]) -> tuple[float, float, int]:
    # A helper interpreter runs the command and reports its own children's peak RSS: the figure of that
    # command alone, not the largest child this benchmark has started so far.
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True); "
            "w = time.perf_counter() - t; "
            "print(w, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode); "
            "sys.stderr.write(r.stderr[-500:] if r.returncode else '')")
    done = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, check=True)
    wall, kb, rc = done.stdout.split()
    if int(rc) != 0:
        print(f"    {cmd[-4:-2]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return float(wall), int(kb) / 1e6, int(rc)


if __name__ == "__main__":
    main()
