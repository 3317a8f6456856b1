"""Scoring programs: examples, the balanced metric, evaluation, corpus metrics and the before/after comparison.

The optimiser's per-example metric weighs classes by the human prevalence on train; candidates are compared by
corpus-level metrics, and the test figures by the one user-clustered CI rule, paired (both programs per user).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import dspy
import numpy as np

import personagap.analysis.robust  # noqa: F401  registers the metrics 'ac1' and 'balanced_accuracy'
from personagap.analysis.agreement import (
    METRICS,
    Estimate,
    FloatArray,
    cluster_estimate,
    indexed_tables,
)
from personagap.judges.base import Judge, JudgeTask, Verdict
from personagap.judges.optimize.data import BudgetExhausted, Example, OptimizeError, base_name

SelectionMetric = Literal["kappa", "ac1", "balanced-accuracy"]


SELECTION_METRICS: tuple[str, ...] = ("kappa", "ac1", "balanced-accuracy")


# The output field that carries each judge's label, and how a label is spelt there.
_LABEL_FIELD: dict[str, tuple[str, dict[str, str]]] = {
    "relevance-per-attribute": ("answer", {"yes": "YES", "no": "NO"}),
    "persona-use": ("uses_persona", {"yes": "yes", "no": "no"}),
    "pairwise": ("verdict", {"A": "A", "B": "B", "tie": "tie"}),
}


def to_dspy(example: Example, judge: Judge) -> dspy.Example:
    """A DSPy example: the task's inputs, the human label spelt as the judge's output field, ids for audit."""
    name, spelling = _LABEL_FIELD[base_name(judge)]
    gold = example.human
    if example.task.meta.get("swapped"):
        gold = {"A": "B", "B": "A"}.get(gold, gold)  # demos show the answers in the order the model saw them
    return dspy.Example(**example.task.inputs, **{name: spelling[gold]}, item_id=example.item_id,
                        user_id=example.user_id).with_inputs(*example.task.inputs)


def class_weights(examples: Sequence[Example], classes: Sequence[str]) -> dict[str, float]:
    """Class-balanced weights from the human prevalence: ``n / (K * n_c)`` (each class weighs the same)."""
    counts = {c: sum(e.human == c for e in examples) for c in classes}
    present = [c for c in classes if counts[c]]
    n = sum(counts.values())
    return {c: (n / (len(present) * counts[c]) if counts[c] else 0.0) for c in classes}


def balanced_metric(judge: Judge, examples: Sequence[Example],
                    weights: Mapping[str, float]) -> Callable[..., float]:
    """Per-example metric for the optimiser: the human class's weight when the judge agrees, else 0.

    An answer that does not parse scores 0 (a failure, never a label).
    """
    by_id = {e.item_id: e for e in examples}

    def metric(example: Any, prediction: Any, trace: Any = None, *args: Any, **kwargs: Any) -> float:
        ex = by_id[str(example["item_id"])]
        label = read_label(judge, ex.task, prediction)
        return float(weights[ex.human]) if label == ex.human else 0.0

    return metric


def read_label(judge: Judge, task: JudgeTask, prediction: Any) -> str | None:
    """The judge's parser applied to a DSPy prediction (None when it does not parse)."""
    if prediction is None:
        return None
    outputs = prediction if isinstance(prediction, Mapping) else dict(prediction.items())
    return judge.parse(outputs, task)[task.targets[0]].label


def program_demos(program: dspy.Module) -> list[dict[str, Any]]:
    """The demonstrations of a program's (single) predictor, as plain dicts."""
    (predictor,) = program.predictors()
    return [dict(d.items()) if hasattr(d, "items") else dict(d) for d in predictor.demos]


def program_instructions(program: dspy.Module) -> str:
    """The instructions of a program's (single) predictor."""
    (predictor,) = program.predictors()
    return str(predictor.signature.instructions)


def program_id(program: dspy.Module, judge: Judge) -> str:
    """Content hash of what the program sends besides the inputs: instructions and demos (signature fields)."""
    fields = list(judge.signature.fields)
    demos = [{k: d.get(k) for k in fields if k in d} for d in program_demos(program)]
    blob = json.dumps({"i": program_instructions(program), "d": demos}, sort_keys=True, ensure_ascii=False,
                      default=str)
    return "opt-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


@dataclass
class Evaluation:
    """A program's labels on some examples (None = the answer did not parse or the call failed)."""

    labels: dict[str, str | None]
    errors: dict[str, str]


