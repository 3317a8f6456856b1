"""`personagap route`: let a judge decide where it is confident and queue the rest for people (issues 23, 30).

The threshold is :func:`personagap.analysis.routing.guaranteed_threshold`'s (``--method ltt``, the default:
fixed-sequence testing with a user-clustered one-sided test, so that P(accuracy on kept items >= target) >= 1 -
delta), or :func:`personagap.analysis.coverage.choose_threshold`'s (``--method split``: chosen on half of the users,
reported on the other half). The estimates are :mod:`personagap.analysis.routing`'s; the decision is stored in the
``runs`` table (:mod:`personagap.store.routing`), an audit draw in ``route_audit``
(:mod:`personagap.store.route_audit`), and the dashboard's Annotate page serves exactly the routed items.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from personagap._cli_base import cli, db_option, fail
from personagap.stage_names import STAGES

if TYPE_CHECKING:
    import pandas as pd

    from personagap.analysis.coverage import ThresholdChoice
    from personagap.analysis.routing import GuaranteedThreshold, RoutingEstimate


class RouteError(ValueError):
    """A route request the data cannot answer (unknown judge, no confidences, no such category): one line."""


METHODS = ("ltt", "split")


@dataclass(frozen=True)
class JudgeStep:
    """One judge of the route (one step of a cascade): its guaranteed threshold and how many items it keeps."""

    judge: str
    confidence_scale: str
    guarantee: GuaranteedThreshold
    kept: int

    def to_json(self) -> dict[str, Any]:
        """``{judge, confidence_scale, threshold, kept}``."""
        return {"judge": self.judge, "confidence_scale": self.confidence_scale, "threshold": self.guarantee.to_json(),
                "kept": self.kept}


@dataclass(frozen=True)
class RouteResult:
    """What ``personagap route`` decided and estimated."""

    stage: str
    dataset: str
    judge: str
    confidence_scale: str
    choice: ThresholdChoice | None
    """The half-split choice (``--method split``); None with ``--method ltt``."""
    estimate: RoutingEstimate
    run_id: str
    method: str = "split"
    steps: tuple[JudgeStep, ...] = ()
    """``--method ltt``: one step per judge (several with ``--cascade``)."""
    delta: float | None = None
    cascade: bool = False
    audit_seed: int | None = None
    audit_note: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The decision, how it was made, and the estimates."""
        from personagap.analysis.agreement import json_safe_dict

        if self.choice is not None:
            point = self.choice.chosen_on
            # The labelled items the chosen threshold keeps among the choosing users, and whose they are: what the
            # choice rests on, beside n_users_chosen_on (every user of the choosing half; issue 32).
            kept = None if point is None or self.choice.min_confidence is None else {
                "n_items": point.n, "n_users": point.accuracy.n_clusters or 0}
            threshold = {"method": "split", **self.choice.to_json(), "kept_labelled": kept}
        else:
            threshold = self.steps[0].guarantee.to_json()
        return json_safe_dict({
            "stage": self.stage, "dataset": self.dataset, "judge": self.judge,
            "confidence_scale": self.confidence_scale, "method": self.method, "delta": self.delta,
            "threshold": threshold, "cascade": [s.to_json() for s in self.steps] if self.cascade else None,
            "audit": {"drawn": self.estimate.audit_drawn, "labelled": self.estimate.audited, "seed": self.audit_seed,
                      "note": self.audit_note},
            "estimate": self.estimate.to_json(), "run_id": self.run_id})


def _resolve(judges: pd.DataFrame, judge: str, dataset: str) -> tuple[str, str]:
    found = judges[judges["judge"] == judge]
    if found.empty:
        raise RouteError(f"no judge {judge!r} on {dataset} (judges: {', '.join(judges['judge']) or 'none'})")
    return str(found["rater"].iloc[0]), str(found["condition"].iloc[0])


def _one_scale(items: pd.DataFrame, judge: str, dataset: str) -> str:
    """The judge's one confidence scale over the items people labelled (what a threshold is chosen on)."""
    import pandas as pd

    labelled = items[items["human"].notna() & items["label"].notna()
                     & pd.to_numeric(items["confidence"], errors="coerce").notna()]
    scales = sorted(set(labelled["confidence_scale"].dropna().astype(str)))
    if labelled.empty:
        raise RouteError(f"judge {judge!r} states no confidence on items people labelled in {dataset}: nothing to "
                         "choose a threshold from (judge again with --confidence verbal|logprobs)")
    if len(scales) > 1:
        raise RouteError(f"judge {judge!r} states confidences on several scales ({', '.join(scales)}): not comparable")
    return scales[0] if scales else "unstated"


