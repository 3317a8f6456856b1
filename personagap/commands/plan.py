"""`personagap plan`: how many more human labels a stage needs (issue 13)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

import click

from personagap._cli_base import cli, db_option, run_or_exit
from personagap.stage_names import STAGES
from personagap.vocabulary import HUMAN_SETS, HumanSet

if TYPE_CHECKING:
    from personagap.analysis.budget import Plan



def load_plan(db: str, stage: str, dataset: str | None, *, humans: HumanSet, halfwidth: float,
              power: float, epsilon: float, simulations: int, seed: int, assurance: float = 0.8) -> Plan:
    """Read one stage's counts from ``db`` (read-only) and compute its label budget.

    What the reports read, never every label: per-(dataset, judge, condition, user) counts against the ``humans``
    reference (:func:`personagap.store.aggregates.label_counts`) and the labels of items several humans labelled
    (:func:`personagap.store.aggregates.multi_human_labels`); each dataset's scale is its record's
    (:func:`personagap.datasets.dataset_records`), as in every report.

    Raises:
        StoreError: The database is missing or unreadable, or holds no labels of that stage (or dataset).
    """
    from personagap.analysis.alt_test import MIN_HUMANS_PER_ITEM
    from personagap.analysis.budget import plan_from_counts
    from personagap.datasets import dataset_records
    from personagap.store import StoreError, opened
    from personagap.store.aggregates import has_labels, item_humans_table, label_counts, multi_human_labels

    with opened(db, read_only=True) as con:
        scales = {name: record.scale for (of, name), record in dataset_records(con).items() if of == stage}
        known = sorted(ds for ds in scales if has_labels(con, stage, ds))
        if not known:
            raise StoreError(f"{db}: no {stage} labels; import data first (see `personagap import --help`)")
        if dataset is not None and dataset not in known:
            raise StoreError(f"{db}: no {stage} labels for dataset {dataset!r} (it has: {', '.join(known)})")
        chosen = [dataset] if dataset else known
        judges, _ = label_counts(con, stage, humans, dataset)
        with item_humans_table(con) as held:
            alt = {ds: multi_human_labels(con, stage, ds, min_humans=MIN_HUMANS_PER_ITEM, item_humans=held,
                                          judges=judges[judges["dataset"] == ds]) for ds in chosen}
    return plan_from_counts(lambda ds: judges[judges["dataset"] == ds], alt.__getitem__, chosen, scales=scales,
                            stage=stage, humans=humans, halfwidth=halfwidth, assurance=assurance, power=power,
                            epsilon=epsilon, simulations=simulations, seed=seed)


_NAMES = {"kappa": "kappa", "weighted_kappa": "weighted kappa"}


def _num(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def render_plan(plan: Plan) -> str:
    """Plain-text budget for the terminal."""
    lines = [f"Label budget for stage '{plan.stage}' ({plan.humans} humans; seed {plan.seed}, "
             f"{plan.simulations} simulated studies per size)", "",
             f"Headline agreement (weighted kappa on ordinal scales, else kappa): CI half-width <= "
             f"{plan.target_halfwidth:g} in {plan.assurance:.0%} of studies (users resampled from the stored ones, "
             "each study with a plausible between-user variance):"]
    for k in plan.kappa:
        head = (f"  {k.dataset} / {k.judge}: {_NAMES.get(k.metric, k.metric)} {_num(k.kappa)} ± {_num(k.halfwidth)} "
                f"on {k.n_users} users")
        if k.users_needed is None:
            lines.append(f"{head} -> no budget: {k.reason}")
        else:
            lo, hi = (k.users_needed_range + [None, None])[:2]
            factors = (k.variance_factors or [math.nan] * 3) + [math.nan] * 3
            span = f"{lo if lo is not None else '?'}-{hi if hi is not None else 'beyond reach'}"
            lines.append(f"{head}, {k.n_items} items -> {k.users_needed} users (+{k.additional_users}), "
                         f"~{k.items_needed} items (+{k.additional_items}); {_num(k.projected_assurance, 2)} of "
                         f"simulated studies reach ± {k.target_halfwidth:g} (median ± {_num(k.projected_halfwidth)}); "
                         f"range {span} users for a between-user variance "
                         f"x{_num(factors[0], 2)}-x{_num(factors[2], 2)} the stored one (10th-90th percentile of "
                         f"its plausible values: {_num(k.variance_df, 1)} degrees of freedom)")
    if not plan.kappa:
        lines.append("  (no judge shares items with a human reference)")
    else:
        lines.append(f"  {plan.halfwidth_note}")
    lines += ["", f"Alternative-annotator test, {plan.target_power:.0%} power (each annotator's users resampled; "
                  "scored as the report scores it: negative RMSE on ordinal scales, else accuracy):"]
    for a in plan.alt_test:
        head = f"  {a.dataset} / {a.judge}"
        if not a.applicable:
            lines.append(f"{head}: not applicable: {a.reason}")
        elif a.items_per_annotator_needed is None:
            lines.append(f"{head}: advantage {_num(a.advantage_probability)}, winning rate "
                         f"{_num(a.winning_rate, 2)}, power now {_num(a.current_power, 2)} -> {a.reason}")
        else:
            lines.append(f"{head}: advantage {_num(a.advantage_probability)}, winning rate "
                         f"{_num(a.winning_rate, 2)} ({a.scoring}) over {a.n_annotators} annotators, "
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
              help="Target half-width of the 95% CI of the judge-human headline figure (weighted kappa on "
                   "ordinal scales, else kappa).")
@click.option("--assurance", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.8,
              show_default=True, help="Chance that a study of the planned size reaches --halfwidth (over studies "
                                      "and over the between-user variance the stored users leave possible).")
@click.option("--power", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.8,
              show_default=True, help="Target power of the alternative-annotator test.")
@click.option("--epsilon", type=click.FloatRange(min=0, max=1), default=0.2, show_default=True,
              help="The alternative-annotator test's cost-benefit margin.")
@click.option("--humans", type=click.Choice(HUMAN_SETS), default="blind", show_default=True,
              help="Plan against blind humans (the reference) or anchored ones (saw an LLM's label first).")
@click.option("--simulations", type=click.IntRange(min=10), default=100, show_default=True,
              help="Simulated studies per candidate size.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of every simulation.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@db_option
def plan(stage: str, dataset: str | None, halfwidth: float, assurance: float, power: float, epsilon: float,
         humans: HumanSet, simulations: int, seed: int, as_json: bool, db: str) -> None:
    r"""How many more human-labelled users/items a stage needs, by simulation from the stored counts.

    \b
    Per judge and dataset, on the dataset's scale as `report` computes it:
    - the users (and items) for the CI of the headline figure (weighted kappa
      on ordinal scales, kappa on nominal and pairwise ones) to reach
      --halfwidth with a chance of --assurance. Studies are drawn from the
      stored users; because those are a sample (and usually vary less than
      the population when a few users are heavy or unlike the rest), each
      study also gets a plausible between-user variance: the stored one
      times df / chi2_df, df the CI rule's (Satterthwaite) degrees of
      freedom, few when a few users carry the variance. The range is the
      budget at that variance's 10th and 90th percentiles.
    - the items per annotator for the alternative-annotator test to pass with
      --power at the judge's current advantage; the advantage and winning rate
      are the report's (negative RMSE on ordinal scales, accuracy otherwise).

    Reads the per-user counts the reports read, never every label. Seeded: a
    rerun gives the same budget. Exit code 2 with one line when the store or
    the stage/dataset has no labels.
    """
    from personagap.analysis.agreement import json_safe_dict

    result = run_or_exit(lambda: load_plan(db, stage, dataset, humans=humans, halfwidth=halfwidth, power=power,
                                           epsilon=epsilon, simulations=simulations, seed=seed,
                                           assurance=assurance))
    click.echo(json.dumps(json_safe_dict(result.model_dump()), indent=2) if as_json else render_plan(result))
