"""Does `personagap route` keep its promises? Three tables (``benchmarks/calibration_routing_table.md``).

``--table guarantee`` (default; issue 30): worlds built to break the guaranteed threshold (:class:`BreakWorld`,
:data:`WORLDS`: very unequal item counts with big users like or unlike the rest, uninformative or miscalibrated
confidence, one-sided judge errors) at 10, 20 and 50 users. Per world and size: the share of studies whose kept
items' true accuracy is below the target at delta 0.1 and 0.05 (the promise: at most delta), against the study's
own kept items and the population's accuracy at the chosen threshold; the share kept against the most possible;
the candidate one-sided tests (:data:`CANDIDATES`) and the old half-split; the audited human rate's coverage
(:func:`guarantee_study`). ``--table cascade``: the same promise for the union of two judges
(:func:`cascade_study`). ``--table combined`` (issue 23): the coverage of the routed labelling's own interval.

The combined table's generator (:class:`RoutingWorld`, also the tests' data): known truth shaped like PRISM's
certainties (:mod:`benchmarks.conf_coverage`'s values, shares and accuracy model): users with 2-12 items each, a
user's positive rate ``p_u ~ Beta(2, 6)`` (mean 0.25, users differ), the human label ``y ~ Bernoulli(p_u)``, the
judge's certainty on 1-100, the judge right with probability ``sigmoid(a + b (c - 60) / 20 + u)`` independent of
``y``. A share ``human_share`` of the items carries a person's label (at random): the threshold is chosen on them as
``personagap route --method split`` does (half of the users, target accuracy), and the routed items people labelled
are a random sample of the routed ones. Its estimand is the rate of the routed labelling -- the judge's label on
kept items (certainty >= t), a person's on routed ones -- over the population of users: the per-item expectation
``sum_v pi_v [v >= t] J_v + sum_v pi_v [v < t] pbar`` with ``pbar = E p_u`` and ``J_v = pbar m_v + (1 - pbar)(1 -
m_v)`` the judge's positive rate at certainty v (``m_v`` its rate of being right, by quadrature), taken at the
threshold each study chose.

Run: nice python benchmarks/calibration_routing.py [--table guarantee|cascade|combined] [--reps N]
[--users 10 20 50] [--worlds 0 1 ...] [--audit 60] [--split-reps 40] [--human-share 1.0 0.4 (combined)]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.conf_coverage import SHARES, VALUES, Generator  # noqa: E402
from personagap.analysis.coverage import Target, choose_threshold  # noqa: E402
from personagap.analysis.estimates import MIN_LABELLED_USERS  # noqa: E402
from personagap.analysis.routing import draw_audit, guaranteed_threshold, kept_mask, routing_estimate  # noqa: E402
from personagap.records import RELEVANCE_LABELS, DatasetScale  # noqa: E402

YES_NO = DatasetScale(kind="nominal", categories=tuple(sorted(RELEVANCE_LABELS)))
BETA = (2.0, 6.0)


@dataclass(frozen=True)
class RoutingWorld:
    """The generator: the judge's accuracy model, the users' rates and sizes, and who has a person's label."""

    judge: Generator = Generator()
    human_share: float = 1.0
    max_items: int = 12

    @property
    def pbar(self) -> float:
        """Population mean of the users' positive rates."""
        return BETA[0] / (BETA[0] + BETA[1])

    def judge_positive(self) -> np.ndarray:
        """``J_v``: the judge's rate of 'yes' at each certainty value."""
        m = self.judge.right_rate()
        return np.asarray(self.pbar * m + (1 - self.pbar) * (1 - m))

    def truth(self, threshold: float | None) -> float:
        """The routed labelling's rate at ``threshold`` (None: everything to people)."""
        if threshold is None:
            return self.pbar
        kept = VALUES >= threshold
        return float((SHARES * np.where(kept, self.judge_positive(), self.pbar)).sum())

    def study(self, n_users: int, rng: np.random.Generator) -> pd.DataFrame:
        """One study's items (:data:`personagap.analysis.routing.ITEM_COLUMNS`)."""
        sizes = rng.integers(2, self.max_items + 1, size=n_users)
        user = np.repeat(np.arange(n_users), sizes)
        rate = rng.beta(*BETA, size=n_users)[user]
        effect = rng.normal(0.0, self.judge.sigma, size=n_users)[user]
        value = VALUES[rng.choice(len(VALUES), size=user.size, p=SHARES)]
        logit = self.judge.a + self.judge.b * (value - 60.0) / 20.0 + effect
        right = rng.random(user.size) < 1.0 / (1.0 + np.exp(-logit))
        y = rng.random(user.size) < rate
        label = np.where(right == y, "yes", "no")
        human = np.where(y, "yes", "no").astype(object)
        human[rng.random(user.size) >= self.human_share] = None
        return pd.DataFrame({"item_id": [f"i{k:06d}" for k in range(user.size)],
                             "user_id": [f"u{u:04d}" for u in user], "label": label, "confidence": value,
                             "human": human})