def route(db: str, stage: str, dataset: str, judge: str | None = None, *, target_accuracy: float | None = None,
          target_kappa: float | None = None, positive: str | None = None, level: float = 0.95,
          method: str = "ltt", delta: float = 0.1, cascade: Sequence[str] | None = None, audit: int | None = None,
          audit_seed: int = 0) -> RouteResult:
    """Choose the judge's confidence threshold, route the rest of the items to people, estimate the stage's rate.

    Args:
        db: The store (written: the routing decision replaces the last one of this stage and dataset; so does an
            audit draw).
        stage: Pipeline stage.
        dataset: Dataset of that stage.
        judge: The judge's display name (as reports print it: rater, plus ``[condition]``); or give ``cascade``.
        target_accuracy: The accuracy the kept labels must reach...
        target_kappa: ...or the kappa (exactly one of the two; kappa only with ``method="split"``).
        positive: The category whose rate is estimated [default: ``yes`` on a yes/no scale].
        level: Confidence level of every two-sided interval.
        method: ``ltt`` (guaranteed: :func:`personagap.analysis.routing.guaranteed_threshold`) or ``split`` (chosen
            on half of the users, reported on the other half).
        delta: ``ltt``: the allowed chance that the kept labels' accuracy is below the target.
        cascade: Several judges, cheapest first (``ltt`` only): each keeps the items it is confident on among those
            the earlier ones passed on, at its own guaranteed threshold with ``delta / len(cascade)``.
        audit: Draw this many kept items at random for people to label (stored with ``audit_seed``); the human
            rate is then estimated from them. None: use the stored draw if it was drawn from the same kept items.
        audit_seed: Seed of the audit draw.

    Raises:
        RouteError: No such dataset or judge, no confidence, no target or two, a category off the scale, a kappa
            target or a cascade with the split method.
    """
    import numpy as np

    from personagap.analysis.confidence_report import target_for
    from personagap.analysis.coverage import choose_threshold
    from personagap.analysis.routing import draw_audit, guaranteed_threshold, kept_digest, kept_mask, routing_estimate
    from personagap.datasets import dataset_record
    from personagap.store import opened
    from personagap.store.confidence import confidence_counts
    from personagap.store.route_audit import AuditDraw, load_audit, save_audit
    from personagap.store.routing import judges_with_labels, route_items, save_route

    if method not in METHODS:
        raise RouteError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    chain = list(cascade or [])
    if (judge is None) == (not chain):
        raise RouteError("give --judge or --cascade (not both)")
    if judge is not None:
        chain = [judge]
    if len(set(chain)) < len(chain):
        raise RouteError(f"--cascade names a judge twice: {', '.join(chain)}")
    if target_accuracy is None and target_kappa is None:
        raise RouteError("give --target-accuracy or --target-kappa")
    target = target_for(dataset, target_accuracy=target_accuracy, target_kappa=target_kappa, ceilings={})
    if target is None:  # unreachable: a given target needs no ceiling; kept for the type checker
        raise RouteError("give --target-accuracy or --target-kappa")
    if method == "ltt" and target.metric != "accuracy":
        raise RouteError("the guarantee (--method ltt) is on accuracy: give --target-accuracy, or --method split "
                         "for a kappa target")
    if method == "split" and len(chain) > 1:
        raise RouteError("--cascade needs --method ltt (the split method chooses one judge's threshold)")
    if not 0.0 < delta < 1.0:
        raise RouteError(f"--delta must be between 0 and 1 (exclusive), got {delta:g}")
    if audit is not None and audit < 1:
        raise RouteError(f"--audit must be at least 1 (the number of kept items to draw), got {audit}")
    if method == "ltt" and not 0.0 < target.value < 1.0:
        raise RouteError(f"--target-accuracy must be in (0, 1) for a guarantee, got {target.value:g}")
    with opened(db, read_only=True) as con:
        record = dataset_record(con, stage, dataset)
        if record is None:
            raise RouteError(f"{db}: no {stage} dataset {dataset!r}")
        judges = judges_with_labels(con, stage, dataset)
        raters = [_resolve(judges, j, dataset) for j in chain]
        frames = [route_items(con, stage, dataset, r, c) for r, c in raters]
        counts = confidence_counts(con, stage, dataset) if method == "split" else None
        stored = load_audit(con, stage, dataset)
    categories = list(record.scale.categories)
    chosen = positive if positive is not None else ("yes" if "yes" in categories else None)
    if chosen is None or chosen not in categories:
        raise RouteError(f"give --positive, one of {', '.join(categories)}: the category whose rate is estimated"
                         if chosen is None else f"--positive {chosen!r} is not one of {', '.join(categories)}")
    scales = [_one_scale(f, j, dataset) for f, j in zip(frames, chain, strict=True)]
    base = frames[0]
    choice = None
    steps: list[JudgeStep] = []
    if counts is not None:  # --method split: the issue-23 choice, kept for comparison
        rater, condition = raters[0]
        mine = counts[(counts["rater"] == rater) & (counts["condition"] == condition)]
        choice = choose_threshold(mine, record.scale, target, level=level)
        kept = kept_mask(base, choice.min_confidence)
        items = base
    else:
        kept = np.zeros(len(base), dtype=bool)
        labels = base["label"].copy()
        for frame, name, scale in zip(frames, chain, scales, strict=True):
            if not frame["item_id"].equals(base["item_id"]):  # both are every item of the dataset, by item id
                raise RouteError(f"judge {name!r} was read over other items than {chain[0]!r}")
            # A later judge is tested only on the items the earlier ones passed on; the union of kept sets reaches
            # the target when each does, so splitting delta equally bounds the chance that any does not.
            remaining = ~kept
            guarantee = guaranteed_threshold(frame[remaining], target.value, delta=delta / len(chain))
            mine_kept = remaining & kept_mask(frame, guarantee.min_confidence)
            labels[mine_kept] = frame.loc[mine_kept, "label"]
            kept |= mine_kept
            steps.append(JudgeStep(name, scale, guarantee, int(mine_kept.sum())))
        items = base.assign(label=labels)
    kept_ids = base.loc[kept, "item_id"].astype(str).tolist()
    digest = kept_digest(kept_ids)
    note = None
    draw: AuditDraw | None = None
    if audit:
        draw = AuditDraw(tuple(draw_audit(kept_ids, audit, audit_seed)), audit_seed, digest)
    elif stored is not None and stored.kept_sha == digest:
        draw = stored
    elif stored is not None:
        note = (f"the stored audit draw ({len(stored.item_ids)} items, seed {stored.seed}) was drawn from other kept "
                "items: not used (draw again with --audit N)")
    estimate = routing_estimate(items, None, chosen, level=level, kept=kept,
                                audit=None if draw is None else draw.item_ids)
    routed = base.loc[~kept, "item_id"].astype(str).tolist()
    judge_name = chain[0] if len(chain) == 1 else " then ".join(chain)
    threshold = choice.min_confidence if choice is not None else steps[0].guarantee.min_confidence
    with opened(db) as con:
        run_id = save_route(con, stage, dataset, judge_name, {
            "rater": raters[0][0], "condition": raters[0][1], "target": target.to_json(), "threshold": threshold,
            "confidence_scale": scales[0], "positive": chosen, "method": method,
            "delta": delta if method == "ltt" else None,
            "cascade": [{"judge": s.judge, "threshold": s.guarantee.min_confidence, "kept": s.kept} for s in steps]
            if len(chain) > 1 else None,
            "audit": None if draw is None else {"n": len(draw.item_ids), "seed": draw.seed, "kept_sha": digest}},
            routed)
        if audit and draw is not None:
            save_audit(con, stage, dataset, draw)
    return RouteResult(stage, dataset, judge_name, scales[0], choice, estimate, run_id, method=method,
                       steps=tuple(steps), delta=delta if method == "ltt" else None, cascade=len(chain) > 1,
                       audit_seed=None if draw is None else draw.seed, audit_note=note)


