"""`personagap route`: let a judge decide where it is confident and queue the rest for people (issue 23).

The threshold is :func:`personagap.analysis.coverage.choose_threshold`'s (chosen on half of the users, reported on
the other half); the combined estimate is :mod:`personagap.analysis.routing`'s; the decision is stored in the
``runs`` table (:mod:`personagap.store.routing`) and the dashboard's Annotate page serves exactly the routed items.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from personagap._cli_base import cli, db_option, fail
from personagap.stage_names import STAGES

if TYPE_CHECKING:
    from personagap.analysis.coverage import ThresholdChoice
    from personagap.analysis.routing import RoutingEstimate



class RouteError(ValueError):
    """A route request the data cannot answer (unknown judge, no confidences, no such category): one line."""


@dataclass(frozen=True)
class RouteResult:
    """What ``personagap route`` decided and estimated."""

    stage: str
    dataset: str
    judge: str
    confidence_scale: str
    choice: ThresholdChoice
    estimate: RoutingEstimate
    run_id: str

    def to_json(self) -> dict[str, Any]:
        """The decision, the held-out check and the three estimates."""
        from personagap.analysis.agreement import json_safe_dict

        return json_safe_dict({"stage": self.stage, "dataset": self.dataset, "judge": self.judge,
                               "confidence_scale": self.confidence_scale, "threshold": self.choice.to_json(),
                               "estimate": self.estimate.to_json(), "run_id": self.run_id})


def route(db: str, stage: str, dataset: str, judge: str, *, target_accuracy: float | None = None,
          target_kappa: float | None = None, positive: str | None = None, level: float = 0.95) -> RouteResult:
    """Choose the judge's confidence threshold, route the rest of the items to people, estimate the stage's rate.

    Args:
        db: The store (written: the routing decision replaces the last one of this stage and dataset).
        stage: Pipeline stage.
        dataset: Dataset of that stage.
        judge: The judge's display name (as reports print it: rater, plus ``[condition]``).
        target_accuracy: The accuracy the kept labels must reach on the choosing users...
        target_kappa: ...or the kappa (exactly one of the two).
        positive: The category whose rate is estimated [default: ``yes`` on a yes/no scale].
        level: Confidence level of every interval.

    Raises:
        RouteError: No such dataset or judge, no confidence, no target or two, a category off the scale.
    """
    from personagap.analysis.confidence_report import target_for
    from personagap.analysis.coverage import choose_threshold
    from personagap.analysis.routing import kept_mask, routing_estimate
    from personagap.datasets import dataset_record
    from personagap.store import opened
    from personagap.store.confidence import confidence_counts
    from personagap.store.routing import judges_with_labels, route_items, save_route

    if target_accuracy is None and target_kappa is None:
        raise RouteError("give --target-accuracy or --target-kappa")
    target = target_for(dataset, target_accuracy=target_accuracy, target_kappa=target_kappa, ceilings={})
    if target is None:  # unreachable: a given target needs no ceiling; kept for the type checker
        raise RouteError("give --target-accuracy or --target-kappa")
    with opened(db, read_only=True) as con:
        record = dataset_record(con, stage, dataset)
        if record is None:
            raise RouteError(f"{db}: no {stage} dataset {dataset!r}")
        judges = judges_with_labels(con, stage, dataset)
        found = judges[judges["judge"] == judge]
        if found.empty:
            raise RouteError(f"no judge {judge!r} on {dataset} (judges: {', '.join(judges['judge']) or 'none'})")
        rater, condition = str(found["rater"].iloc[0]), str(found["condition"].iloc[0])
        counts = confidence_counts(con, stage, dataset)
        items = route_items(con, stage, dataset, rater, condition)
    mine = counts[(counts["rater"] == rater) & (counts["condition"] == condition)]
    if mine.empty:
        raise RouteError(f"judge {judge!r} states no confidence on items people labelled in {dataset}: nothing to "
                         "choose a threshold from (judge again with --confidence verbal|logprobs)")
    scales = sorted(set(mine["confidence_scale"].astype(str)))
    if len(scales) > 1:
        raise RouteError(f"judge {judge!r} states confidences on several scales ({', '.join(scales)}): not comparable")
    categories = list(record.scale.categories)
    chosen = positive if positive is not None else ("yes" if "yes" in categories else None)
    if chosen is None or chosen not in categories:
        raise RouteError(f"give --positive, one of {', '.join(categories)}: the category whose rate is estimated"
                         if chosen is None else f"--positive {chosen!r} is not one of {', '.join(categories)}")
    choice = choose_threshold(mine, record.scale, target, level=level)
    estimate = routing_estimate(items, choice.min_confidence, chosen, level=level)
    routed = items.loc[~kept_mask(items, choice.min_confidence), "item_id"].astype(str).tolist()
    with opened(db) as con:
        run_id = save_route(con, stage, dataset, judge, {
            "rater": rater, "condition": condition, "target": target.to_json(), "threshold": choice.min_confidence,
            "confidence_scale": scales[0], "positive": chosen}, routed)
    return RouteResult(stage, dataset, judge, scales[0], choice, estimate, run_id)


def render_route(result: RouteResult) -> str:
    """The route as the terminal prints it: the threshold and its held-out check, the counts, the three rates."""
    from personagap.analysis.agreement import ci_text
    from personagap.text import number

    choice, est = result.choice, result.estimate
    target = choice.target
    lines = [f"Routing {result.stage} / {result.dataset} by {result.judge} (target: {target.metric} >= "
             f"{target.value:g} on the kept labels)"]
    if choice.min_confidence is None:
        lines.append(f"No confidence threshold reaches the target on the {len(choice.chosen_users)} choosing users: "
                     "every item goes to people.")
    else:
        lines.append(f"Kept where confidence >= {choice.min_confidence:g} ({result.confidence_scale}), chosen on "
                     f"{len(choice.chosen_users)} users.")
        held = choice.held_out
        if held is None:
            lines.append("  No held-out user has a label at that confidence: the target is unchecked.")
        else:
            figure = getattr(held, target.metric)
            lines.append(f"  On the {len(choice.held_out_users)} held-out users: {target.metric} "
                         f"{number(figure.value, 2)} {ci_text(figure)}, coverage {number(held.coverage, 2)}.")
    lines.append(f"Items: {est.items:,}; kept by the judge {est.kept:,}; routed to people {est.routed:,} "
                 f"({est.routed_labelled:,} labelled; human labels still needed: {est.still_needed:,}).")
    kind = "" if est.exact else "  (corrected: people labelled only part of the routed items)"
    lines += [f"Rate of {est.positive!r}:",
              f"  routed (judge + people) {number(est.combined.value)} {ci_text(est.combined)}{kind}",
              f"  all human               {number(est.all_human.value)} {ci_text(est.all_human)}",
              f"  all judge               {number(est.all_judge.value)} {ci_text(est.all_judge)}",
              "The routed items are queued on the dashboard's Annotate page (order: routed to people)."]
    return "\n".join(lines)


@cli.command("route")
@click.option("--stage", type=click.Choice(STAGES), required=True, help="Pipeline stage.")
@click.option("--dataset", required=True, help="Dataset of that stage.")
@click.option("--judge", required=True, help="The judge, by the name reports print (rater, plus [condition]).")
@click.option("--target-accuracy", type=click.FloatRange(min=0, max=1), default=None,
              help="Keep the judge's labels where its confidence reaches this accuracy (on held-in users).")
@click.option("--target-kappa", type=click.FloatRange(min=-1, max=1), default=None,
              help="...or this kappa (give exactly one of the two targets).")
@click.option("--positive", default=None,
              help="The category whose rate is estimated [default: yes on a yes/no scale].")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@db_option
def route_command(stage: str, dataset: str, judge: str, target_accuracy: float | None, target_kappa: float | None,
                  positive: str | None, as_json: bool, db: str) -> None:
    """Let a judge decide where it is confident; route the other items to people.

    The confidence threshold is the lowest one whose kept labels reach the target on half of the users (split by a
    hash of the user id) and is checked on the other half. Items below it, or without a judge label or confidence,
    are routed to people: the dashboard's Annotate page serves exactly them (order "routed to people"). Prints the
    stage's rate of --positive under routing (the judge's labels on kept items, people's on routed ones; corrected
    from the judge's own labels while people have labelled only part of them), beside all-human and all-judge, each
    with its user-clustered CI, and the human labels still needed. Rerunning replaces the stored decision.
    """
    try:
        result = route(db, stage, dataset, judge, target_accuracy=target_accuracy, target_kappa=target_kappa,
                       positive=positive)
    except ValueError as exc:  # RouteError and target_for's "not both": the user's input, one line
        fail(f"error: {exc}")
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else render_route(result))
