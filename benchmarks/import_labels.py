"""Benchmark: import 1,000,000 label rows from JSONL into DuckDB through the Re-Centering adapter.

Generates a synthetic release in the release format (made-up users and attributes), then times
`personagap.api.import_recenter` (read + validate + one transaction), and a re-import (idempotent).

Run: python benchmarks/import_labels.py [--users 2500]   (2,500 users x 4 prompts x 25 attributes x 4 raters = 1M)
Target (issue 2): <= 15 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from personagap.api import import_recenter


def write_release(root: Path, users: int, prompts: int, attrs: int, llms: int) -> int:
    (root / "stage2/llm_relevance").mkdir(parents=True)
    labels = 0
    with (root / "stage2/task5_items.jsonl").open("w") as t5, (root / "stage2/task6_items.jsonl").open("w") as t6:
        files = [(root / f"stage2/llm_relevance/llm-{k}.jsonl").open("w") for k in range(llms)]
        for u in range(users):
            user = f"user{u:06d}"
            texts = [f"The user has synthetic trait {u}-{a}." for a in range(attrs)]
            profile = [{"attribute": t, "reason": "synthetic", "confidence": 0.5} for t in texts]
            for p in range(prompts):
                t5.write(json.dumps({"user_id": user, "prompt_index": p, "prompt_text": f"Synthetic prompt {p}",
                                     "profile_attributes": profile, "items": []}) + "\n")
                t6.write(json.dumps({"model_tag": "m", "user_id": user, "prompt_id": f"{user}_{p}",
                                     "prompt_text": "x", "response_no_context": "g", "response_personalized": "p",
                                     "attributes": [{"attribute": t, "is_relevant": (u + p + a) % 5 == 0}
                                                    for a, t in enumerate(texts)]}) + "\n")
                labels += attrs  # task6's human majority on every profile attribute
                labels += attrs  # task5's pipeline selection: a system label (yes/no) on every profile attribute
                for k, f in enumerate(files):
                    f.write(json.dumps({"model": f"llm-{k}", "sample_index": 0, "prompt_index": p, "user_id": user,
                                        "items": [{"attribute": t, "relevant": (u + p + a + k) % 3 == 0,
                                                   "raw_answer": "YES", "full_output": "YES"}
                                                  for a, t in enumerate(texts)]}) + "\n")
                    labels += attrs
        for f in files:
            f.close()
    return labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=2500)
    parser.add_argument("--repeat", type=int, default=3,
                        help="fresh imports to time (a shared VM's disk and CPU vary run to run: the median counts)")
    args = parser.parse_args()
    firsts, agains = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "release"
        n = write_release(root, args.users, prompts=4, attrs=25, llms=3)
        size = sum(p.stat().st_size for p in root.rglob("*.jsonl")) / 1e6
        for k in range(args.repeat):
            db = Path(tmp) / f"bench-{k}.duckdb"
            start = time.perf_counter()
            summary = import_recenter(root, db)
            firsts.append(time.perf_counter() - start)
            assert summary.written["labels"].inserted == n, summary.written
            start = time.perf_counter()
            import_recenter(root, db)
            agains.append(time.perf_counter() - start)
            db.unlink()
    first = statistics.median(firsts)
    print(f"import of {n:,} label rows ({size:.0f} MB of JSONL): median {first:.2f} s of {args.repeat} "
          f"(range {min(firsts):.2f}-{max(firsts):.2f}; target <= 15 s); {n / first:,.0f} labels/s")
    print(f"idempotent re-import of the same files: median {statistics.median(agains):.2f} s")


if __name__ == "__main__":
    main()
