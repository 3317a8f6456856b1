"""Stage 3's pairwise datasets and generic-vs-personalised pairs.

Pairs: each judge's A/B/tie verdicts against the human's, position and length bias of judges and humans, the
with- vs without-profile gap. Generic-vs-personalised pairs: the share of personalised answers judged no better.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from personagap.analysis.agreement import NAN_ESTIMATE, ci_list
from personagap.analysis.comparable import blind_human_mask, comparable_judge_mask, judge_display, reference_labels
from personagap.analysis.panel import panel_values, scale_estimates
from personagap.analysis.response import (
    BASELINES,
    accuracy_gap,
    baseline_labels,
    first_position_rate,
    longer_rate,
    no_better_rate,
    swap_consistency,
)
from personagap.records import PAIRWISE_LABELS, DatasetScale
from personagap.stages.frames import is_in
from personagap.stages.response_records import (
    NO_PROFILE,
    REVERSED,
    GenericVsPersonalized,
    GroupAccuracy,
    HumanBias,
    JudgeResult,
    ProfileGap,
)

if TYPE_CHECKING:
    pass


def _meta(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value:
        return dict(json.loads(value))
    return {}


def swapped_flags(meta: pd.Series) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per label, whether the judge saw the pair swapped (its meta's ``swapped``; False when meta is empty).

    Each distinct meta text is parsed once: a run stores a handful of distinct texts over a million labels.
    """
    cache: dict[Any, bool] = {}
    out = np.zeros(len(meta), dtype=bool)
    for k, value in enumerate(meta.astype(object).to_numpy()):
        if isinstance(value, dict):
            out[k] = bool(value.get("swapped", False))
            continue
        if value not in cache:
            cache[value] = bool(_meta(value).get("swapped", False))
        out[k] = cache[value]
    return out


def reason_kind(error: str) -> str:
    """The kind of a failure: its error text up to the first colon (``timeout: ...`` is a timeout)."""
    return str(error).split(":", 1)[0].strip() or "unknown"


def blind_reference(labels: pd.DataFrame) -> pd.Series:
    """Per item, the blind human label: comparable.py's reference (stored majority, else the majority rule)."""
    return reference_labels(labels, "blind")


PAIRWISE_SCALE = DatasetScale(kind="pairwise", categories=PAIRWISE_LABELS)


