"""Start the pipeline view and the diagnosis while the server boots, so the first Overview does not pay for them.

``personagap dashboard`` serves the app through :mod:`personagap.dashboard.serve`, which calls :func:`start` before
anything heavy is imported and before Streamlit opens its port. Both come from one set of per-user counts
(:func:`personagap.analysis.diagnosis_store.diagnose_store`), computed in a child process: in a thread of the
server, its pandas work held the interpreter lock against Streamlit's imports, its start-up and the first page's
files and script run (at 10^6 labels the pipeline view came ~10 s after the prefetch started instead of ~5 s alone).
The child sends the pipeline view first: the Overview's cache adopts it (:func:`view`) as soon as the page asks,
even while it is still computing. It then holds the diagnosis back until a page asks for it (:func:`take`, which
the first Overview calls once the browser has drawn the pipeline view) or :data:`HOLD_SECONDS` have passed: a
browser opened when the server starts loads the page's scripts in that time, and computing beside it delayed the
first paint (at 10^6 labels, 1.51 s against 1.28 s with the child paused, median of 5). The first Overview takes
the diagnosis once: later reads go through the dashboard's own TTL cache, and a Refresh recomputes from the file.

The child reads the file read-only; while it runs, the server holds the dashboard's read gate
(:func:`personagap.dashboard.access.reading`) for it, as for a read of its own, so an Annotate label waits until the
file is free. Nothing is kept on disk: a new server computes afresh.

This module imports nothing heavy: starting the work must not wait for scipy or streamlit.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_jobs: dict[str, tuple[threading.Event, dict[str, Any], Future[Any]]] = {}
_states: dict[str, tuple[tuple[int, int], dict[str, int]]] = {}
_shared: dict[tuple[str, int], tuple[tuple[int, int], Future[Any]]] = {}
_computed: dict[tuple[str, int], tuple[int, int]] = {}
_CHILD = "from personagap.dashboard.prefetch import child_main; child_main()"
HOLD_SECONDS = 5.0
"""How long the child waits, after sending the pipeline view, for a page to ask for the diagnosis before computing it
anyway. It covers a browser opened when the server starts: at 10^6 labels the benchmark's first Overview asked
1.8-2.3 s after the view (its fresh Chromium takes ~1.5 s to start). The child holds the read gate meanwhile: an
Annotate label given then is written when it ends."""
_GO = b"go\n"


class PrefetchError(RuntimeError):
    """The child process failed (its message says why); the page recomputes and shows its own error."""


def stamp(db: str) -> tuple[int, int]:
    """The file's and its WAL's modification times: a write changes them, and a result computed before is stale."""
    def mtime(p: Path) -> int:
        return p.stat().st_mtime_ns if p.exists() else 0

    return mtime(Path(db)), mtime(Path(db + ".wal"))


def child_main() -> None:
    """The child process (``python -c``, the database and the hold in ``sys.argv[1:3]``): compute, send the results.

    ``("view", PipelineView)`` as soon as it is ready, then, once a line arrives on its stdin or the hold has passed,
    ``("diagnosis", Diagnosis)`` (or ``("error", text)``), to the stdout it was given; anything a library prints goes
    to stderr instead. It ends when its stdin closes: the server is gone, whatever stopped it.
    """
    # Ctrl+C in a terminal reaches the whole process group: the server stops, and that ends this child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    db, hold = sys.argv[1], float(sys.argv[2])
    asked = threading.Event()

    def listen() -> None:
        for _ in sys.stdin.buffer:  # a line: a page asks for the diagnosis
            asked.set()
        os._exit(0)  # end of input: the server is gone

    threading.Thread(target=listen, daemon=True).start()

    def send(kind: str, payload: Any) -> None:
        pickle.dump((kind, payload), out, protocol=pickle.HIGHEST_PROTOCOL)
        out.flush()

    try:
        from personagap.analysis.diagnosis_store import diagnose_store

        def on_view(view: Any) -> None:
            send("view", view)
            asked.wait(hold)

        send("diagnosis", diagnose_store(db, on_view=on_view).diagnosis)
    except Exception as exc:  # noqa: BLE001 - sent as text: the exception itself may not pickle
        with contextlib.suppress(OSError):  # the server is gone: nobody to tell
            send("error", f"{type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(OSError):
            out.close()
        # Sent: skip the interpreter's teardown (pandas, DuckDB, scipy), CPU the first page's script run needs more.
        os._exit(0)


def start(db: str, hold: float = HOLD_SECONDS) -> None:
    """Compute the pipeline view and the diagnosis of ``db`` in a child process (default seed).

    Args:
        db: The database.
        hold: Seconds the child waits after the pipeline view for :func:`take` before computing the diagnosis.

    Errors are the page's to report: it recomputes.
    """
    done = threading.Event()
    box: dict[str, Any] = {"stamp": stamp(db)}
    view: Future[Any] = Future()
    pipe_lock = threading.Lock()

    def collect() -> None:
        from personagap.dashboard import access

        child: subprocess.Popen[bytes] | None = None
        try:
            with access.reading():
                # A fresh interpreter (not a fork: safe whatever threads this process runs), started as `python -c`
                # so that it never re-runs this process's main script.
                with pipe_lock:
                    child = subprocess.Popen([sys.executable, "-c", _CHILD, db, repr(hold)], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE)
                    box["child"] = child
                    if box.get("asked"):  # a page asked before the child started
                        _tell(child)
                assert child.stdout is not None
                while True:
                    try:
                        kind, payload = pickle.load(child.stdout)
                    except EOFError:
                        raise PrefetchError(f"the prefetch process ended (exit code {child.wait()})") from None
                    if kind == "view":
                        view.set_result(payload)
                    elif kind == "diagnosis":
                        box["result"] = payload
                        box["key"] = payload.seed
                        break
                    else:
                        raise PrefetchError(payload)
        except Exception as exc:  # noqa: BLE001 - the page recomputes and shows the error itself
            box["result"] = None
            if not view.done():
                view.set_exception(exc)  # the Overview's cache retries a failed view
        finally:
            done.set()  # before reaping the child: the page must not wait for its interpreter to exit
            if child is not None:
                with pipe_lock:
                    for pipe in (child.stdin, child.stdout):
                        if pipe is not None:
                            pipe.close()  # its stdin closed: a child still running ends
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()

    def ask() -> None:
        with pipe_lock:
            box["asked"] = True
            if "child" in box:
                _tell(box["child"])

    box["ask"] = ask
    with _lock:
        _jobs[db] = (done, box, view)
    threading.Thread(target=collect, name="personagap-prefetch", daemon=True).start()


def _tell(child: subprocess.Popen[bytes]) -> None:
    """Ask ``child`` for the diagnosis now (the caller holds the lock that guards its pipes)."""
    if child.stdin is not None and not child.stdin.closed:
        with contextlib.suppress(OSError):  # it has ended: the collecting thread reports how
            child.stdin.write(_GO)
            child.stdin.flush()


def keep_state(db: str, state: dict[str, int], read: tuple[int, int]) -> None:
    """Keep the store's row counts, read by the server before it opened its port (file stamp ``read``)."""
    with _lock:
        _states[db] = (read, state)


