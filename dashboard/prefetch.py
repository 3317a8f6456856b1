"""Start the pipeline view and the diagnosis while the server boots, so the first Overview does not pay for them.

``personagap dashboard`` serves the app through :mod:`personagap.dashboard.serve`, which
imports the heavy modules and calls :func:`start` before Streamlit opens its port. Both come from one set of
per-user counts (:func:`personagap.analysis.pipeline_first.pipeline_and_diagnosis`), the pipeline view first: it is
handed to the Overview's cache (:func:`personagap.dashboard.overview.adopt`) as soon as it is ready. The
first Overview then takes the diagnosis (:func:`take`), once: later reads go through the
dashboard's own TTL cache, and a Refresh recomputes from the file.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_jobs: dict[tuple[str, int, int], tuple[threading.Event, dict[str, Any]]] = {}


def _stamp(db: str) -> tuple[int, int]:
    # A write changes the file or its WAL; a result computed before that is stale.
    def mtime(p: Path) -> int:
        return p.stat().st_mtime_ns if p.exists() else 0

    return mtime(Path(db)), mtime(Path(db + ".wal"))


def start(db: str, n_resamples: int, seed: int) -> None:
    """Compute the pipeline view and the diagnosis of ``db`` in a background thread (errors: the page's to report)."""
    from personagap.analysis.pipeline_first import pipeline_and_diagnosis
    from personagap.dashboard import access, overview

    key = (db, n_resamples, seed)
    done = threading.Event()
    box: dict[str, Any] = {"stamp": _stamp(db)}
    view = overview.adopt(db)

    def work() -> None:
        try:
            with access.reading():
                box["result"] = pipeline_and_diagnosis(db, n_resamples=n_resamples, seed=seed, extras=False,
                                                       on_view=view.set_result)[1]
        except Exception as exc:  # noqa: BLE001 - the page recomputes and shows the error itself
            box["result"] = None
            if not view.done():
                view.set_exception(exc)  # the Overview's next call recomputes a failed view
        finally:
            done.set()

    with _lock:
        _jobs[key] = (done, box)
    threading.Thread(target=work, name="personagap-prefetch", daemon=True).start()


def take(db: str, n_resamples: int, seed: int, timeout: float = 60.0) -> Any | None:
    """Return the prefetched diagnosis once (waiting for it if still running), or None."""
    with _lock:
        job = _jobs.pop((db, n_resamples, seed), None)
    if job is None:
        return None
    done, box = job
    done.wait(timeout)
    if box.get("result") is None or box["stamp"] != _stamp(db):
        return None
    return box["result"]
