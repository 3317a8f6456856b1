"""`personagap plan`: how many more human labels a stage needs (issue 13)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Literal

import click

from personagap._cli_base import cli, db_option, run_or_exit
from personagap.stage_names import STAGES

if TYPE_CHECKING:
    from personagap.analysis.budget import Plan



def load_plan(db: str, stage: str, dataset: str | None, *, humans: Literal["blind", "anchored"], halfwidth: float,
              power: float, epsilon: float, simulations: int, seed: int, assurance: float = 0.8) -> Plan:
    """Read one stage's labels from ``db`` (read-only) and compute its label budget.

    Each dataset's categories are its record's (:func:`personagap.datasets.dataset_records`), as in every report.

    Raises:
        StoreError: The database is missing or unreadable, or holds no labels of that stage (or dataset).
    """
    from personagap.analysis.budget import plan_rows
    from personagap.datasets import dataset_records
    from personagap.store import StoreError, load_labels, opened

    with opened(db, read_only=True) as con:
        labels = load_labels(con, stage=stage)
        declared = {name: record.scale.categories for (of, name), record in dataset_records(con).items()
                    if of == stage}
    known = sorted(set(labels["dataset"]))
    if not known:
        raise StoreError(f"{db}: no {stage} labels; import data first (see `personagap import --help`)")
    if dataset is not None and dataset not in known:
        raise StoreError(f"{db}: no {stage} labels for dataset {dataset!r} (it has: {', '.join(known)})")
    return plan_rows(labels, [dataset] if dataset else known, stage=stage, humans=humans, halfwidth=halfwidth,
                     assurance=assurance, power=power, epsilon=epsilon, simulations=simulations, seed=seed,
                     declared=declared)


def _num(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def render_plan(plan: Plan) -> str:
    """Plain-text budget for the terminal."""
    lines = [f"Label budget for stage '{plan.stage}' ({plan.humans} humans; seed {plan.seed}, "
             f"{plan.simulations} simulated studies per size)", "",
             f"Kappa CI half-width <= {plan.target_halfwidth:g} in {plan.assurance:.0%} of studies (users resampled "
             "from the stored ones):"]
    for k in plan.kappa:
        head = f"  {k.dataset} / {k.judge}: kappa {_num(k.kappa)} ± {_num(k.halfwidth)} on {k.n_users} users"
        if k.users_needed is None:
            lines.append(f"{head} -> no budget: {k.reason}")
        else:
            lo, hi = (k.users_needed_range + [None, None])[:2]
            span = f"{lo if lo is not None else '?'}-{hi if hi is not None else 'beyond reach'}"
            lines.append(f"{head}, {k.n_items} items -> {k.users_needed} users (+{k.additional_users}), "
                         f"~{k.items_needed} items (+{k.additional_items}); {_num(k.projected_assurance, 2)} of "
                         f"simulated studies reach ± {k.target_halfwidth:g} (median ± {_num(k.projected_halfwidth)}); "
                         f"range {span} users over {k.range_resamples} resamples of the current users; sized from "
                         f"the between-user variance's upper {plan.assurance:.0%} bound, x{_num(k.variance_margin, 2)}")
    if not plan.kappa:
        lines.append("  (no judge shares items with a human reference)")
    else:
        lines.append(f"  {plan.halfwidth_note}")
    lines += ["", f"Alternative-annotator test, {plan.target_power:.0%} power (items resampled per annotator):"]
    for a in plan.alt_test:
        head = f"  {a.dataset} / {a.judge}"
        if not a.applicable:
            lines.append(f"{head}: not applicable: {a.reason}")
        elif a.items_per_annotator_needed is None:
            lines.append(f"{head}: advantage {_num(a.advantage_probability)}, power now "
                         f"{_num(a.current_power, 2)} -> {a.reason}")
        else:
            lines.append(f"{head}: advantage {_num(a.advantage_probability)} over {a.n_annotators} annotators, "
                         f"power now {_num(a.current_power, 2)} at {a.items_per_annotator} items each -> "
                         f"{a.items_per_annotator_needed} items per annotator (+{a.additional_items_per_annotator}); "
                         f"projected power {_num(a.projected_power, 2)} (epsilon {a.epsilon:g})")
    if not plan.alt_test:
        lines.append("  (no judge labels)")
    return "\n".join(lines)


@cli.command("plan")
@click.option("--stage", type=click.Choice(STAGES), required=True, help="Pipeline stage to plan labels for.")
@click.option("--dataset", default=None, help="Only this dataset [default: every dataset of the stage].")
@click.option("--halfwidth", type=click.FloatRange(min=0, min_open=True, max=1), default=0.05, show_default=True,
              help="Target half-width of the judge-human kappa's 95% CI.")
@click.option("--assurance", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.8,
              show_default=True, help="Share of studies of the planned size whose kappa CI reaches --halfwidth.")
@click.option("--power", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.8,
              show_default=True, help="Target power of the alternative-annotator test.")
@click.option("--epsilon", type=click.FloatRange(min=0, max=1), default=0.2, show_default=True,
              help="The alternative-annotator test's cost-benefit margin.")
@click.option("--humans", type=click.Choice(["blind", "anchored"]), default="blind", show_default=True,
              help="Plan against blind humans (the reference) or anchored ones (saw an LLM's label first).")
@click.option("--simulations", type=click.IntRange(min=10), default=100, show_default=True,
              help="Simulated studies per candidate size.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every simulation.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@db_option
def plan(stage: str, dataset: str | None, halfwidth: float, assurance: float, power: float, epsilon: float,
         humans: Literal["blind", "anchored"], simulations: int, seed: int, as_json: bool, db: str) -> None:
    """How many more human-labelled users/items a stage needs, by simulation from the stored labels.

    Per judge: the users (and items) for the kappa CI to reach --halfwidth in --assurance of studies (with a range
    from resampling the current users), and the items per annotator for the
    alternative-annotator test to pass with --power at the judge's current advantage. Seeded: a rerun gives the
    same budget.
    """
    from personagap.analysis.agreement import json_safe_dict

    result = run_or_exit(lambda: load_plan(db, stage, dataset, humans=humans, halfwidth=halfwidth, power=power,
                                           epsilon=epsilon, simulations=simulations, seed=seed,
                                           assurance=assurance))
    click.echo(json.dumps(json_safe_dict(result.model_dump()), indent=2) if as_json else render_plan(result))
