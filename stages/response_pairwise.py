"""Stage 3's pairwise datasets and generic-vs-personalised pairs, from the store's per-user counts.

Pairs: each judge's A/B/tie verdicts against the blind human's, position and length bias of judges and humans, the
with- vs without-profile gap. Generic-vs-personalised pairs: the share of personalised answers judged no better.
Every figure is computed from the sums :mod:`personagap.store.response_counts` counts (issue 20); every interval is
the one CI rule over per-user sums.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from personagap.analysis.aggregated import user_tables
from personagap.analysis.agreement import ci_list
from personagap.analysis.comparable import judge_display, reference_labels
from personagap.analysis.panel import panel_values, scale_metrics
from personagap.analysis.response import (
    BASELINE_NAMES,
    baseline_flag_line,
    baseline_flags,
    gap_from_counts,
    rate_from_counts,
)
from personagap.analysis.weighting import Weight, judge_row_figures
from personagap.records import DatasetScale
from personagap.scales import PAIRWISE_SCALE as PAIRWISE_SCALE
from personagap.stages.response_records import (
    REVERSED,
    BaselineFlag,
    GenericVsPersonalized,
    GroupAccuracy,
    HumanBias,
    JudgeResult,
    ProfileGap,
    condition_name,
)
from personagap.store.response_counts import BASELINE_SIDES


def reason_kind(error: str) -> str:
    """The kind of a failure: its error text up to the first colon (``timeout: ...`` is a timeout)."""
    return str(error).split(":", 1)[0].strip() or "unknown"


def blind_reference(labels: pd.DataFrame) -> pd.Series:
    """Per item, the blind human label: comparable.py's reference (stored majority, else the majority rule).

    For callers holding labels in memory and no store query (the trained judges' training frames); the report reads
    the reference from the store (:func:`~personagap.store.response_counts.single_reference_counts`).
    """
    return reference_labels(labels, "blind")


def _of(frame: pd.DataFrame, dataset: str) -> pd.DataFrame:
    return frame[frame["dataset"] == dataset]


def _share(part: Any, whole: Any) -> float:
    return float(part) / float(whole) if whole else float("nan")


PAIRWISE_ITEM_FIGURES: tuple[str, ...] = (
    "first_position_rate", "longer_rate", "tie_rate", "human_tie_rate", "accuracy_failures_as_wrong",
    "accuracy_without_human_ties", "always_a_accuracy", "always_longer_accuracy", "baselines", "baseline_flags",
    "swap_consistency", "by_group")
"""A pairwise judge row's figures computed from pooled counts, not its confusion tables: item-weighted only."""


def baseline_accuracies(rows: pd.DataFrame, n: float, categories: tuple[str, ...] | list[str]) -> dict[str, float]:
    """Every trivial baseline's accuracy from the store's counts: its hits (a column per baseline) over ``n``.

    The same counts the judges' accuracies are read from (:func:`~personagap.store.response_counts.pair_judge_counts`
    on a judge's items, :func:`~personagap.store.response_counts.pair_human_counts` on every referenced item); 'always
    tie' only where the scale has a tie category.

    Returns:
        Baseline key (:data:`~personagap.analysis.response.BASELINE_NAMES`) -> accuracy, in the store's order.
    """
    return {BASELINE_NAMES[b]: _share(rows[b].sum(), n) for b in BASELINE_SIDES
            if b != "always_tie" or "tie" in categories}


def pairwise_judges(counts: pd.DataFrame, swaps: pd.DataFrame | None, dataset: str, *,
                    scale: DatasetScale, weight: Weight = "items") -> list[JudgeResult]:
    """Score every comparable judge of one pairwise dataset against the blind human verdict.

    Args:
        counts: :func:`~personagap.store.response_counts.pair_judge_counts` (any datasets).
        swaps: :func:`~personagap.store.response_counts.swap_counts` (any datasets); None: no judge was run in
            both orders.
        dataset: The dataset.
        scale: The A/B/tie scale every judge is scored over.
        weight: What kappa, accuracy and the panel weigh equally (``items`` or ``users``); the rates listed in
            :data:`PAIRWISE_ITEM_FIGURES` weigh items either way (the row's ``item_weighted`` names them).

    Returns:
        One row per (rater, condition, rater kind) with a verdict on a human-labelled item, in that order (a
        reverse-order run, condition ending in ``+reversed``, is not a judge of its own: it feeds swap
        consistency).
    """
    swapped = {} if swaps is None else {
        (str(r), str(c)): (int(p), int(s))
        for r, c, p, s in _of(swaps, dataset)[["rater", "condition", "pairs", "same"]].itertuples(index=False)}
    rows_of = _of(counts, dataset)
    # Users as integer codes (sorted ids): the CI rule's per-user sums group by them, and integers sort far faster
    # than the ids' text on a million rows.
    rows_of = rows_of.assign(user=pd.factorize(rows_of["user_id"], sort=True)[0])
    judges = rows_of[~rows_of["condition"].astype(str).str.endswith(REVERSED)].drop(columns="dataset")
    out = []
    for key, rows in judges.groupby(["rater", "condition", "rater_kind"], sort=True):
        rater, condition, kind = (str(k) for k in key)
        joined = rows[rows["joined"] > 0]
        if joined.empty:
            continue
        tables, n_users = user_tables(joined, scale)
        est, weighting = judge_row_figures(tables, scale_metrics(scale), weight=weight,
                                           item_weighted=PAIRWISE_ITEM_FIGURES)
        n, hits = int(joined["n"].sum()), int(joined["hits"].sum())
        human, label = joined["human"].to_numpy(dtype=object), joined["label"].to_numpy(dtype=object)
        weights = joined["n"].to_numpy(dtype=float)
        not_tie = human != "tie"
        first = rate_from_counts(rows["user"], rows["first"], rows["decisive"])
        longer = rate_from_counts(rows["user"], rows["longer"], rows["unequal"])
        failed = rows[rows["failed"] > 0]
        reasons: Counter[str] = Counter()  # listed most frequent first (ties: first seen in sorted error order)
        for error, k in sorted(zip(failed["error"].astype(str), failed["failed"], strict=True)):
            reasons[reason_kind(error)] += int(k)
        by_group = {}
        for column in ("split", "tier"):
            groups = joined[joined[column].notna()].groupby(column, sort=True)[["joined", "hits"]].sum()
            for value, group_joined, group_hits in groups.itertuples():
                by_group[f"{column}={value}"] = GroupAccuracy(n=int(group_joined),
                                                              accuracy=_share(group_hits, group_joined))
        swap_pairs, same = swapped.get((rater, condition), (0, 0))
        baselines = baseline_accuracies(joined, n, scale.categories)
        # The flag compares like with like: the baselines are pooled over items, so the judge's item-weighted
        # accuracy and interval, whatever --weight chose for the row.
        items = (weighting.get("by_weight") or {}).get("items")
        accuracy, accuracy_ci = ((items.accuracy, items.accuracy_ci) if items is not None
                                 else (est["accuracy"].value, ci_list(est["accuracy"])))
        judge = judge_display(rater, condition)
        flags = [BaselineFlag(baseline=b, accuracy=a, relation=r, note=baseline_flag_line(judge, accuracy, b, a, r))
                 for b, a, r in baseline_flags(accuracy, accuracy_ci, baselines)]
        out.append(JudgeResult(
            judge=judge, rater=rater, condition=condition, dataset=dataset,
            rater_kind=kind, reference="human", scale=scale.kind, n=n, n_users=n_users,
            accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]),
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            failures=int(failed["failed"].sum()), failure_reasons=dict(reasons.most_common()),
            accuracy_failures_as_wrong=_share(hits, n + int(failed.loc[failed["human"].notna(), "failed"].sum())),
            first_position_rate=first.value, first_position_ci=ci_list(first),
            longer_rate=longer.value, longer_ci=ci_list(longer),
            tie_rate=_share(weights[label == "tie"].sum(), n), human_tie_rate=_share(weights[~not_tie].sum(), n),
            accuracy_without_human_ties=_share(joined["hits"].to_numpy(dtype=float)[not_tie].sum(),
                                               weights[not_tie].sum()),
            always_a_accuracy=baselines["always-A"], always_longer_accuracy=baselines["always-longer"],
            baselines=baselines, baseline_flags=flags,
            swap_consistency=_share(same, swap_pairs), swap_pairs=swap_pairs, by_group=by_group, **panel_values(est),
            **weighting,
        ))
    return out


