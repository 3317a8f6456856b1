"""Is the process behind a 'running' judge run still alive?

A judge run writes its row with status 'running' first and its final status last. A run killed in between
(SIGKILL, a crash, a closed terminal) cannot write its final status, so its row would stay 'running' forever.
Each run therefore records which process runs it (pid, host and the process's start time, so a recycled pid
is not mistaken for the run). The next run on the database marks the rows of dead processes 'interrupted'
(:func:`mark_interrupted_runs`); read-only readers can show the same with :func:`effective_status`.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import duckdb

from personagap.store import running_runs, set_run_status

PROCESS_KEY = "process"
"""Key of the process marker in a run's ``parameters``."""


def process_marker() -> dict[str, Any]:
    """Who runs this run: pid, host name and the process's start time (clock ticks since boot, Linux only)."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "start": _start_ticks(pid)}


def process_alive(marker: object) -> bool | None:
    """Whether the process a marker names still runs.

    Args:
        marker: A run's ``parameters["process"]`` (see :func:`process_marker`).

    Returns:
        True or False; None when it cannot be told (no marker, or the run is on another host).
    """
    if not isinstance(marker, dict) or not isinstance(marker.get("pid"), int):
        return None
    if marker.get("host") != socket.gethostname():
        return None
    pid = marker["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    state = _proc_stat(pid)
    if state is None:
        return True  # no /proc to ask: the pid exists, assume it is the run
    status, start = state
    if status in ("Z", "X"):  # a zombie has finished; only its parent has not reaped it yet
        return False
    recorded = marker.get("start")
    return not (recorded is not None and start is not None and start != recorded)  # a recycled pid is not the run


def effective_status(status: str, parameters: object) -> str:
    """A run's status as a reader should show it: 'running' becomes 'interrupted' once its process is gone.

    Args:
        status: The stored status.
        parameters: The run's parameters (a dict, or its JSON text as read from DuckDB).
    """
    if status != "running":
        return status
    params = _params(parameters)
    return "interrupted" if process_alive(params.get(PROCESS_KEY)) is False else status


def mark_interrupted_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Mark every 'running' run whose process has died as 'interrupted' (within the caller's connection).

    Runs without a process marker (written before markers existed) or from another host are left alone:
    whether they still run cannot be told.

    Returns:
        The run ids marked.
    """
    dead = [run_id for run_id, params in running_runs(con) if effective_status("running", params) == "interrupted"]
    set_run_status(con, dead, "interrupted")
    return dead


def _params(parameters: object) -> dict[str, Any]:
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters)
        except ValueError:
            return {}
    return parameters if isinstance(parameters, dict) else {}


def _start_ticks(pid: int) -> int | None:
    state = _proc_stat(pid)
    return None if state is None else state[1]


def _proc_stat(pid: int) -> tuple[str, int | None] | None:
    """(state letter, start time in clock ticks since boot) from /proc, or None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields after the last ')' are fixed.
    fields = text[text.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return (fields[0], None) if fields else None
