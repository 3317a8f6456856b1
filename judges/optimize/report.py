"""What an optimisation run is asked to do (:class:`OptimizeSettings`), its plan and its result, as printed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from personagap.analysis.agreement import (
    MIN_USERS_FOR_CI,
    Estimate,
)
from personagap.judges.optimize.data import DEFAULT_FRACTIONS, UserSplit
from personagap.judges.optimize.scoring import Comparison, SelectionMetric

OptimizerName = Literal["bootstrap-fewshot", "mipro", "simba"]


OPTIMIZERS: tuple[str, ...] = ("bootstrap-fewshot", "mipro", "simba")


STAGE_JUDGES: dict[str, tuple[str, ...]] = {"relevance": ("relevance-per-attribute",),
                                            "response": ("pairwise", "persona-use")}
"""Judges that can be optimised: one target item per call (a batched call has no per-item demo)."""
REPORTED = ("kappa", "ac1", "accuracy", "over_selection")
"""Figures reported before/after on test users: over-selection for yes/no judges only, accuracy for the
pairwise judge only (PRISM's own figure; at a skewed yes/no prevalence it rewards always-"no")."""


@dataclass(frozen=True)
class OptimizeSettings:
    """What an optimisation run does (all recorded in the sidecar)."""

    stage: str
    judge: str
    optimizer: OptimizerName = "bootstrap-fewshot"
    metric: SelectionMetric = "kappa"
    budget: int = 200
    seed: int = 0
    n_users: int | None = None
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    candidates: int = 4
    max_demos: int = 8
    max_bootstrapped: int = 4
    threads: int = 8
    datasets: tuple[str, ...] | None = None
    max_items: int | None = None
    """At most this many items per side (a seeded sample drawn after the user split): a cheap run."""


@dataclass(frozen=True)
class Plan:
    """What a run will do, printed before it starts (and all a dry run does)."""

    settings: OptimizeSettings
    split: UserSplit
    items: dict[str, int]
    prevalence: dict[str, float]
    max_calls: dict[str, int]
    est_cost: float | None
    cached: int
    classes: tuple[str, ...]
    """The class set of the run: the datasets' categories (:func:`dataset_classes`)."""

    def render(self) -> str:
        """The plan as lines for the terminal."""
        s, sp = self.settings, self.split
        cost = (f"~${self.est_cost:.4f} at most (list prices)" if self.est_cost is not None
                else "not known for this model")
        return "\n".join([
            f"optimize {s.stage}: judge {s.judge}, optimiser {s.optimizer}, selection metric {s.metric} on dev",
            f"  users (seed {sp.seed}): train {len(sp.train)}, dev {len(sp.dev)}, test {len(sp.test)}; "
            f"items: train {self.items['train']}, dev {self.items['dev']}, test {self.items['test']}",
            "  human prevalence on train: " + ", ".join(f"{k} {v:.3f}" for k, v in self.prevalence.items()),
            f"  LLM calls at most: optimiser {self.max_calls['optimise']} (--budget), dev selection "
            f"{self.max_calls['dev']}, test {self.max_calls['test']}; total {sum(self.max_calls.values())}",
            f"  cached answers available: {self.cached}; estimated cost: {cost}",
        ])


@dataclass
class OptimizeResult:
    """What a run did and found."""

    plan: Plan
    program_path: str
    program_id: str
    chosen: str
    candidates: list[dict[str, Any]]
    test: dict[str, Comparison]
    test_items: int
    test_users: int
    failures: dict[str, int]
    calls: dict[str, int]
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    cost: float | None
    budget_exhausted: bool
    seconds: float

    def scores(self) -> dict[str, Any]:
        """Test figures as JSON-safe data (the sidecar's ``scores``)."""
        def est(e: Estimate) -> dict[str, Any]:
            return {"value": _safe(e.value), "ci": [_safe(e.ci[0]), _safe(e.ci[1])],
                    "undefined_resamples": e.n_undefined}
        return {"test": {m: {"before": est(c.before), "after": est(c.after), "difference": est(c.difference)}
                         for m, c in self.test.items()},
                "test_items": self.test_items, "test_users": self.test_users, "failures": self.failures,
                "dev": {c["name"]: _safe(c["dev_score"]) for c in self.candidates}, "chosen": self.chosen}

    def render(self) -> str:
        """The run for the terminal: plan, calls, candidates, and before/after on test users."""
        lines = [self.plan.render(), "",
                 f"calls used: optimiser {self.calls.get('optimise', 0)}, dev {self.calls.get('dev', 0)}, "
                 f"test {self.calls.get('test', 0)}; cache hits {self.cache_hits}; tokens {self.prompt_tokens} + "
                 f"{self.completion_tokens}; cost " + (f"${self.cost:.4f}" if self.cost is not None else "not reported")
                 + (" (budget exhausted: optimiser stopped early)" if self.budget_exhausted else ""),
                 f"candidates on dev ({self.plan.settings.metric}):"]
        for cand in self.candidates:
            mark = "  <- chosen" if cand["name"] == self.chosen else ""
            lines.append(f"  {cand['name']:<24} demos {cand['demos']:>2}  {_fmt(cand['dev_score'])}{mark}")
        lines.append(f"test users only ({self.test_users} users, {self.test_items} items both programs labelled; "
                     f"failures before {self.failures['before']}, after {self.failures['after']}):")
        lines.append(f"  {'':<16}{'before':>24}{'after':>24}{'after - before':>26}")
        for m, c in self.test.items():
            lines.append(f"  {m:<16}{_fmt_est(c.before):>24}{_fmt_est(c.after):>24}{_fmt_est(c.difference):>26}")
        if self.test_users < MIN_USERS_FOR_CI:
            plural = "s" if self.test_users != 1 else ""
            lines.append(f"  (too few users for a CI: {self.test_users} test user{plural}; use more --users)")
        lines.append(f"program: {self.program_path} ({self.program_id}); sidecar {sidecar_path(self.program_path)}")
        return "\n".join(lines)


def _safe(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None or np.isnan(v) else f"{v:.3f}"


def _fmt_est(e: Estimate) -> str:
    if e.too_few_users:
        return f"{_fmt(e.value)} [no CI]"
    return f"{_fmt(e.value)} [{_fmt(e.ci[0])}, {_fmt(e.ci[1])}]"


def sidecar_path(program_path: str | Path) -> Path:
    """Where a program's JSON sidecar sits: ``PROGRAM.meta.json`` beside it."""
    path = Path(program_path)
    return path.with_name(path.name + ".meta.json")


def reported_metrics(classes: Sequence[str]) -> list[str]:
    """The figures :func:`optimize` reports before/after for a judge with these classes (see :data:`REPORTED`)."""
    binary = len(classes) == 2
    return [m for m in REPORTED if (m != "over_selection" or binary) and (m != "accuracy" or not binary)]
