"""Start the pipeline view and the diagnosis while the server boots, so the first Overview does not pay for them.

``personagap dashboard`` serves the app through :mod:`personagap.dashboard.serve`, which calls :func:`start` before
anything heavy is imported and before Streamlit opens its port. Both come from one set of per-user counts
(:func:`personagap.analysis.pipeline_first.pipeline_and_diagnosis`), whose DuckDB count runs while the server
imports; the pipeline view first: the Overview's cache adopts it (:func:`view`) as soon as the page asks, even
while it is still computing. The first Overview then takes the diagnosis (:func:`take`), once: later reads go
through the dashboard's own TTL cache, and a Refresh recomputes from the file.

This module imports nothing heavy: starting the work must not wait for scipy or streamlit.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_jobs: dict[str, tuple[threading.Event, dict[str, Any], Future[Any]]] = {}


def stamp(db: str) -> tuple[int, int]:
    """The file's and its WAL's modification times: a write changes them, and a result computed before is stale."""
    def mtime(p: Path) -> int:
        return p.stat().st_mtime_ns if p.exists() else 0

    return mtime(Path(db)), mtime(Path(db + ".wal"))


def start(db: str) -> None:
    """Compute the pipeline view and the diagnosis of ``db`` in a background thread (default resamples and seed).

    Errors are the page's to report: it recomputes.
    """
    done = threading.Event()
    box: dict[str, Any] = {"stamp": stamp(db)}
    view: Future[Any] = Future()

    def work() -> None:
        try:
            from personagap.analysis.pipeline_first import pipeline_and_diagnosis
            from personagap.dashboard import access

            with access.reading():
                _, box["result"], _ = pipeline_and_diagnosis(db, extras=False, on_view=view.set_result)
            box["key"] = (box["result"].n_resamples, box["result"].seed)
        except Exception as exc:  # noqa: BLE001 - the page recomputes and shows the error itself
            box["result"] = None
            if not view.done():
                view.set_exception(exc)  # the Overview's cache retries a failed view
        finally:
            done.set()

    with _lock:
        _jobs[db] = (done, box, view)
    threading.Thread(target=work, name="personagap-prefetch", daemon=True).start()


def view(db: str) -> tuple[tuple[int, int], Future[Any]] | None:
    """The prefetch's pipeline view of ``db`` (pending or done) with the file stamp it read, or None."""
    with _lock:
        job = _jobs.get(db)
    return None if job is None else (job[1]["stamp"], job[2])


def take(db: str, n_resamples: int, seed: int, timeout: float = 60.0) -> Any | None:
    """Return the prefetched diagnosis once (waiting for it if still running), or None.

    None also when it was computed with other resamples or seed, or the file changed since.
    """
    with _lock:
        job = _jobs.pop(db, None)
    if job is None:
        return None
    done, box, _ = job
    done.wait(timeout)
    if box.get("result") is None or box.get("key") != (n_resamples, seed) or box["stamp"] != stamp(db):
        return None
    return box["result"]
