"""Benchmark: judge runner throughput against a loopback OpenAI-compatible server with fixed latency.

3,973 items judged with concurrency 32 against a server that answers every request after 200 ms
(run in its own process, so that it does not share the client's interpreter lock):
prints wall time, the ideal time (items x latency / concurrency) and their ratio (target <= 1.15),
then a cached rerun (target: 0 requests, <= 2 s).

Run: python benchmarks/judge_throughput.py [--items 3973] [--latency 0.2] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from personagap.judges import get_judge  # noqa: E402
from personagap.judges.base import JudgeTask  # noqa: E402
from personagap.judges.runner import LMConfig, run_judge  # noqa: E402
from personagap.records import Item  # noqa: E402
from personagap.store import ImportBatch, write_batch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=3973)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()

    answer = json.dumps({"reason": "benchmark", "answer": "YES"})
    server = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server", "--answer", answer, "--latency",
                               str(args.latency)], cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE,
                              text=True)
    try:
        ready = server.stdout.readline().split() if server.stdout else []
        if len(ready) != 2 or ready[0] != "READY":
            raise SystemExit("loopback server did not start")
        run(args, base_url=ready[1])
    finally:
        server.terminate()
        server.wait()


def run(args: argparse.Namespace, base_url: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        batch = ImportBatch()
        for i in range(args.items):
            iid = f"bench-{i:06d}"
            batch.items[iid] = Item(item_id=iid, dataset="bench", stage="relevance", user_id=f"u{i % 100}",
                                    prompt_index=0, attribute=f"The user has trait {i}.")
        write_batch(db, batch)
        tasks = [JudgeTask(key=iid, targets=(iid,),
                           inputs={"prompt": "Benchmark prompt", "attribute": it.attribute or ""})
                 for iid, it in batch.items.items()]
        judge = get_judge("relevance-per-attribute")
        lm = LMConfig(model="openai/bench", api_base=base_url, timeout=30)

        start, cpu = time.perf_counter(), time.process_time()
        first = run_judge(db, judge, tasks, lm, concurrency=args.concurrency, progress=False)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        ideal = args.items * args.latency / args.concurrency
        print(f"first run: {first.judged} judged, {first.failed} failed, {first.requests} requests; "
              f"wall {wall:.2f} s, ideal {ideal:.2f} s, ratio {wall / ideal:.3f} (target <= 1.15)")
        # The ratio suffers when other processes share the cores; the client's own CPU per call does not.
        print(f"client CPU {1000 * cpu / max(first.requests, 1):.2f} ms per call (all threads; the loop must "
              f"stay under latency / concurrency = {1000 * args.latency / args.concurrency:.1f} ms); "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

        start = time.perf_counter()
        again = run_judge(db, judge, tasks, lm, concurrency=args.concurrency, progress=False)
        cached = time.perf_counter() - start
        print(f"cached rerun: {again.requests} requests (target 0), {again.cached} cached, "
              f"{cached:.2f} s (target <= 2 s)")


if __name__ == "__main__":
    main()
