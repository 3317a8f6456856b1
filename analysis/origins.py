"""Synthetic personas vs real users: tag every report row with its dataset's origin, compare a judge across them.

A dataset's origin is set at import (``personagap import labels --origin real|synthetic``) and read from the
store by :func:`personagap.labels_api.dataset_origins`; the stage reports and ``diagnose`` receive it as a plain
mapping (analysis stays pure) and use this module, so they cannot drift apart. The human study's point is that
judges look better on synthetic personas than on real people: a judge's kappa on each is shown side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from personagap.analysis.panel import ci_suffix, fmt

REAL = "real"
SYNTHETIC = "synthetic"


class OriginField(BaseModel):
    """Whether a row's dataset holds real users or synthetic personas (``import labels --origin``)."""

    origin: str = Field(default=REAL, description="'real' users or 'synthetic' personas (the dataset's origin).")


def tag_origins(node: Any, origins: Mapping[str, str]) -> None:
    """Set ``origin`` on every row of a report that names a dataset, in place (untagged datasets are real).

    Walks pydantic rows (those with an ``origin`` field) and plain dict rows (alt-test, estimates) at any depth,
    so a report gains the tag everywhere it shows a dataset without each section repeating the lookup.

    Args:
        node: A report, row, list or dict.
        origins: Dataset -> origin (:func:`personagap.labels_api.dataset_origins`).
    """
    if isinstance(node, BaseModel):
        dataset = getattr(node, "dataset", None)
        if isinstance(node, OriginField) and isinstance(dataset, str):
            node.origin = origins.get(dataset, REAL)
        for name in type(node).model_fields:
            tag_origins(getattr(node, name), origins)
    elif isinstance(node, list):
        for child in node:
            tag_origins(child, origins)
    elif isinstance(node, dict):
        if isinstance(node.get("dataset"), str):
            node["origin"] = origins.get(node["dataset"], REAL)
        for child in node.values():
            if isinstance(child, BaseModel | list | dict):
                tag_origins(child, origins)


def tag_and_compare(report: BaseModel, origins: Mapping[str, str],
                    judges: Callable[[], Iterable[tuple[str, Any]]]) -> list[OriginComparison]:
    """Tag ``report`` with origins (:func:`tag_origins`), then compare its judges across them.

    Args:
        report: A stage report.
        origins: Dataset -> origin.
        judges: Called after tagging: the report's ``(judge name, row)`` pairs (:func:`origin_comparison`).
    """
    tag_origins(report, origins)
    return origin_comparison(judges())


def where(dataset: str, origin: str) -> str:
    """A dataset's name for text, saying so when its users are synthetic personas."""
    return dataset if origin == REAL else f"{dataset}, {origin} personas"


class OriginComparison(BaseModel):
    """One judge's kappa with humans on a synthetic-persona dataset beside the same stage on real users."""

    judge: str
    synthetic_dataset: str
    synthetic_kappa: float
    synthetic_kappa_ci: list[float]
    synthetic_n: int
    synthetic_n_users: int
    real_dataset: str
    real_kappa: float
    real_kappa_ci: list[float]
    real_n: int
    real_n_users: int
    difference: float = Field(description="synthetic_kappa - real_kappa (> 0: the judge looks better on "
                                          "synthetic personas).")
    estimand: str = Field(default="items", description="What both kappas estimate: the compared rows' estimand "
                                                       "('items' or 'users').")


def origin_comparison(rows: Iterable[tuple[str, Any]]) -> list[OriginComparison]:
    """Every judge present on both origins of one stage: its kappa on each synthetic vs each real dataset.

    Args:
        rows: ``(judge name, row)`` pairs; a row has ``dataset``, ``origin``, ``kappa``, ``kappa_ci``, ``n`` and
            ``n_users`` (a stage report's judge rows, already tagged by :func:`tag_origins`). The same name on two
            datasets is the same judge.

    Returns:
        One entry per (judge, synthetic dataset, real dataset), sorted by judge then datasets.
    """
    by_judge: dict[str, dict[str, list[Any]]] = {}
    for name, row in rows:
        by_judge.setdefault(name, {}).setdefault(row.origin, []).append(row)
    out = []
    for name in sorted(by_judge):
        sides = by_judge[name]
        for s in sorted(sides.get(SYNTHETIC, []), key=lambda r: r.dataset):
            for r in sorted(sides.get(REAL, []), key=lambda r: r.dataset):
                out.append(OriginComparison(
                    judge=name, synthetic_dataset=s.dataset, synthetic_kappa=s.kappa, synthetic_kappa_ci=s.kappa_ci,
                    synthetic_n=s.n, synthetic_n_users=s.n_users, real_dataset=r.dataset, real_kappa=r.kappa,
                    real_kappa_ci=r.kappa_ci, real_n=r.n, real_n_users=r.n_users,
                    difference=s.kappa - r.kappa, estimand=getattr(s, "estimand", "items")))
    return out


def origin_lines(comparisons: Iterable[OriginComparison]) -> list[str]:
    """Text for the side-by-side summary (nothing when no judge is on both origins)."""
    comparisons = list(comparisons)
    if not comparisons:
        return []
    lines = ["", "Synthetic personas vs real users, same judge and stage (Cohen's kappa with the humans):"]
    for c in comparisons:
        diff = "n/a" if math.isnan(c.difference) else f"{c.difference:+.2f}"
        lines.append(f"  {c.judge}: synthetic {c.synthetic_dataset} {fmt(c.synthetic_kappa)}"
                     f"{ci_suffix(c.synthetic_kappa_ci)} (n {c.synthetic_n}, {c.synthetic_n_users} users) vs real "
                     f"{c.real_dataset} {fmt(c.real_kappa)}{ci_suffix(c.real_kappa_ci)} (n {c.real_n}, "
                     f"{c.real_n_users} users): difference {diff}")
    return lines