def pairwise_humans(per_user: pd.DataFrame, raters: pd.DataFrame, dataset: str, *,
                    scale: DatasetScale = PAIRWISE_SCALE) -> list[HumanBias]:
    """The blind human reference's own position and length bias on one pairwise dataset, and the baselines.

    Args:
        per_user: The per-user counts of :func:`~personagap.store.response_counts.pair_human_counts`.
        raters: The blind human raters of pairwise items (:func:`~personagap.store.response_counts.pair_human_raters`).
        dataset: The dataset.
        scale: The pairwise scale ('always tie' is a baseline where it has a tie category).

    Returns:
        One row, or none where no item has a reference. The position bias is given only where every item's
        A/B order is the one the humans saw.
    """
    rows = _of(per_user, dataset)
    if rows.empty:
        return []
    n = int(rows["n"].sum())
    shown = bool(rows["shown"].all())
    users = rows["user_id"]
    first = rate_from_counts(users, rows["first"], rows["decisive"])
    longer = rate_from_counts(users, rows["longer"], rows["unequal"])
    names = sorted({str(r) for r in _of(raters, dataset)["rater"]})
    return [HumanBias(
        dataset=dataset, rater=", ".join(names), n=n, n_users=int(users.nunique()),
        first_position_rate=first.value if shown else None, first_position_ci=ci_list(first) if shown else None,
        longer_rate=longer.value, longer_ci=ci_list(longer), tie_rate=_share(rows["ties"].sum(), n),
        baselines=baseline_accuracies(rows, n, scale.categories),
    )]