def _users(n: int) -> str:
    return f"{n:,} user{'s' if n != 1 else ''}"


def _labels_from(n_items: int, n_users: int) -> str:
    """``4 labelled items from 1 user``: the labels a threshold keeps and whose they are."""
    return f"{n_items:,} labelled item{'s' if n_items != 1 else ''} from {_users(n_users)}"


def _guarantee_lines(result: RouteResult) -> list[str]:
    from personagap.analysis.routing import floor3
    from personagap.text import number

    lines = []
    for step in result.steps:
        g = step.guarantee
        who = f"{step.judge}: " if result.cascade else ""
        if g.min_confidence is None:
            lines.append(f"{who}no threshold is shown to reach the target ({g.stopped}): it keeps nothing.")
            continue
        last = next(t for t in reversed(g.tests) if t.rejected)
        # The count that matters is whose labels the chosen threshold keeps, not every user considered (issue 32).
        lines.append(f"{who}kept where confidence >= {g.min_confidence:g} ({step.confidence_scale}): {step.kept:,} "
                     f"items; P(accuracy on them >= {g.target:g}) >= {1 - g.delta:g}, by fixed-sequence testing "
                     f"over {len(g.tests)} threshold{'s' if len(g.tests) != 1 else ''}, chosen on "
                     f"{_labels_from(last.bound.n, last.bound.n_users)} (of {_users(g.n_users)} with people's "
                     "labels).")
        lines.append(f"  At >= {g.min_confidence:g}: accuracy {number(last.bound.accuracy, 3)}, one-sided "
                     f"{1 - g.delta:.0%} lower bound {floor3(last.bound.lower):.3f} ({last.bound.n:,} labelled items, "
                     f"{last.bound.n_users} users, effective {last.bound.effective_users:.1f}); {g.stopped}.")
    return lines


