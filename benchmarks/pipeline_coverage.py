"""Coverage of the pipeline view's intervals (issue 22), measured with the calibration harness of issue 21.

Every interval the pipeline view prints is the one CI rule (a user-clustered jackknife-t) of a figure the view
computes from per-user sums with its own functions (:mod:`personagap.analysis.pipeline`): the share humans judge
failed, the difference of two shares paired over users (stage vs stage, pipeline vs oracle input), a judge's
Rogan–Gladen corrected share, and at stage 2 the corrected irrelevant / missed shares and over-selection from the
judge's verdicts within the selected and the left-out attributes. The generators draw users with their own effects
(logit-normal) and stage-2-like item counts; the truth is the figure on a very large population
(:func:`benchmarks.calibration.truth`), coverage and Monte Carlo SE as :class:`benchmarks.calibration.Cell`.

Run: python benchmarks/pipeline_coverage.py [--reps 400] [--users 5 10 20 50]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration import Cell, FloatArray, Generator, Stat, truth  # noqa: E402
from benchmarks.calibration_generators import stage2_sizes  # noqa: E402
from personagap.analysis.pipeline import corrected_rate, difference, interval, s2_corrected, share  # noqa: E402


def _logistic(x: FloatArray) -> FloatArray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)), dtype=float)


def _effect(rng: np.random.Generator, p: float, sd: float, n: int) -> FloatArray:
    return _logistic(rng.normal(np.log(p / (1 - p)), sd, n))


def _judge_counts(rng: np.random.Generator, n: np.ndarray, pos: np.ndarray, labelled: float, se: FloatArray,
                  sp: FloatArray) -> FloatArray:
    """Per-user ``j_n, j_pos, tp, fn, fp, tn``: a judge on all ``n`` outputs (``pos`` truly positive), humans on a
    random share ``labelled`` of them (``tp + fn + fp + tn``: the outputs with a human verdict)."""
    j_tp, j_fp = rng.binomial(pos, se), rng.binomial(n - pos, 1 - sp)
    seen = rng.binomial(n, labelled)
    seen_pos = rng.hypergeometric(pos, np.maximum(n - pos, 0), seen)
    tp = rng.hypergeometric(j_tp, np.maximum(pos - j_tp, 0), seen_pos)
    fp = rng.hypergeometric(j_fp, np.maximum(n - pos - j_fp, 0), seen - seen_pos)
    return np.column_stack([n, j_tp + j_fp, tp, seen_pos - tp, fp, seen - seen_pos - fp]).astype(float)


def failure_share(sizes: np.ndarray) -> Generator:
    """A stage's failure share by human verdict, and a judge's naive-corrected share on the same outputs."""
    def draw(rng: np.random.Generator, u: int) -> FloatArray:
        n = rng.choice(sizes, u)
        rate = _effect(rng, 0.35, 0.8, u)
        fails = rng.binomial(n, rate)
        judge = _judge_counts(rng, n, rng.binomial(n, rate), 0.3, _effect(rng, 0.7, 0.5, u),
                              _effect(rng, 0.8, 0.5, u))
        return np.column_stack([fails, n, judge]).astype(float)
    return Generator("failure share + judge", 2, (), draw,
                     extra={"human share": share(0, 1), "judge corrected": lambda t: corrected_rate(t, 2)})


def paired_difference(sizes: np.ndarray) -> Generator:
    """Two shares on the same users (pipeline vs oracle input), user effects shared: their paired difference."""
    def draw(rng: np.random.Generator, u: int) -> FloatArray:
        n = rng.choice(sizes, u) // 4 + 2
        base = rng.normal(0.0, 0.8, u)
        a = rng.binomial(n, _logistic(base + 0.9))
        b = rng.binomial(n, _logistic(base - 0.6))
        return np.column_stack([a, n, b, n]).astype(float)
    return Generator("paired difference", 2, (), draw, extra={"difference": difference(share(0, 1), share(0, 1), 2)})


def selector(sizes: np.ndarray) -> Generator:
    """Stage 2: a selector against human relevance on a labelled part, and a judge on every attribute."""
    def draw(rng: np.random.Generator, u: int) -> FloatArray:
        n = rng.choice(sizes, u)
        relevant = rng.binomial(n, _effect(rng, 0.2, 0.8, u))
        sel_rel = rng.binomial(relevant, _effect(rng, 0.75, 0.5, u))
        sel_not = rng.binomial(n - relevant, _effect(rng, 0.35, 0.5, u))
        se, sp = _effect(rng, 0.8, 0.4, u), _effect(rng, 0.75, 0.4, u)
        # Per group (selected, left out): the judge's counts, and the humans' on the labelled half.
        g1 = _judge_counts(rng, sel_rel + sel_not, sel_rel, 0.5, se, sp)
        g0 = _judge_counts(rng, n - sel_rel - sel_not, relevant - sel_rel, 0.5, se, sp)
        return np.column_stack([g1, g0])
    extra = {"irrelevant selected": _human(lambda h1, r1, h0, r0: (h1 - r1) / h1),
             "missed relevant": _human(lambda h1, r1, h0, r0: r0 / (r1 + r0)),
             "over-selection": _human(lambda h1, r1, h0, r0: h1 / (r1 + r0))}
    extra |= {f"judge corrected {q.replace('_', ' ')}": s2_corrected(q)
              for q in ("irrelevant_selected", "missed_relevant", "over_selection")}
    return Generator("stage-2 selector + judge", 2, (), draw, extra=extra)


def _human(f: Callable[[FloatArray, FloatArray, FloatArray, FloatArray], FloatArray]) -> Stat:
    # The humans' figure from the labelled attributes of each group: labelled (tp+fn+fp+tn) and relevant (tp+fn).
    def stat(t: FloatArray) -> FloatArray:
        labelled1, relevant1 = t[..., 2:6].sum(axis=-1), t[..., 2] + t[..., 3]
        labelled0, relevant0 = t[..., 8:12].sum(axis=-1), t[..., 8] + t[..., 9]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(f(labelled1, relevant1, labelled0, relevant0), dtype=float)
    return stat


def generators() -> dict[str, Generator]:
    """The pipeline view's figures under their generators."""
    sizes = stage2_sizes()
    return {g.name: g for g in (failure_share(sizes), paired_difference(sizes), selector(sizes))}