def counts(items: pd.DataFrame) -> pd.DataFrame:
    """The confidence counts ``choose_threshold`` reads (items with a person's label), as the store builds them."""
    judged = items[items["human"].notna()]
    return (judged.groupby(["user_id", "confidence", "human", "label"]).size().rename("n").reset_index())


def simulate(n_users: int, reps: int, seed: int, world: RoutingWorld | None = None,
             target_accuracy: float = 0.8) -> dict[str, dict[str, float]]:
    """Coverage of the combined estimate's interval over ``reps`` studies of ``n_users`` users.

    Each study is scored once with the interval rule itself (no minimum of labelled users) and counted twice:
    ``rule`` over every study with an interval, ``printed`` over the studies where ``personagap route`` prints it
    (at least :data:`~personagap.analysis.estimates.MIN_LABELLED_USERS` users with a person's label, or nothing
    routed).

    Args:
        n_users: Users per study.
        reps: Studies.
        seed: Seed of the whole run.
        world: The generator.
        target_accuracy: The routing target.

    Returns:
        Per count (``rule``, ``printed``): ``coverage``, ``mc_se``, ``with_ci`` (studies with an interval),
        ``bias`` (mean estimate minus truth), ``mean_width``, ``reps``.
    """
    world = world or RoutingWorld()
    rng = np.random.default_rng(seed)
    target = Target("accuracy", target_accuracy, "given")
    hits: dict[str, list[bool]] = {"rule": [], "printed": []}
    widths: dict[str, list[float]] = {"rule": [], "printed": []}
    errors = []
    for _ in range(reps):
        items = world.study(n_users, rng)
        choice = choose_threshold(counts(items), YES_NO, target)
        result = routing_estimate(items, choice.min_confidence, "yes", min_labelled_users=0)
        est, truth = result.combined, world.truth(choice.min_confidence)
        errors.append(est.value - truth)
        if math.isnan(est.ci[0]):
            continue
        shown = ["rule"] + (["printed"] if result.labelled_users >= MIN_LABELLED_USERS or not result.routed else [])
        for name in shown:
            hits[name].append(est.ci[0] <= truth <= est.ci[1])
            widths[name].append(est.ci[1] - est.ci[0])
    out = {}
    for name, h in hits.items():
        c = float(np.mean(h)) if h else math.nan
        out[name] = {"coverage": c, "mc_se": math.sqrt(c * (1 - c) / len(h)) if h else math.nan, "with_ci": len(h),
                     "bias": float(np.nanmean(errors)), "mean_width": float(np.mean(widths[name])) if h else math.nan,
                     "reps": reps}
    return out


# ---------------------------------------------------------------------------------------------------------------
# Issue 30: does `route --method ltt` keep its guarantee, and does the audited human rate cover? Worlds that try to
# break it.

UNEVEN = ((0.6, 1, 3), (0.3, 4, 20), (0.1, 150, 300))
"""Share of users and their item counts (inclusive): 60% of users hold 1-3 items, 10% hold 150-300."""
EVEN = ((1.0, 2, 12),)
"""The generator above: 2-12 items a user."""