def pairwise_dataset(frame: pd.DataFrame, items: pd.DataFrame, dataset: str, *, scale: DatasetScale,
                     n_resamples: int, seed: int) -> tuple[list[JudgeResult], list[HumanBias], list[ProfileGap]]:
    """Score every comparable judge of one pairwise dataset against the blind human verdict.

    Args:
        frame: The dataset's labels on pairwise items.
        items: The dataset's items (:func:`personagap.stages.response.load_items`), indexed by item id.
        dataset: Its name.
        scale: The A/B/tie scale every judge is scored over.
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed.

    Returns:
        One row per judge, the humans' own position/length bias, and the with- vs without-profile gaps.
    """
    ref = blind_reference(frame)
    len_a = items["answer_a"].str.len()
    len_b = items["answer_b"].str.len()
    results = []
    judge_rows = frame[comparable_judge_mask(frame)]
    verdicts: dict[tuple[str, str], pd.Series] = {}
    for (rater, condition), rows in judge_rows.groupby(["rater", "condition"], sort=True):
        verdicts[(str(rater), str(condition))] = rows[rows["label"].notna()].set_index("item_id")["label"]
    for (rater, condition, kind), rows in judge_rows.groupby(["rater", "condition", "rater_kind"], sort=True):
        if str(condition).endswith(REVERSED):
            continue  # the reverse-order run feeds swap consistency, not a separate judge row
        rater, condition = str(rater), str(condition)
        failed = rows[rows["label"].isna()]
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id").set_index("item_id")
        joined = parsed.join(ref.rename("human"), how="inner")
        if joined.empty:
            continue
        ids = joined.index
        # Row positions of these items, looked up once: .loc per column looks them up again each time.
        pos = items.index.get_indexer(ids)
        if (pos < 0).any():
            raise KeyError(f"{dataset}: labels on items the store does not hold: {list(ids[pos < 0][:3])}")
        la, lb = len_a.iloc[pos], len_b.iloc[pos]
        clusters = items["user_id"].to_numpy()[pos]
        judge = joined["label"].to_numpy(dtype=object)
        human = joined["human"].to_numpy(dtype=object)
        # Object dtype: the scale's coding reads each label as a Python string, which Arrow-backed text builds one
        # at a time (a second per 10^6 labels); the conversion to object is done in C++.
        est = scale_estimates(joined["human"].astype(object), joined["label"].astype(object), pd.Series(clusters),
                              scale)
        swapped = swapped_flags(joined["meta"])
        first = first_position_rate(judge, swapped, clusters, n_resamples=n_resamples, seed=seed)
        longer = longer_rate(judge, la, lb, clusters, n_resamples=n_resamples, seed=seed)
        not_tie = human != "tie"
        reverse = verdicts.get((rater, condition + REVERSED))
        consistency, swap_n = float("nan"), 0
        if reverse is not None:
            both = parsed.index.intersection(reverse.index)
            swap_n = len(both)
            consistency = swap_consistency(parsed.loc[both, "label"].to_numpy(), reverse.loc[both].to_numpy())
        by_group = {}
        for col in ("split", "tier"):
            groups = items[col].iloc[pos]
            for value in sorted(groups.dropna().unique()):
                mask = (groups == value).to_numpy()
                by_group[f"{col}={value}"] = GroupAccuracy(n=int(mask.sum()),
                                                           accuracy=float((judge[mask] == human[mask]).mean()))
        results.append(JudgeResult(
            judge=judge_display(rater, condition), rater=rater, condition=condition, dataset=dataset,
            rater_kind=str(kind), reference="human", scale=scale.kind, n=len(joined), n_users=len(set(clusters)),
            accuracy=est["accuracy"].value, accuracy_ci=ci_list(est["accuracy"]),
            kappa=est["kappa"].value, kappa_ci=ci_list(est["kappa"]), undefined_resamples=est["kappa"].n_undefined,
            failures=len(failed), failure_reasons=dict(Counter(reason_kind(e) for e in failed["error"])),
            accuracy_failures_as_wrong=float((judge == human).sum()
                                             / (len(joined) + int(is_in(failed["item_id"], ref.index).sum()))),
            first_position_rate=first.value, first_position_ci=ci_list(first),
            longer_rate=longer.value, longer_ci=ci_list(longer),
            tie_rate=float((judge == "tie").mean()), human_tie_rate=float((~not_tie).mean()),
            accuracy_without_human_ties=float((judge[not_tie] == human[not_tie]).mean()) if not_tie.any()
            else float("nan"),
            always_a_accuracy=float((baseline_labels("always-A", la, lb) == human).mean()),
            always_longer_accuracy=float((baseline_labels("always-longer", la, lb) == human).mean()),
            swap_consistency=consistency, swap_pairs=swap_n, by_group=by_group, **panel_values(est),
        ))

    human_rows = []
    if not ref.empty:
        ids = ref.index.intersection(items.index)
        h = ref.loc[ids].to_numpy(dtype=object)
        clusters = items.loc[ids, "user_id"].to_numpy()
        shown = bool(items.loc[ids, "order_shown"].all())
        first = first_position_rate(h, np.zeros(len(h), dtype=bool), clusters, n_resamples=n_resamples, seed=seed)
        longer = longer_rate(h, len_a.loc[ids], len_b.loc[ids], clusters, n_resamples=n_resamples, seed=seed)
        raters = sorted(frame.loc[blind_human_mask(frame), "rater"].unique())
        human_rows.append(HumanBias(
            dataset=dataset, rater=", ".join(map(str, raters)), n=len(h), n_users=len(set(clusters)),
            first_position_rate=first.value if shown else None, first_position_ci=ci_list(first) if shown else None,
            longer_rate=longer.value, longer_ci=ci_list(longer), tie_rate=float((h == "tie").mean()),
            baselines={b: float((baseline_labels(b, len_a.loc[ids], len_b.loc[ids]) == h).mean())
                       for b in BASELINES},
        ))

    gaps = []
    for (rater, cond_with), with_labels in sorted(verdicts.items()):
        base, _, suffix = cond_with.partition("+")
        if base == NO_PROFILE or cond_with.endswith(REVERSED):
            continue
        cond_without = NO_PROFILE + (f"+{suffix}" if suffix else "")
        without = verdicts.get((rater, cond_without))
        if without is None:
            continue
        # A paired gap needs both verdicts on the same human-labelled item: only those items count.
        n_with = len(with_labels.index.intersection(ref.index))
        n_without = len(without.index.intersection(ref.index))
        ids = with_labels.index.intersection(without.index).intersection(ref.index)
        if len(ids) == 0:
            continue
        acc_with, acc_without, gap = accuracy_gap(
            ref.loc[ids].to_numpy(dtype=object), with_labels.loc[ids].to_numpy(dtype=object),
            without.loc[ids].to_numpy(dtype=object), items.loc[ids, "user_id"].to_numpy(),
            n_resamples=n_resamples, seed=seed)
        gaps.append(ProfileGap(rater=rater, dataset=dataset, with_condition=cond_with, without_condition=cond_without,
                               n=len(ids), n_with=n_with, n_without=n_without,
                               n_users=int(items.loc[ids, "user_id"].nunique()),
                               accuracy_with=acc_with, accuracy_without=acc_without, gap=gap.value,
                               gap_ci=ci_list(gap)))
    return results, human_rows, gaps


def gvp_dataset(frame: pd.DataFrame, items: pd.DataFrame, dataset: str, *, n_resamples: int,
                seed: int) -> list[GenericVsPersonalized]:
    """Per judge of a generic-vs-personalised dataset, the share of personalised answers it rates no better.

    Returns:
        One row per judge and condition (a reverse-order run is not a judge of its own).
    """
    out = []
    judges = frame[comparable_judge_mask(frame)]
    for (rater, condition, kind), rows in judges.groupby(["rater", "condition", "rater_kind"], sort=True):
        if str(condition).endswith(REVERSED):
            continue
        parsed = rows[rows["label"].notna()].drop_duplicates("item_id")
        ids = parsed["item_id"].to_numpy()
        lab = parsed["label"].to_numpy(dtype=object)
        pers = items.loc[ids, "personalized"].to_numpy(dtype=object)
        est = (no_better_rate(lab, pers, items.loc[ids, "user_id"].to_numpy(), n_resamples=n_resamples, seed=seed)
               if len(ids) else NAN_ESTIMATE)
        out.append(GenericVsPersonalized(
            rater=str(rater), condition=str(condition), dataset=dataset, rater_kind=str(kind), n=len(ids),
            n_users=int(items.loc[ids, "user_id"].nunique()) if len(ids) else 0,
            failures=int(rows["label"].isna().sum()), no_better_rate=est.value, no_better_ci=ci_list(est),
            personalized_preferred_rate=float((lab == pers).mean()) if len(ids) else float("nan"),
        ))
    return out
