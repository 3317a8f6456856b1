"""One gate for the dashboard process's own opens of the database file.

DuckDB refuses, inside one process, a read-write connection to a file while a read-only one is open
(and the reverse). The dashboard reads read-only from many Streamlit sessions (threads) at once and
writes only the Annotate page's labels, so reads share the gate and a label write waits until no read
of this process is open (and blocks new reads while it writes, for one short transaction).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_cond = threading.Condition()
_readers = 0
_writing = False


@contextlib.contextmanager
def reading() -> Iterator[None]:
    """Hold the gate shared for one batch of read-only queries."""
    global _readers
    with _cond:
        _cond.wait_for(lambda: not _writing)
        _readers += 1
    try:
        yield
    finally:
        with _cond:
            _readers -= 1
            _cond.notify_all()


@contextlib.contextmanager
def writing(timeout: float) -> Iterator[bool]:
    """Hold the gate exclusively for one write; yields False (and holds nothing) when reads outlast ``timeout``."""
    global _writing
    with _cond:
        got = _cond.wait_for(lambda: not _writing and _readers == 0, timeout=timeout)
        if got:
            _writing = True
    try:
        yield got
    finally:
        if got:
            with _cond:
                _writing = False
                _cond.notify_all()
