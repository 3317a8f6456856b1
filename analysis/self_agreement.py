"""A judge's agreement with itself over K samples per item (``judge --repeats K``): a ceiling on agreeing with people.

A judge that gives different labels to the same item when asked again cannot agree with any person more than it
agrees with itself. Two figures over the items it sampled:

* **pairwise self-agreement**: the share of pairs of its samples of an item that give the same label, pooled over
  items (agreeing pairs / pairs, both per-user additive sums, so its interval is the one CI rule,
  :func:`personagap.analysis.agreement.cluster_estimate`);
* **Fleiss' kappa** over the items that have every one of the K samples parsed (chance-corrected; a point figure).

Failed samples (no label) are left out of an item's pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from personagap.analysis.agreement import Estimate, FloatArray, ci_list, cluster_estimate, fleiss_kappa


@dataclass(frozen=True)
class SelfAgreement:
    """Pairwise self-agreement (with its user-clustered CI), Fleiss' kappa, and what they are over."""

    samples: int
    items: int
    agreement: Estimate
    fleiss_kappa: float
    fleiss_items: int

    def to_json(self) -> dict[str, Any]:
        """``{samples, items, self_agreement, self_agreement_ci, n_users, fleiss_kappa, fleiss_items}``."""
        return {"samples": self.samples, "items": self.items, "self_agreement": self.agreement.value,
                "self_agreement_ci": ci_list(self.agreement), "n_users": self.agreement.n_clusters,
                "fleiss_kappa": self.fleiss_kappa, "fleiss_items": self.fleiss_items}


def _ratio(t: FloatArray) -> FloatArray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(t[..., 1] > 0, t[..., 0] / t[..., 1], np.nan), dtype=float)


def self_agreement(samples: pd.DataFrame, k: int, *, level: float = 0.95) -> SelfAgreement:
    """How often a judge's K samples of an item agree.

    Args:
        samples: One row per parsed sample: ``item_id``, ``user_id``, ``sample`` (its index) and ``label``.
        k: Samples asked per item.
        level: Confidence level.

    Raises:
        ValueError: ``k`` below 2, or an item with more than ``k`` samples.
    """
    if k < 2:
        raise ValueError(f"self-agreement needs at least 2 samples per item, got {k}")
    counts = samples.groupby(["user_id", "item_id", "label"]).size().rename("c").reset_index()
    per_item = samples.groupby(["user_id", "item_id"]).size()
    if (per_item > k).any():
        raise ValueError(f"an item has more than {k} samples: {per_item.idxmax()}")
    agreeing = (counts["c"] * (counts["c"] - 1) / 2).groupby([counts["user_id"], counts["item_id"]]).sum()
    pairs = per_item * (per_item - 1) / 2
    per_user = pd.DataFrame({"agree": agreeing, "pairs": pairs}).groupby(level="user_id").sum()
    per_user = per_user[per_user["pairs"] > 0]
    full = counts.set_index(["user_id", "item_id"]).loc[per_item[per_item == k].index]
    table = full.pivot_table(index=["user_id", "item_id"], columns="label", values="c", fill_value=0)
    return SelfAgreement(samples=k, items=int((per_item >= 2).sum()),
                         agreement=cluster_estimate(_ratio, per_user[["agree", "pairs"]].to_numpy(dtype=float),
                                                    level=level, bounds=(0.0, 1.0)),
                         fleiss_kappa=fleiss_kappa(table.to_numpy()) if len(table) else float("nan"),
                         fleiss_items=len(table))
