"""`personagap jury`: store a jury of several judges as a rater of its own (issue 23 item 5).

The vote is :func:`personagap.judges.jury.build_jury`'s; this command only resolves the judges' display names (as
reports print them) to their stored (rater, condition) and names the jury.
"""

from __future__ import annotations

import click

from personagap._cli_base import EXIT_RUN_FAILED, cli, db_option, fail
from personagap.stage_names import STAGES

JURY_CHOICES = ("majority", "confidence")
"""``--weighting`` choices: :data:`personagap.judges.jury.JURY_RULES`, spelled here so that ``--help`` does not import
the judges (DSPy); tests/core/test_confidence_cli_options.py checks the two are equal."""


def jury_rater(rule: str, judges: list[str]) -> str:
    """The jury's rater key: its rule and its jurors' display names, so two different juries never share one."""
    return f"jury-{rule}({' + '.join(judges)})"


def resolve_jurors(db: str, stage: str, dataset: str, judges: list[str]) -> list[tuple[str, str]]:
    """(rater, condition) of each judge display name on ``dataset``.

    Raises:
        ValueError: A name no judge of the dataset carries (the message lists the judges there).
    """
    from personagap.store import opened
    from personagap.store.routing import judges_with_labels

    with opened(db, read_only=True) as con:
        found = judges_with_labels(con, stage, dataset)
    by_name = {str(j): (str(r), str(c)) for j, r, c in zip(found["judge"], found["rater"], found["condition"],
                                                            strict=True)}
    missing = [j for j in judges if j not in by_name]
    if missing:
        raise ValueError(f"no judge {', '.join(map(repr, missing))} on {stage} dataset {dataset!r} "
                         f"(judges: {', '.join(by_name) or 'none'})")
    return [by_name[j] for j in judges]


@cli.command("jury")
@click.option("--stage", type=click.Choice(STAGES), required=True, help="Pipeline stage.")
@click.option("--dataset", required=True, help="Dataset whose judges are named in --judges.")
@click.option("--judges", required=True,
              help="Comma-separated judges, by the names reports print (rater, plus [condition]); at least two.")
@click.option("--weighting", type=click.Choice(JURY_CHOICES), default="majority", show_default=True,
              help="majority: the unique most frequent label (a tie is undecided); confidence: each judge's label "
                   "weighted by its stated confidence as a probability (judges without one make the item "
                   "undecided).")
@click.option("--name", default=None, help="The jury's rater name [default: jury-RULE(J1 + J2 + ...)].")
@db_option
def jury_command(stage: str, dataset: str, judges: str, weighting: str, name: str | None, db: str) -> None:
    """Store a jury of several judges as a judge of its own, scored by every report like any judge.

    Each item the jurors labelled gets the jury's vote; an undecided item is stored as a failure with its reason,
    never a guess. Rerunning replaces the jury's labels. A run that decided no item is stored 'failed' and exits 1;
    --weighting confidence refuses (exit 2) a judge that states no confidence.
    """
    from personagap.judges.jury import JURY_RULES, build_jury

    names = [j.strip() for j in judges.split(",") if j.strip()]
    if len(set(names)) < 2:
        fail("error: --judges needs at least two different judges, comma-separated")
    try:
        jurors = resolve_jurors(db, stage, dataset, names)
        rule = next(r for r in JURY_RULES if r == weighting)  # the typed rule click's choice names
        result = build_jury(db, jurors, rule, rater=name or jury_rater(weighting, names))
    except ValueError as exc:  # unknown judge, jurors of different kinds, no confidence to weigh: one line
        fail(f"error: {exc}")
    click.echo(result.render())
    if result.status == "failed":  # stored 'failed': a script must never take an empty jury for a finished one
        fail(f"error: {result.failure_line()}", EXIT_RUN_FAILED)