def render_route(result: RouteResult) -> str:
    """The route as the terminal prints it: the threshold(s) and how they were chosen, the counts, the rates."""
    from personagap.analysis.agreement import ci_text
    from personagap.text import number

    choice, est = result.choice, result.estimate
    if choice is not None:
        target = choice.target
        lines = [f"Routing {result.stage} / {result.dataset} by {result.judge} (--method split; target: "
                 f"{target.metric} >= {target.value:g} on the kept labels, no guarantee)"]
        if choice.min_confidence is None:
            lines.append(f"No confidence threshold reaches the target on the {len(choice.chosen_users)} choosing "
                         "users: every item goes to people.")
        else:
            # Whose labels the threshold keeps, not the whole choosing half: a high threshold may be reached by one
            # user's few labels (issue 32). (A chosen threshold always has its point on the choosing users' curve.)
            point = choice.chosen_on
            on = "" if point is None else f"{_labels_from(point.n, point.accuracy.n_clusters or 0)} (of "
            lines.append(f"Kept where confidence >= {choice.min_confidence:g} ({result.confidence_scale}), chosen "
                         f"on {on}{_users(len(choice.chosen_users))} in the choosing half{')' if on else ''}.")
            held = choice.held_out
            if held is None:
                lines.append("  No held-out user has a label at that confidence: the target is unchecked.")
            else:
                figure = getattr(held, target.metric)
                lines.append(f"  On held-out users: {target.metric} {number(figure.value, 2)} {ci_text(figure)}, "
                             f"coverage {number(held.coverage, 2)}, on "
                             f"{_labels_from(held.n, held.accuracy.n_clusters or 0)} (of "
                             f"{_users(len(choice.held_out_users))} held out).")
    else:
        g = result.steps[0].guarantee
        split = (f"; {len(result.steps)} judges, cheapest first, each at delta {g.delta:g}" if result.cascade
                 else "")
        lines = [f"Routing {result.stage} / {result.dataset} by {result.judge} (target: accuracy >= {g.target:g} "
                 f"on the kept labels with probability >= {1 - (result.delta or 0):g}{split})"]
        lines += _guarantee_lines(result)
    lines.append(f"Items: {est.items:,}; kept by the judge{'s' if result.cascade else ''} {est.kept:,}; routed to "
                 f"people {est.routed:,} ({est.routed_labelled:,} labelled; human labels still needed: "
                 f"{est.still_needed:,}).")
    lines.append(f"Rate of {est.positive!r}:")
    if est.human_rate is not None:
        lines.append(f"  human rate              {number(est.human_rate.value)} {ci_text(est.human_rate)}  "
                     f"({est.human_rate_basis})")
    else:
        lines.append(f"  human rate              {number(est.combined.value)}, no interval: "
                     f"{est.human_rate_basis}")
    if result.audit_note:
        lines.append(f"  ({result.audit_note})")
    kind = "" if est.exact else "; corrected, as people labelled only part of the routed items"
    lines += [f"  routed labelling        {number(est.combined.value)} {ci_text(est.combined)}  (judge on kept "
              f"items, people on routed ones: the labels you get, not the human rate{kind})",
              f"  all human labels        {number(est.all_human.value)} {ci_text(est.all_human)}",
              f"  all judge               {number(est.all_judge.value)} {ci_text(est.all_judge)}",
              "The routed items are queued on the dashboard's Annotate page (order: routed to people)."]
    return "\n".join(lines)