def coverage(users: list[int], reps: int, seed: int = 0) -> dict[str, dict[int, dict[str, Cell]]]:
    """generator -> users -> figure -> coverage of the interval the view prints (:func:`pipeline.interval`)."""
    out: dict[str, dict[int, dict[str, Cell]]] = {}
    for name, gen in generators().items():
        true = truth(gen, n_users=100_000)
        figures = gen.figures()
        out[name] = {}
        for u in users:
            rng = np.random.default_rng([seed, u, len(name)])
            cells = {f: Cell() for f in figures}
            for _ in range(reps):
                per = gen.draw(rng, u)
                for f, stat in figures.items():
                    lo, hi = interval(stat, per).ci
                    cells[f].add(lo, hi, true[f])
            out[name][u] = cells
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--users", type=int, nargs="+", default=[5, 10, 20, 50])
    args = parser.parse_args()
    results = coverage(args.users, args.reps)
    print(f"Coverage of the pipeline view's 95% intervals ({args.reps} studies per cell; coverage (MC SE) w median "
          "width):\n")
    print("| generator | figure | " + " | ".join(f"{u} users" for u in args.users) + " |")
    print("|---|---|" + "---|" * len(args.users))
    for name, by_users in results.items():
        for figure in next(iter(by_users.values())):
            print(f"| {name} | {figure} | " + " | ".join(by_users[u][figure].text() for u in args.users) + " |")


if __name__ == "__main__":
    main()
