"""In-memory adapters for tests: a frame of labels through the package's one production path.

The package computes every figure from the store's counts. Tests that hold labels in a frame (made-up or
hand-built rows) count them as the store would (:func:`~personagap.analysis.aggregated.frame_counts`) and call
the production function; nothing under the package imports this module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from personagap.analysis.aggregated import frame_counts
from personagap.analysis.alt_test import MIN_HUMANS_PER_ITEM, MIN_ITEMS_PER_ANNOTATOR
from personagap.analysis.budget import (
    DEFAULT_ASSURANCE,
    DEFAULT_EPSILON,
    DEFAULT_HALFWIDTH,
    DEFAULT_POWER,
    DEFAULT_Q,
    DEFAULT_SEED,
    DEFAULT_SIMULATIONS,
    Plan,
    plan_from_counts,
)
from personagap.analysis.comparable import categories_for
from personagap.records import DatasetScale
from personagap.vocabulary import HumanSet


def plan_rows(labels: pd.DataFrame, datasets: list[str] | None = None, *, stage: str = "",
              humans: HumanSet = "blind", halfwidth: float = DEFAULT_HALFWIDTH,
              assurance: float = DEFAULT_ASSURANCE, power: float = DEFAULT_POWER,
              epsilon: float = DEFAULT_EPSILON, q: float = DEFAULT_Q,
              min_humans_per_item: int = MIN_HUMANS_PER_ITEM, min_items_per_annotator: int = MIN_ITEMS_PER_ANNOTATOR,
              simulations: int = DEFAULT_SIMULATIONS, seed: int = DEFAULT_SEED,
              scales: Mapping[str, DatasetScale] | None = None,
              declared: Mapping[str, Iterable[str]] | None = None) -> Plan:
    """:func:`plan_from_counts` of labels already in memory (the counts as the store would give them).

    Args:
        labels: Tidy labels of one stage (:func:`personagap.store.load_labels`).
        datasets: Datasets to plan (default: every dataset in ``labels``).
        stage: As :func:`plan_from_counts`.
        humans: As :func:`plan_from_counts`.
        halfwidth: As :func:`plan_from_counts`.
        assurance: As :func:`plan_from_counts`.
        power: As :func:`plan_from_counts`.
        epsilon: As :func:`plan_from_counts`.
        q: As :func:`plan_from_counts`.
        min_humans_per_item: As :func:`plan_from_counts`.
        min_items_per_annotator: As :func:`plan_from_counts`.
        simulations: As :func:`plan_from_counts`.
        seed: As :func:`plan_from_counts`.
        scales: Dataset -> its scale; a dataset without one is nominal over
            :func:`~personagap.analysis.comparable.categories_for` of its labels and ``declared``.
        declared: Per dataset, its declared categories (for datasets without a scale).
    """
    chosen = datasets if datasets is not None else sorted(set(labels["dataset"]))
    of_scale = {ds: (scales or {}).get(ds) or DatasetScale(kind="nominal", categories=tuple(categories_for(
        labels[labels["dataset"] == ds], (declared or {}).get(ds)))) for ds in chosen}
    return plan_from_counts(lambda ds: frame_counts(labels, ds, humans)[0], lambda ds: labels, chosen,
                            scales=of_scale, stage=stage, humans=humans, halfwidth=halfwidth, assurance=assurance,
                            power=power, epsilon=epsilon, q=q, min_humans_per_item=min_humans_per_item,
                            min_items_per_annotator=min_items_per_annotator, simulations=simulations, seed=seed)
