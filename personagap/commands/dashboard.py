"""Dashboard and diagnosis commands: `personagap dashboard`, `personagap diagnose`, and the demo's last step."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from personagap._cli_base import cli, db_option, demo_step, run_or_exit, weight_option
from personagap.analysis.agreement import DEFAULT_SEED, json_safe

if TYPE_CHECKING:
    # For the annotation only: the CLI loads the analysis modules when a command runs (as the reports do).
    from personagap.analysis.weighting import Weight

DB_ENV = "PERSONAGAP_DB"
JUDGES_TITLE = "Can your judges tell you? (judge–human agreement per stage)"


def streamlit_command(db: str | Path, *, host: str = "127.0.0.1", port: int = 8501) -> list[str]:
    """Return the command line that serves the dashboard on ``host:port`` (without starting it).

    It runs ``streamlit run dashboard/app.py`` through :mod:`personagap.dashboard.serve`, which starts
    the diagnosis while the server boots.

    Args:
        db: The DuckDB file the dashboard reads (read-only).
        host: Address to bind; loopback unless the user asks otherwise.
        port: TCP port.
    """
    return [
        sys.executable, "-m", "personagap.dashboard.serve",
        "--server.address", host, "--server.port", str(port), "--server.headless", "true",
        "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
        "--global.developmentMode", "false", "--client.toolbarMode", "viewer",
    ]


def dashboard_env(db: str | Path) -> dict[str, str]:
    """Environment for the Streamlit process: the database path travels in ``PERSONAGAP_DB``."""
    return {**os.environ, DB_ENV: str(Path(db).resolve())}


def port_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served (in use, no such address), or None when a server can bind it.

    Checked before the banner so that a busy port is one clear line, not a Streamlit traceback after a
    banner that promised a dashboard.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"cannot bind {host}:{port}: {exc.strerror}"
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # Streamlit's server (tornado) sets SO_REUSEADDR too: a port left in TIME_WAIT is free for it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use; stop what serves it or pass --port N"
            return f"cannot bind {host}:{port}: {exc.strerror}"
    return None


def serve(command: list[str], env: dict[str, str]) -> int:
    """Run the Streamlit server as a child; forward SIGTERM/SIGHUP/SIGINT to it and wait for it to exit.

    Without forwarding, a SIGTERM to this process would leave the child serving the port, re-parented to
    init. Ctrl+C in a terminal reaches both processes already (same process group); forwarding it again is
    harmless.

    Returns:
        The child's exit code (0 when it stopped on a forwarded signal).
    """
    child = subprocess.Popen(command, env=env)
    forwarded: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        forwarded.append(signum)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        while True:
            try:
                code = child.wait(timeout=15 if forwarded else None)
                break
            except subprocess.TimeoutExpired:
                child.kill()  # asked to stop 15 s ago and still running: do not leave it behind
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if forwarded else code


@cli.command()
@db_option
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True, help="TCP port to serve on.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Loopback by default; pass e.g. 0.0.0.0 to expose the dashboard on your network.")
def dashboard(db: str, port: int, host: str) -> None:
    """Open the Streamlit dashboard on a database (read-only, except labels people add on its Annotate page).

    SIGTERM, SIGHUP and Ctrl+C stop the server and this command together.
    """
    problem = port_problem(host, port)
    if problem is not None:
        click.echo(f"error: {problem}", err=True)
        sys.exit(2)
    if not Path(db).exists():
        click.echo(f"note: {db} does not exist yet; the dashboard will show how to import data.", err=True)
    click.echo(f"PersonaGap dashboard on http://{host}:{port}  (database {db}; Ctrl+C stops it)")
    sys.exit(serve(streamlit_command(db, host=host, port=port), dashboard_env(db)))


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True,
              help="Seed of the two halves of users the best judge is chosen and measured on (cross-fitting); "
                   "the CIs themselves draw nothing at random.")
@weight_option
def diagnose(db: str, as_json: bool, seed: int, weight: Weight) -> None:
    """Which stage of your pipeline fails by human verdict, then whether your judges can tell you.

    First, per stage and system, the share of outputs humans judge failed (rejected attributes, irrelevant
    selections, personalised answers no better than generic), what each judge says (naive and corrected), which
    stage fails most, the part caused upstream and the over-personalised answers. Then, per stage and dataset:
    that dataset's best and worst judge against humans (with 95% CIs), the prevalence-robust panel, its own human
    ceiling and the best judge's gap to it, every figure the scale's headline (weighted kappa on ordinal scales,
    kappa otherwise; datasets are never ranked against each other); then, for each stage's best judge, the
    alternative-annotator test (can it replace a human?) and the corrected estimate of the human rate. The
    dashboard's Overview shows the same diagnosis (weighting items). With --weight users the judges' scores, the
    human ceilings and the gaps count each user once; the pipeline view, the alternative-annotator test and the
    corrected estimates pool items either way (the text's header says so; the last two's JSON rows say "items").
    """
    from personagap.analysis.diagnosis_store import diagnose_store

    # From DuckDB's aggregates, counted once for the pipeline view and the diagnosis: memory does not grow with
    # the number of labels.
    done = run_or_exit(lambda: diagnose_store(db, view=True, extras=True, seed=seed, weight=weight))
    result, tests, view = done.diagnosis, done.extras, done.view
    assert view is not None
    if as_json:
        click.echo(json.dumps(result.to_json_dict() | {"best_judge_vs_humans": json_safe(tests)}
                              | view.to_json_dict(), indent=2))
        return
    from personagap.analysis.diagnosis import STAGES, render_diagnosis
    from personagap.analysis.panel import extras_lines
    from personagap.analysis.pipeline_text import render_pipeline

    lines = [render_pipeline(view), "", JUDGES_TITLE, "", render_diagnosis(result)]
    for stage, extras in tests.items():
        body = extras_lines(extras["alt_test"], extras["estimates"])
        if body:
            lines += ["", f"Can stage {STAGES.index(stage) + 1}'s best judge replace the humans?"] + body[1:]
    click.echo("\n".join(lines))


@demo_step("Pipeline — which stage fails, by human verdict")
def demo_pipeline(workdir: Path, db: Path) -> str:
    """The pipeline view of the demo's sample data: failure shares with CIs, judges beside them, the cascade.

    The sample pipeline (three linked stages with human verdicts on every stage, planted failure rates and
    over-personalised answers) is imported first, so that every stage has a human figure to show.
    """
    from personagap.analysis.pipeline import pipeline_db
    from personagap.analysis.pipeline_text import render_pipeline
    from personagap.sample_pipeline import import_sample_pipeline

    import_sample_pipeline(workdir / "sample_pipeline", db)
    return render_pipeline(pipeline_db(db))


@demo_step("Diagnosis — which stage fails")
def demo_diagnosis(workdir: Path, db: Path) -> str:
    """End the demo with the diagnosis and the command that opens the dashboard on its database."""
    from personagap.analysis.diagnosis import render_diagnosis
    from personagap.analysis.diagnosis_store import diagnose_store

    text = render_diagnosis(diagnose_store(db).diagnosis)
    return text + f"\n\nOpen the dashboard on it:\n  personagap dashboard --db {db}"
