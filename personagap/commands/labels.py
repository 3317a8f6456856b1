"""Bring-your-own-data commands: `import labels`, `import parquet`, `export` (issue 14)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from personagap._cli_base import cli, db_option, import_group, run_or_exit
from personagap.stage_names import STAGES

if TYPE_CHECKING:
    from personagap.human_data.labels import Origin, Scale
    from personagap.records import Stage


@import_group.command("labels")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--stage", type=click.Choice(STAGES), required=True,
              help="Which pipeline stage the labels judge (fixes which context columns the files may hold).")
@click.option("--dataset", required=True, help="Dataset key to file the items under (reports group by it).")
@click.option("--scale", type=click.Choice(["nominal", "ordinal"]), default="nominal", show_default=True,
              help="Nominal: categories; ordinal: numbers.")
@click.option("--categories", default=None,
              help="Comma-separated allowed labels, e.g. 'yes,no' or '1,2,3,4,5' [default: the stage's "
                   "(extraction ok,bad,unsure; relevance yes,no); stage 3: whatever the files hold, printed at import, "
                   "and refused when more than 12 or free text]. Enforced on every item kind except pairs (always "
                   "A,B,tie).")
@click.option("--origin", type=click.Choice(["real", "synthetic"]), default="real", show_default=True,
              help="Real users or synthetic personas: reports show the two side by side.")
@click.option("--question", default=None,
              help="What the raters were asked (stored with the dataset; its report section's title) "
                   "[default: the stage's question for the item kind].")
@db_option
def import_labels(files: tuple[str, ...], stage: Stage, dataset: str, scale: Scale, categories: str | None,
                  origin: Origin, question: str | None, db: str) -> None:
    """Import your own labels for any stage: one row per (item, rater), from JSONL, CSV or Parquet.

    Required columns: item_id, rater, label (or, on a judge's row, failure: why it gave no usable label; counted
    in the report's failures). Optional: rater_kind (human|llm|trained|system), user_id, condition, reason,
    confidence, confidence_scale, and the stage's item context (see docs/formats.md). Every file is validated first; any
    problem is one line naming file, line or row, and column, and nothing is written. Re-importing a
    file replaces the rows it held.
    """
    from personagap.labels_api import import_labels as run

    cats = None if categories is None else categories.split(",")
    summary = run_or_exit(lambda: run(list(files), stage=stage, dataset=dataset, db=db, scale=scale,
                                      categories=cats, origin=origin, question=question))
    click.echo(summary.render())


@import_group.command("parquet")
@click.argument("path", type=click.Path(file_okay=False))
@db_option
def import_parquet(path: str, db: str) -> None:
    """Merge an export (`personagap export --out DIR`) into a database, in one transaction.

    Rows with the same key as existing rows replace them; everything else is added. How judge runs
    sharded over several machines are merged.
    """
    from personagap.exchange import import_export

    click.echo(run_or_exit(lambda: import_export(path, db)).render())


@cli.command("export")
@db_option
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Folder to write (must not exist or be empty).")
def export(db: str, out: str) -> None:
    """Write the whole store as Parquet: one folder per table, partitioned by dataset, plus schema.json.

    Query it with DuckDB (read_parquet('DIR/labels/**/*.parquet', hive_partitioning=true)), load it into
    Spark, or merge it into another database with `personagap import parquet DIR`.
    """
    from personagap.exchange import export_store

    click.echo(run_or_exit(lambda: export_store(db, out)).render())
