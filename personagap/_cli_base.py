"""The CLI's command groups and shared options; stage modules in :mod:`personagap.commands` add commands."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import click

from personagap import __version__
from personagap.human_data import DataError
from personagap.store import DEFAULT_DB, StoreError

T = TypeVar("T")

db_option = click.option("--db", type=click.Path(dir_okay=False), default=DEFAULT_DB, show_default=True,
                         help="DuckDB file to read/write (created on first import).")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="personagap")
def cli() -> None:
    """PersonaGap: which stage of your LLM personalization pipeline fails, and do your LLM judges agree
    with real humans?

    \b
    Typical session:
      personagap demo                                        # everything offline on built-in sample data
      personagap import recenter ../shared/data/recenter     # human + LLM labels into personagap.duckdb
      personagap report relevance                            # stage 2: judges vs humans, with 95% CIs
      personagap judge relevance --model openai/gpt-4o-mini  # add your own LLM as a judge
    """


@cli.group(name="import")
def import_group() -> None:
    """Import a public human-label release into the DuckDB store (one transaction per import)."""


@cli.group(name="report")
def report_group() -> None:
    """Print a stage's comparison of judges with humans (with 95% CIs)."""


@cli.group(name="judge")
def judge_group() -> None:
    """Run an LLM (any OpenAI-compatible or LiteLLM provider) as a judge on imported items."""


@dataclass(frozen=True)
class DemoStep:
    """One stage's part of `personagap demo`: writes sample data, imports it into ``db``, returns a report."""

    title: str
    run: Callable[[Path, Path], str]
    """(work folder, database) -> text to print. Must be offline and need no API key."""


DEMO_STEPS: list[DemoStep] = []


def demo_step(title: str) -> Callable[[Callable[[Path, Path], str]], Callable[[Path, Path], str]]:
    """Register a function as a `personagap demo` step (steps run in registration order)."""
    def add(fn: Callable[[Path, Path], str]) -> Callable[[Path, Path], str]:
        DEMO_STEPS.append(DemoStep(title, fn))
        return fn
    return add


def run_or_exit(action: Callable[[], T]) -> T:
    """Run ``action``; print data and store errors as one clear line and exit 2 instead of a traceback."""
    try:
        return action()
    except (DataError, StoreError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