def take_state(db: str) -> dict[str, int] | None:
    """The row counts :func:`keep_state` kept, once; None when there are none or the file changed since."""
    with _lock:
        kept = _states.pop(db, None)
    return None if kept is None or kept[0] != stamp(db) else kept[1]


def view(db: str) -> tuple[tuple[int, int], Future[Any]] | None:
    """The prefetch's pipeline view of ``db`` (pending or done) with the file stamp it read, or None."""
    with _lock:
        job = _jobs.get(db)
    return None if job is None else (job[1]["stamp"], job[2])


def share(db: str, seed: int, read: tuple[int, int], diagnosis: Future[Any]) -> None:
    """Offer a diagnosis computed in this process (pending or done; file stamp ``read``) to :func:`take_shared`.

    The Overview's pipeline worker (:func:`personagap.dashboard.overview.pipeline`) computes the diagnosis from the
    same per-user counts as its pipeline view (:func:`~personagap.analysis.diagnosis_store.diagnose_store`): without
    this, the view's counts were read once for the Overview and again for the diagnosis on the first page that
    asked for it (at 10^7 labels the Stage 2 page paid ~13 s for it under load).
    """
    with _lock:
        _shared[(db, seed)] = (read, diagnosis)


def note_computed(db: str, seed: int, read: tuple[int, int]) -> None:
    """Record that the dashboard's cache holds the diagnosis of ``db`` as of file stamp ``read``."""
    with _lock:
        _computed[(db, seed)] = read


def computed(db: str, seed: int) -> tuple[int, int] | None:
    """The file stamp of the last diagnosis :func:`note_computed` recorded for ``db`` and ``seed``, or None."""
    with _lock:
        return _computed.get((db, seed))


def take_shared(db: str, seed: int, timeout: float = 3600.0) -> Any | None:
    """The diagnosis :func:`share` was offered for ``db`` and ``seed``, once (waiting for it); else None.

    None also when the file changed since it was read, or its computation failed (the caller recomputes and shows
    the error itself).
    """
    with _lock:
        offered = _shared.pop((db, seed), None)
    if offered is None or offered[0] != stamp(db):
        return None
    try:
        return offered[1].result(timeout)
    except Exception:  # noqa: BLE001 - the caller recomputes and reports the error
        return None


def take(db: str, seed: int, timeout: float = 60.0) -> Any | None:
    """Return the prefetched diagnosis once (asking the child for it now, and waiting), or None.

    None also when it was computed with another seed, or the file changed since.
    """
    with _lock:
        job = _jobs.pop(db, None)
    if job is None:
        return None
    done, box, _ = job
    box["ask"]()  # the child computes it now if it still holds it back
    done.wait(timeout)
    if box.get("result") is None or box.get("key") != seed or box["stamp"] != stamp(db):
        return None
    return box["result"]
