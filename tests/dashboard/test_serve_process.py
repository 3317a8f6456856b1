"""`personagap dashboard` as a real process: SIGTERM stops its Streamlit child too; a busy port is one clear line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.browser_helpers import free_port, wait_healthy
from tests.support.processes import alive as _alive
from tests.support.processes import children as _children

CLI = [str(Path(sys.executable).parent / "personagap")]


@pytest.mark.slow
def test_sigterm_stops_the_streamlit_child_and_frees_the_port(tmp_path: Path) -> None:
    port = free_port()
    # Own session so that the test can clean up whatever is left; the signal under test goes to the CLI's pid only.
    proc = subprocess.Popen([*CLI, "dashboard", "--db", str(tmp_path / "none.duckdb"), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        children = _children(proc.pid)
        assert children, "the CLI serves through a child process"
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        deadline = time.monotonic() + 5
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [c for c in children if _alive(c)]
        assert not left, f"processes left behind after SIGTERM: {left}"
        assert code == 0
        out, err = proc.communicate(timeout=10)
        assert "dashboard on http" in out.decode()
        # Decorating the pages' cached functions before the runtime exists once logged 19 such lines per start.
        assert "No runtime found" not in out.decode() + err.decode()
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "the port is still served"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def test_busy_port_is_one_line_before_any_banner(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        start = time.monotonic()
        out = subprocess.run([*CLI, "dashboard", "--db", str(tmp_path / "x.duckdb"), "--port", str(port)],
                             capture_output=True, text=True, timeout=60)
        took = time.monotonic() - start
    assert out.returncode == 2
    assert "dashboard on http" not in out.stdout  # no banner promising a dashboard that never came
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "in use" in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert took < 30