@dataclass(frozen=True)
class BreakWorld:
    """A world built to break routing's promises: uneven users, bad confidences, one-sided errors.

    A user's positive rate is ``Beta(2, 6)``; the judge is right with probability
    ``sigmoid(a + b z(c) + u)``, ``u ~ N(0, 0.6^2)`` per user, ``c`` the certainty on 1-100 (:data:`VALUES`).
    ``z(c) = (c - 60) / 20`` (informative); 0 (uninformative: accuracy the same at every certainty);
    ``(c - 60) / 20`` up to 75 and ``-(c - 60) / 20`` above (miscalibrated: the most confident labels are the worst).
    Big users (150 or more items) either are drawn like the rest or differ: positive rate ``Beta(6, 3)`` and the
    judge worse on them (``u - 1``). With one-sided errors the judge only errs on human positives (says "no").
    ``human_share`` of the items, at random, carry a person's label before routing (what the threshold is chosen on).
    """

    name: str
    sizes: tuple[tuple[float, int, int], ...] = UNEVEN
    big_unlike: bool = False
    confidence: str = "informative"
    one_sided: bool = False
    a: float = 0.9
    b: float = 0.6
    sigma: float = 0.6
    target: float = 0.8
    human_share: float = 0.3

    def z(self, value: np.ndarray) -> np.ndarray:
        """The certainty's effect on the judge's logit (see the class docstring)."""
        z = (value - 60.0) / 20.0
        if self.confidence == "uninformative":
            return np.zeros_like(z)
        if self.confidence == "miscalibrated":
            return np.where(value <= 75.0, z, -z)
        return z

    def users(self, n_users: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per user: item count, positive rate, the judge's effect."""
        shares = np.array([s for s, _, _ in self.sizes])
        group = rng.choice(len(self.sizes), size=n_users, p=shares / shares.sum())
        low = np.array([lo for _, lo, _ in self.sizes])[group]
        high = np.array([hi for _, _, hi in self.sizes])[group]
        size = rng.integers(low, high + 1)
        big = size >= 150
        unlike = big & self.big_unlike
        rate = np.where(unlike, rng.beta(6.0, 3.0, size=n_users), rng.beta(*BETA, size=n_users))
        effect = rng.normal(0.0, self.sigma, size=n_users) - np.where(unlike, 1.0, 0.0)
        return size, rate, effect

    def items(self, n_users: int, rng: np.random.Generator) -> pd.DataFrame:
        """One study: :data:`~personagap.analysis.routing.ITEM_COLUMNS` plus the truth ``y`` and ``p_right``."""
        size, rate, effect = self.users(n_users, rng)
        user = np.repeat(np.arange(n_users), size)
        value = VALUES[rng.choice(len(VALUES), size=user.size, p=SHARES)]
        p_right = 1.0 / (1.0 + np.exp(-(self.a + self.b * self.z(value) + effect[user])))
        y = rng.random(user.size) < rate[user]
        right = rng.random(user.size) < p_right
        if self.one_sided:
            right = right | ~y  # errs only on human positives: says "no" for a "yes", never "yes" for a "no"
        label = np.where(right == y, "yes", "no")
        human = np.where(y, "yes", "no").astype(object)
        human[rng.random(user.size) >= self.human_share] = None
        return pd.DataFrame({"item_id": [f"i{k:06d}" for k in range(user.size)],
                             "user_id": [f"u{u:04d}" for u in user], "label": label, "confidence": value,
                             "human": human, "y": np.where(y, "yes", "no"), "right": right})

    def population(self, n_users: int = 40_000, seed: int = 12345) -> dict[str, np.ndarray | float]:
        """Population truth (expected values over a large draw of users): per certainty value, items and expected
        right labels; and the item-weighted human rate."""
        rng = np.random.default_rng(seed)
        size, rate, effect = self.users(n_users, rng)
        items_at = SHARES[:, None] * size[None, :]  # (V, U) expected items per certainty value
        p = 1.0 / (1.0 + np.exp(-(self.a + self.b * self.z(VALUES)[:, None] + effect[None, :])))
        if self.one_sided:
            p = 1.0 - rate[None, :] * (1.0 - p)
        items, right = items_at.sum(axis=1), (items_at * p).sum(axis=1)
        # The most a threshold can keep while its kept items reach the target (VALUES ascending: cumulate down).
        reach = (np.cumsum(right[::-1]) / np.cumsum(items[::-1]))[::-1] >= self.target
        share = np.cumsum(items[::-1])[::-1] / items.sum()
        return {"items": items, "right": right, "human_rate": float((size * rate).sum() / size.sum()),
                "possible": float(share[reach].max()) if reach.any() else 0.0}


WORLDS = (
    BreakWorld("uneven sizes, big users like the rest; target 0.88 (population accuracy 0.881 at >= 61, 0.859 at "
               ">= 60)", a=1.6, b=0.9, target=0.88),
    BreakWorld("uneven sizes, big users unlike the rest (other rate, judge worse on them); target 0.85 (0.856 at >= "
               "81, 0.833 at >= 75)", big_unlike=True, a=1.6, b=0.9, target=0.85),
    BreakWorld("uneven, uninformative confidence (accuracy 0.837 at every certainty); target 0.85",
               confidence="uninformative", a=1.75, b=0.0, target=0.85),
    BreakWorld("uneven, miscalibrated (the most confident labels the worst: 0.56 at >= 90, 0.78 at >= 60); target "
               "0.75", confidence="miscalibrated", a=1.6, b=0.9, target=0.75),
    BreakWorld("uneven, one-sided judge errors (misses positives only); target 0.95 (0.953 at >= 75, 0.945 at >= 65)",
               one_sided=True, target=0.95),
    BreakWorld("even sizes 2-12 (the generator above, a better judge); target 0.88", sizes=EVEN, a=1.6, b=0.9,
               target=0.88),
    BreakWorld("power check: 40-80 items a user, half labelled, a better judge; target 0.88", sizes=((1.0, 40, 80),),
               a=1.6, b=0.9, target=0.88, human_share=0.5),
)
CANDIDATES: dict[str, dict[str, Any]] = {
    "ltt": {"df_rule": "kish", "se_floor": True}, "plain": {"df_rule": "users", "se_floor": False},
    "floor": {"df_rule": "users", "se_floor": True}, "satt": {"df_rule": "satterthwaite", "se_floor": True}}
"""The one-sided tests compared: the chosen rule (Kish df, binomial SE floor), the plain one-sided jackknife-t
(users - 1 df), the floor with users - 1 df, and the floor with the one CI rule's Satterthwaite df."""


def _kept_truth(items: pd.DataFrame, threshold: float | None, pop: dict[str, np.ndarray | float]
                ) -> tuple[float, float, float]:
    """Share of items kept, their realised accuracy (the study's kept items) and the population's at the threshold."""
    if threshold is None:
        return 0.0, math.nan, math.nan
    kept = items["confidence"].to_numpy() >= threshold
    at = VALUES >= threshold
    population = float(np.asarray(pop["right"])[at].sum() / np.asarray(pop["items"])[at].sum())
    return float(kept.mean()), float(items["right"].to_numpy()[kept].mean()), population


def guarantee_study(world: BreakWorld, n_users: int, rng: np.random.Generator, pop: dict[str, np.ndarray | float],
                    *, deltas: tuple[float, ...], audit: int, split: bool) -> dict[str, float]:
    """One study: thresholds by every candidate and delta (and the old split), the audited human rate at delta 0.1.

    After routing (the default rule at the first delta), people label every routed item and the audit draw.
    """
    items = world.items(n_users, rng)
    out: dict[str, float] = {}
    chosen = None
    for name, rule in CANDIDATES.items():
        for delta in deltas:
            g = guaranteed_threshold(items, world.target, delta=delta, **rule)
            share, realised, population = _kept_truth(items, g.min_confidence, pop)
            out[f"{name}@{delta}:kept"] = share
            out[f"{name}@{delta}:miss"] = float(realised < world.target) if share else 0.0
            out[f"{name}@{delta}:miss_pop"] = float(population < world.target) if share else 0.0
            if chosen is None:
                chosen = g.min_confidence
    if split:
        choice = choose_threshold(counts(items), YES_NO, Target("accuracy", world.target, "given"))
        share, realised, population = _kept_truth(items, choice.min_confidence, pop)
        out["split:kept"], out["split:miss"] = share, float(realised < world.target) if share else 0.0
        out["split:miss_pop"] = float(population < world.target) if share else 0.0
    kept = kept_mask(items, chosen)
    labelled = items.copy()
    drawn = draw_audit(labelled.loc[kept, "item_id"], audit, int(rng.integers(2**31)))
    people = ~kept | labelled["item_id"].isin(drawn).to_numpy()
    labelled.loc[people, "human"] = labelled.loc[people, "y"]
    est = routing_estimate(labelled, chosen, "yes", audit=drawn)
    hr = est.human_rate
    own = float((items["y"] == "yes").mean())
    if hr is not None and not math.isnan(hr.ci[0]):
        truth = float(pop["human_rate"])
        out["hr:covered"], out["hr:covered_own"] = float(hr.ci[0] <= truth <= hr.ci[1]), float(
            hr.ci[0] <= own <= hr.ci[1])
        out["hr:width"] = hr.ci[1] - hr.ci[0]
    if est.kept:
        # The old routed estimate (judge on kept, people on the rest) read as the human rate: its error.
        out["routed_as_human:error"] = est.combined.value - own
    return out


def guarantee_table(world: BreakWorld, n_users: int, reps: int, seed: int, *, deltas: tuple[float, ...] = (0.1, 0.05),
                    audit: int = 60, split_reps: int = 100) -> dict[str, float]:
    """Means over ``reps`` studies of :func:`guarantee_study`'s figures, with counts and MC SEs."""
    rng = np.random.default_rng(seed)
    pop = world.population()
    rows = [guarantee_study(world, n_users, rng, pop, deltas=deltas, audit=audit, split=r < split_reps)
            for r in range(reps)]
    frame = pd.DataFrame(rows)
    out: dict[str, float] = {"reps": reps, "possible": float(pop["possible"])}
    for column in frame.columns:
        values = frame[column].dropna()
        out[column] = float(values.mean()) if len(values) else math.nan
        out[column + ":n"] = len(values)
    if "hr:width" in frame:
        out["hr:median_width"] = float(frame["hr:width"].median())
    return out


def cascade_study(world: BreakWorld, n_users: int, rng: np.random.Generator, *,
                  deltas: tuple[float, ...]) -> dict[str, float]:
    """One study of ``--cascade cheap,world's judge``: misses of the union of kept items, per delta.

    The first ("cheap") judge is a second draw of the world's judge on the same items: the same accuracy model, its own
    certainties, user effects and errors (one-sided when the world's are), so both keep items near the target. Each
    kept item counts with the correctness of the judge that kept it.
    """
    items = world.items(n_users, rng)
    codes = pd.factorize(items["user_id"])[0]
    effect = rng.normal(0.0, world.sigma, size=codes.max() + 1)[codes]
    value = VALUES[rng.choice(len(VALUES), size=len(items), p=SHARES)]
    y = (items["y"] == "yes").to_numpy()
    right = rng.random(len(items)) < 1.0 / (1.0 + np.exp(-(world.a + world.b * world.z(value) + effect)))
    if world.one_sided:
        right = right | ~y
    cheap = items.assign(label=np.where(right == y, "yes", "no"), confidence=value, right=right)
    out: dict[str, float] = {}
    for delta in deltas:
        kept = np.zeros(len(items), dtype=bool)
        correct = np.zeros(len(items), dtype=bool)
        for frame in (cheap, items):
            g = guaranteed_threshold(frame[~kept], world.target, delta=delta / 2)
            mine = ~kept & kept_mask(frame, g.min_confidence)
            correct[mine] = frame["right"].to_numpy()[mine]
            kept |= mine
        out[f"cascade@{delta}:kept"] = float(kept.mean())
        out[f"cascade@{delta}:miss"] = float(correct[kept].mean() < world.target) if kept.any() else 0.0
    return out


def cascade_main(args: argparse.Namespace) -> None:
    """Print the cascade table: the union's misses at delta 0.1 and 0.05."""
    print("| world | users | cascade miss, delta 0.1 (MC SE) | delta 0.05 | kept share, 0.1 |")
    print("|---|---|---|---|---|")
    for w, world in enumerate(WORLDS):
        if args.worlds and w not in args.worlds:
            continue
        for n in args.users:
            rng = np.random.default_rng(args.seed + 1000 * w + n + 7)
            frame = pd.DataFrame([cascade_study(world, n, rng, deltas=(0.1, 0.05)) for _ in range(args.reps)])
            r = frame.mean().to_dict()
            print(f"| {world.name} | {n} | {_cell(r, 'cascade@0.1:miss', args.reps)} | "
                  f"{_cell(r, 'cascade@0.05:miss', args.reps)} | {r['cascade@0.1:kept']:.3f} |", flush=True)


def _mc(p: float, n: float) -> float:
    return math.sqrt(p * (1 - p) / n) if n and not math.isnan(p) else math.nan


def _cell(r: dict[str, float], key: str, reps: int) -> str:
    p = r[key]
    return f"{p:.3f} ({_mc(p, reps):.3f})"


def guarantee_main(args: argparse.Namespace) -> None:
    """Print the guarantee table (markdown), one row per world and size."""
    deltas = (0.1, 0.05)
    print("| world | users | miss, delta 0.1 (MC SE) | miss, delta 0.05 | kept share, 0.1 (possible) | miss vs "
          "population, 0.1 | plain jackknife-t: miss 0.1 / 0.05, kept | floor, users - 1 df: miss 0.1 / 0.05, kept | "
          "floor, Satterthwaite df: miss 0.1 / 0.05, kept | old split: miss (studies) | human rate with audit: "
          "coverage (MC SE), with a CI | of the study's own rate | median width | routed estimate minus the study's "
          "human rate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, world in enumerate(WORLDS):
        if args.worlds and w not in args.worlds:
            continue
        for n in args.users:
            start = time.monotonic()
            r = guarantee_table(world, n, args.reps, args.seed + 1000 * w + n, deltas=deltas, audit=args.audit,
                                split_reps=args.split_reps)
            seconds = time.monotonic() - start
            cov, ncov = r.get("hr:covered", math.nan), int(r.get("hr:covered:n", 0))
            own = r.get("hr:covered_own", math.nan)
            split = f"{r['split:miss']:.3f} ({int(r['split:miss:n'])})" if "split:miss" in r else "not run"
            error = r.get("routed_as_human:error", math.nan)
            print(f"| {world.name} | {n} | {_cell(r, 'ltt@0.1:miss', args.reps)} | "
                  f"{_cell(r, 'ltt@0.05:miss', args.reps)} | {r['ltt@0.1:kept']:.3f} ({r['possible']:.2f}) | "
                  f"{r['ltt@0.1:miss_pop']:.3f} | {r['plain@0.1:miss']:.3f} / {r['plain@0.05:miss']:.3f}, "
                  f"{r['plain@0.1:kept']:.3f} | {r['floor@0.1:miss']:.3f} / {r['floor@0.05:miss']:.3f}, "
                  f"{r['floor@0.1:kept']:.3f} | {r['satt@0.1:miss']:.3f} / {r['satt@0.05:miss']:.3f}, "
                  f"{r['satt@0.1:kept']:.3f} | {split} | "
                  + (f"{cov:.3f} ({_mc(cov, ncov):.3f}), {ncov}/{args.reps} | {own:.3f} | "
                     f"{r['hr:median_width']:.3f}" if ncov else f"no CI (0/{args.reps}) | | ")
                  + f" | {'nothing kept' if math.isnan(error) else f'{error:+.4f}'} |", flush=True)
            print(f"{world.name[:30]} {n}: {seconds:.0f} s", file=sys.stderr, flush=True)


def main() -> None:
    """Print the guarantee table (default) or the combined estimate's coverage table (``--table combined``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=["guarantee", "cascade", "combined"], default="guarantee")
    parser.add_argument("--reps", type=int, default=None, help="studies a cell [guarantee: 300; combined: 400]")
    parser.add_argument("--users", type=int, nargs="+", default=[10, 20, 50])
    parser.add_argument("--human-share", type=float, nargs="+", default=[1.0, 0.4])
    parser.add_argument("--worlds", type=int, nargs="*", default=[], help="indices into WORLDS (default: all)")
    parser.add_argument("--audit", type=int, default=60, help="audit sample size (kept items people label)")
    parser.add_argument("--split-reps", type=int, default=40, help="studies that also run the old split method")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.reps is None:
        args.reps = {"guarantee": 300, "cascade": 200}.get(args.table, 400)
    if args.table == "guarantee":
        guarantee_main(args)
        return
    if args.table == "cascade":
        cascade_main(args)
        return
    print("| people labelled | users | count | coverage | MC SE | with a CI | bias | mean width | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for share in args.human_share:
        for n in args.users:
            start = time.monotonic()
            table = simulate(n, args.reps, args.seed + n, RoutingWorld(human_share=share))
            seconds = time.monotonic() - start
            for name, r in table.items():
                print(f"| {share:.0%} of items | {n} | {name} | {r['coverage']:.3f} | {r['mc_se']:.3f} | "
                      f"{r['with_ci']}/{r['reps']} | {r['bias']:+.4f} | {r['mean_width']:.3f} | {seconds:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
