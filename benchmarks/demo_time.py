"""Benchmark: wall and CPU time of `personagap demo`, in total and per step, on the built-in SAMPLE data.

Runs the demo in a fresh child process per repeat (so imports are counted, as for a first-time user) and
reports the median. CPU time (user + sys of the child) is the steadier figure on a shared machine.

Run: python benchmarks/demo_time.py [--repeats 3]
Target: a few seconds on two cores (the README's main job).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
t0 = time.perf_counter()
from personagap.cli import _mark_demo_db
from personagap._cli_base import DEMO_STEPS
steps = {"imports": time.perf_counter() - t0}
work = Path(tempfile.mkdtemp(prefix="personagap-demo-bench-"))
db = work / "demo.duckdb"
_mark_demo_db(db)
for step in DEMO_STEPS:
    t = time.perf_counter()
    text = step.run(work, db)
    steps[step.title] = time.perf_counter() - t
    assert "too few users" not in text, step.title
print(json.dumps(steps))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = os.environ | {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    walls, cpus, steps = [], [], []
    for _ in range(args.repeats):
        before = os.times()
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as home:
            out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True,
                                 env=env | {"HOME": home})
        walls.append(time.perf_counter() - start)
        after = os.times()
        cpus.append((after.children_user - before.children_user) + (after.children_system - before.children_system))
        steps.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"personagap demo, {args.repeats} runs: wall median {statistics.median(walls):.2f}s "
          f"(min {min(walls):.2f}s), CPU user+sys median {statistics.median(cpus):.2f}s; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name in steps[0]:
        print(f"  {name:<50} {statistics.median(s[name] for s in steps):6.2f}s")


if __name__ == "__main__":
    main()