def evaluate(program: dspy.Module, judge: Judge, examples: Sequence[Example], lm: dspy.BaseLM,
             adapter: dspy.Adapter, *, threads: int = 8) -> Evaluation:
    """Run a program on examples (in parallel) and read each answer with the judge's parser."""
    labels: dict[str, str | None] = {}
    errors: dict[str, str] = {}

    def one(ex: Example) -> tuple[str, str | None, str | None]:
        try:
            with dspy.context(lm=lm, adapter=adapter), warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                prediction = program(**ex.task.inputs)
        except BudgetExhausted:
            raise
        except Exception as exc:  # a DSPy parse error or a failed request: a recorded failure, never a label
            return ex.item_id, None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        verdict: Verdict = judge.parse(dict(prediction.items()), ex.task)[ex.task.targets[0]]
        return ex.item_id, verdict.label, verdict.error

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        for item, label, error in pool.map(one, examples):
            labels[item] = label
            if error:
                errors[item] = error
    return Evaluation(labels, errors)


# --------------------------------------------------------------------------- corpus metrics

def table_metric(name: str) -> Callable[[FloatArray], FloatArray]:
    """A registered corpus metric of confusion tables ('kappa', 'ac1', 'balanced-accuracy', 'over_selection')."""
    key = name.replace("-", "_")
    if key not in METRICS:
        raise OptimizeError(f"unknown metric {name!r}; choose one of {', '.join(SELECTION_METRICS)}")
    return METRICS[key].fn


def user_tables(examples: Sequence[Example], labels: Mapping[str, str | None], classes: Sequence[str],
                users: Sequence[str]) -> FloatArray:
    """Confusion tables ``(U, K, K)`` per user (in ``users`` order) over examples the judge labelled."""
    code = {c: i for i, c in enumerate(classes)}
    index = {u: i for i, u in enumerate(users)}
    kept = [e for e in examples if labels.get(e.item_id) in code and e.user_id in index]
    return indexed_tables(np.array([code[e.human] for e in kept], dtype=np.int64),
                          np.array([code[str(labels[e.item_id])] for e in kept], dtype=np.int64),
                          np.array([index[e.user_id] for e in kept], dtype=np.int64), len(users), len(classes))


def corpus_score(metric: str, examples: Sequence[Example], labels: Mapping[str, str | None],
                 classes: Sequence[str]) -> float:
    """The corpus-level metric of a program's labels (its dev score); NaN when undefined."""
    tables = user_tables(examples, labels, classes, sorted({e.user_id for e in examples}))
    return float(table_metric(metric)(tables.sum(axis=0)))


def _program(fn: Callable[[FloatArray], FloatArray], k: int) -> Callable[[FloatArray], FloatArray]:
    """The figure of program ``k`` (0 before, 1 after) from paired totals ``(..., 2, K, K)``."""
    def stat(t: FloatArray) -> FloatArray:
        return fn(t[..., k, :, :])
    return stat


def _after_minus_before(fn: Callable[[FloatArray], FloatArray]) -> Callable[[FloatArray], FloatArray]:
    def stat(t: FloatArray) -> FloatArray:
        return np.asarray(fn(t[..., 1, :, :]) - fn(t[..., 0, :, :]), dtype=float)
    return stat


@dataclass(frozen=True)
class Comparison:
    """One figure before and after on the test users, and the user-clustered CI of the paired difference."""

    before: Estimate
    after: Estimate
    difference: Estimate


def compare(examples: Sequence[Example], before: Mapping[str, str | None], after: Mapping[str, str | None],
            classes: Sequence[str], metrics: Sequence[str], *,
            level: float = 0.95) -> tuple[dict[str, Comparison], int, int]:
    """Before/after figures on the same items (both labelled), user-clustered, and their paired difference.

    Both programs' tables sit side by side per user ``(U, 2, K, K)``, so leaving a user out removes that user
    from both: the difference's CI reflects that the same users were judged twice. Every CI is the one CI rule
    (:func:`~personagap.analysis.agreement.cluster_estimate`): none below ``MIN_USERS_FOR_CI`` users, and users
    without whom a figure is undefined are counted.

    Returns:
        (metric -> comparison, number of items, number of users).
    """
    both = [e for e in examples if before.get(e.item_id) in classes and after.get(e.item_id) in classes]
    users = sorted({e.user_id for e in both})
    paired = np.stack([user_tables(both, before, classes, users), user_tables(both, after, classes, users)], axis=1)
    out = {}
    for name in metrics:
        fn = table_metric(name)
        out[name] = Comparison(*(cluster_estimate(stat, paired, level=level)
                                 for stat in (_program(fn, 0), _program(fn, 1), _after_minus_before(fn))))
    return out, len(both), len(users)