def _judges(value: str | None) -> list[str] | None:
    if value is None:
        return None
    names = [v.strip() for v in value.split(",")]
    if not all(names) or len(names) < 2:
        raise click.BadParameter(f"give two or more judge names separated by commas, got {value!r}")
    return names


@cli.command("route")
@click.option("--stage", type=click.Choice(STAGES), required=True, help="Pipeline stage.")
@click.option("--dataset", required=True, help="Dataset of that stage.")
@click.option("--judge", default=None, help="The judge, by the name reports print (rater, plus [condition]).")
@click.option("--cascade", default=None, metavar="J1,J2,...",
              help="Route through several judges instead, cheapest first: each keeps the items it is confident on "
                   "at its own guaranteed threshold (delta split equally), the rest pass on; what none keeps goes "
                   "to people. --method ltt only.")
@click.option("--target-accuracy", type=click.FloatRange(min=0, max=1), default=None,
              help="The accuracy the kept labels must have.")
@click.option("--target-kappa", type=click.FloatRange(min=-1, max=1), default=None,
              help="...or the kappa (--method split only; give exactly one of the two targets).")
@click.option("--method", type=click.Choice(METHODS), default="ltt", show_default=True,
              help="ltt: the lowest threshold that fixed-sequence testing shows to reach the target, so that "
                   "P(accuracy on kept items >= target) >= 1 - delta. split: the old choice, on half of the users "
                   "and checked on the other half (no guarantee; for comparison).")
@click.option("--delta", type=float, default=0.1, show_default=True,
              help="ltt: the allowed chance that the kept labels' accuracy is below the target.")
@click.option("--audit", type=int, default=None, metavar="N",
              help="Draw N kept items at random for people to label (stored with its seed; they are what the human "
                   "rate is estimated from). Without it a stored draw of the same kept items is used; with none, "
                   "the human rate assumes the judge's kept labels are right and gets no interval.")
@click.option("--audit-seed", type=int, default=0, show_default=True, help="Seed of the --audit draw.")
@click.option("--positive", default=None,
              help="The category whose rate is estimated [default: yes on a yes/no scale].")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@db_option
def route_command(stage: str, dataset: str, judge: str | None, cascade: str | None, target_accuracy: float | None,
                  target_kappa: float | None, method: str, delta: float, audit: int | None, audit_seed: int,
                  positive: str | None, as_json: bool, db: str) -> None:
    """Let a judge decide where it is confident; route the other items to people.

    --method ltt (default) tests thresholds from the most confident down (fixed-sequence testing, Learn then Test),
    each with a one-sided user-clustered test of "accuracy on the kept labelled items >= target" at level --delta,
    stops at the first it cannot show and keeps the judge's labels at the last one shown: P(accuracy on the kept
    items >= target) >= 1 - delta. --method split chooses the lowest threshold reaching the target on half of the
    users (split by a hash of the user id) and checks it on the other half. Items below the threshold, or without a
    judge label or confidence, are routed to people: the dashboard's Annotate page serves exactly them (order
    "routed to people"). Prints the human rate of --positive (from an --audit sample of the kept items plus
    people's labels on routed ones, with its user-clustered CI; without an audit it says what is assumed and gives
    no interval), the rate of the routed labelling (judge on kept, people on routed), all-human and all-judge, and
    the human labels still needed. Rerunning replaces the stored decision.
    """
    try:
        result = route(db, stage, dataset, judge, target_accuracy=target_accuracy, target_kappa=target_kappa,
                       positive=positive, method=method, delta=delta, cascade=_judges(cascade), audit=audit,
                       audit_seed=audit_seed)
    except click.BadParameter as exc:
        fail(f"error: --cascade: {exc.message}")
    except ValueError as exc:  # RouteError and target_for's "not both": the user's input, one line
        fail(f"error: {exc}")
    click.echo(json.dumps(result.to_json(), indent=2) if as_json else render_route(result))