def profile_gaps(gap_counts: pd.DataFrame, counts: pd.DataFrame, dataset: str) -> list[ProfileGap]:
    """Each judge's paired accuracy with vs without the profile on one pairwise dataset.

    Args:
        gap_counts: :func:`~personagap.store.response_counts.profile_gap_counts` (any datasets).
        counts: :func:`~personagap.store.response_counts.pair_judge_counts`: each condition's human-labelled
            verdicts (``n_with``, ``n_without``).
        dataset: The dataset.

    Returns:
        One row per (rater, condition with the profile) that has paired items, in that order.
    """
    judged = _of(counts, dataset).groupby(["rater", "condition"])["joined"].sum()
    out = []
    for key, rows in _of(gap_counts, dataset).groupby(["rater", "with_condition", "without_condition"], sort=True):
        rater, with_condition, without_condition = (str(k) for k in key)
        acc_with, acc_without, gap = gap_from_counts(rows["user_id"], rows["hits_with"], rows["hits_without"],
                                                     rows["n"])
        out.append(ProfileGap(
            rater=rater, dataset=dataset, with_condition=with_condition, without_condition=without_condition,
            n=int(rows["n"].sum()), n_with=int(judged.get((rater, with_condition), 0)),
            n_without=int(judged.get((rater, without_condition), 0)), n_users=int(rows["user_id"].nunique()),
            accuracy_with=acc_with, accuracy_without=acc_without, gap=gap.value, gap_ci=ci_list(gap)))
    return out


def profile_gap_note(conditions: set[str], baseline: str, gaps: list[ProfileGap]) -> str | None:
    """One line saying why no with/without-profile comparison was made, or None when one was (or none could be).

    Args:
        conditions: The pairwise judges' conditions (reverse-order runs included; they are not listed).
        baseline: The declared condition without the profile (``--baseline-condition``).
        gaps: The comparisons made.

    Returns:
        None when ``gaps`` is not empty or no pairwise judge was read; else the line, naming the conditions
        present and the option when ``baseline`` is not among them.
    """
    shown = sorted(c for c in conditions if not c.endswith(REVERSED))
    if gaps or not shown:
        return None
    named = condition_name(baseline, quoted=True)
    if not any(c.split("+")[0] == baseline for c in shown):
        present = ", ".join(condition_name(c, quoted=True) for c in shown)
        return (f"No with/without-profile comparison: the baseline condition {named} is not among the pairwise "
                f"judges' conditions ({present}); name the one run without the profile with --baseline-condition.")
    return (f"No with/without-profile comparison: no other condition of a judge shares human-labelled items with "
            f"the baseline condition {named}.")


def gvp_rows(counts: pd.DataFrame, dataset: str) -> list[GenericVsPersonalized]:
    """Per judge of a generic-vs-personalised dataset, the share of personalised answers it rates no better.

    Args:
        counts: :func:`~personagap.store.response_counts.gvp_counts` (any datasets).
        dataset: The dataset.

    Returns:
        One row per (rater, condition, rater kind), in that order (reverse-order runs are not counted).
    """
    out = []
    for key, rows in _of(counts, dataset).groupby(["rater", "condition", "rater_kind"], sort=True):
        rater, condition, kind = (str(k) for k in key)
        n = rows["n"].to_numpy(dtype=float)
        est = rate_from_counts(rows["user_id"], n - rows["preferred"].to_numpy(dtype=float), n)
        out.append(GenericVsPersonalized(
            rater=rater, condition=condition, dataset=dataset, rater_kind=kind, n=int(n.sum()),
            n_users=int(rows.loc[rows["n"] > 0, "user_id"].nunique()), failures=int((rows["rows"] - rows["n"]).sum()),
            no_better_rate=est.value, no_better_ci=ci_list(est),
            personalized_preferred_rate=_share(rows["preferred"].sum(), n.sum())))
    return out
