"""Dashboard and diagnosis commands: `personagap dashboard`, `personagap diagnose`, and the demo's last step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from personagap._cli_base import cli, db_option, demo_step, run_or_exit
from personagap.analysis.agreement import DEFAULT_RESAMPLES, DEFAULT_SEED
from personagap.analysis.diagnosis import diagnose_db, render_diagnosis

DB_ENV = "PERSONAGAP_DB"


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
        "--global.developmentMode", "false",
    ]


def dashboard_env(db: str | Path) -> dict[str, str]:
    """Environment for the Streamlit process: the database path travels in ``PERSONAGAP_DB``."""
    return {**os.environ, DB_ENV: str(Path(db).resolve())}


@cli.command()
@db_option
@click.option("--port", type=click.IntRange(1, 65535), default=8501, show_default=True, help="TCP port to serve on.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Loopback by default; pass e.g. 0.0.0.0 to expose the dashboard on your network.")
def dashboard(db: str, port: int, host: str) -> None:
    """Open the Streamlit dashboard on a database (read-only; never calls an LLM)."""
    if not Path(db).exists():
        click.echo(f"note: {db} does not exist yet; the dashboard will show how to import data.", err=True)
    click.echo(f"PersonaGap dashboard on http://{host}:{port}  (database {db}; Ctrl+C stops it)")
    try:
        code = subprocess.call(streamlit_command(db, host=host, port=port), env=dashboard_env(db))
    except KeyboardInterrupt:
        code = 0
    sys.exit(code)


@cli.command()
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--resamples", type=click.IntRange(min=10), default=DEFAULT_RESAMPLES, show_default=True,
              help="Bootstrap resamples (whole users) for every 95% CI.")
@click.option("--seed", type=int, default=DEFAULT_SEED, show_default=True, help="Bootstrap seed.")
def diagnose(db: str, as_json: bool, resamples: int, seed: int) -> None:
    """Name the stage whose automated evaluation is furthest from humans.

    Per stage: the best and worst judge against humans (with 95% CIs) and the human ceiling. The dashboard's
    Overview shows the same diagnosis.
    """
    result = run_or_exit(lambda: diagnose_db(db, n_resamples=resamples, seed=seed))
    click.echo(json.dumps(result.to_json_dict(), indent=2) if as_json else render_diagnosis(result))


@demo_step("Diagnosis — which stage fails")
def demo_diagnosis(workdir: Path, db: Path) -> str:
    """End the demo with the diagnosis and the command that opens the dashboard on its database."""
    return render_diagnosis(diagnose_db(db)) + f"\n\nOpen the dashboard on it:\n  personagap dashboard --db {db}"
