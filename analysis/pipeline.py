"""The pipeline view: which stage of a personalisation pipeline fails, by human verdict, and what judges would say.

Per stage and per system (extractor, selector, generator), the share of that stage's outputs humans judge failed:

* stage 1 — ``rejected_attributes``: extracted attributes whose human reference is ``bad`` (``unsure`` apart);
* stage 2 — per selector (every LLM relevance labeller used as a selector, every pipeline's own ``system``
  selection): ``irrelevant_selected`` (1 − precision), ``missed_relevant`` (1 − recall), ``over_selection``
  (selected / human-relevant);
* stage 3 — per generator and input condition: ``no_better_than_generic`` and ``worse_than_generic``
  (``human`` null where no human verdict exists).

A stage-3 unit is a user's pair of answers (personalised, generic): two stored pairs holding the same two answers
(Re-Centering's ``recenter-stage2`` task6 pairs are its ``recenter-stage3-conditions`` oracle pairs) are counted
once, under the pair that records its input condition, with the human verdict and one label per judge of either
copy (``counted_once`` says which); counting both would weigh those answers twice and put oracle-input answers among
the unrecorded-condition ones the stage-3 headline reads as the pipeline's.

Beside each human figure, every judge's rate (naive: over every output it labelled) and the rate corrected by the
judge's sensitivity and specificity against humans (Rogan–Gladen, :func:`personagap.analysis.estimates.rogan_gladen`;
at stage 2 within the selected and the left-out attributes apart). Every figure is a smooth function of per-user
additive counts, and every interval is user-clustered (:func:`interval`, the project's one CI rule).

"Which stage fails most" compares a fixed headline per stage, chosen before looking at the figures (never the
worst system): stage 1 every extractor's attributes, stage 2 the pipelines' own selections (every LLM selector
when no pipeline's selection is stored), stage 3 the answers written from the pipeline's input (``pipeline`` or
unrecorded condition); stages are compared by a CI of the difference, paired over the users they share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from personagap.analysis.agreement import (
    Estimate,
    FloatArray,
    Stat,
    ci_list,
    cluster_estimate,
)
from personagap.analysis.arrays import safe_div as _div
from personagap.analysis.ci_rule import MIN_LABELLED_USERS
from personagap.analysis.comparable import SYSTEM_KINDS, judge_display
from personagap.analysis.estimates import rogan_gladen
from personagap.analysis.pipeline_cross import cross_judges
from personagap.analysis.pipeline_records import (
    Cascade,
    Comparison,
    JudgeRate,
    PipelineRow,
    PipelineView,
    Upstream,
)
from personagap.analysis.pipeline_sql import (
    REFERENCE_TABLE,
    SELECTED,
    cascade_items,
    duplicate_pairs,
    reference_table,
    stage1_counts,
    stage2_counts,
    stage3_counts,
)
from personagap.linking import INPUT_CONDITIONS
from personagap.store.aggregates import label_counts

PIPELINE, ORACLE, NO_INPUT = INPUT_CONDITIONS
HEADLINE = {1: "rejected_attributes", 2: "irrelevant_selected", 3: "no_better_than_generic"}
"""The failure share each stage is compared on."""
STAGE_NAMES = {1: "attribute extraction", 2: "relevance selection", 3: "personalised response"}
TARGET_HALFWIDTH = 0.1
"""The half-width a missing human verdict's line sizes its labelling for."""
_JUDGE_COLS = ["j_n", "j_pos", "tp", "fn", "fp", "tn"]


def interval(stat: Stat, per_user: FloatArray, *, level: float = 0.95,
             bounds: tuple[float, float] | None = None) -> Estimate:
    """The user-clustered estimate of ``stat`` of per-user additive counts ``(U, k)``: the project's one CI rule.

    :func:`personagap.analysis.agreement.cluster_estimate`. Every figure of this view rests on human labels (a human
    failure share, a judge's rate corrected with them), so the reports' minimum of labelled users holds here too
    (:data:`~personagap.analysis.ci_rule.MIN_LABELLED_USERS`).
    """
    return cluster_estimate(stat, per_user, level=level, bounds=bounds, min_users=MIN_LABELLED_USERS)


def share(num: int, den: int) -> Stat:
    """Column ``num`` over column ``den`` of the totals."""
    return lambda t: _div(t[..., num], t[..., den])


def corrected_rate(t: FloatArray, at: int = 0) -> FloatArray:
    """Rogan–Gladen rate from the six judge counts starting at column ``at`` (``j_n, j_pos, tp, fn, fp, tn``)."""
    j_n, j_pos, tp, fn, fp, tn = (t[..., at + k] for k in range(6))
    return rogan_gladen(_div(j_pos, j_n), _div(tp, tp + fn), _div(tn, tn + fp))


def difference(first: Stat, second: Stat, width: int) -> Stat:
    """``first`` of the first ``width`` columns minus ``second`` of the rest (two figures over shared users)."""
    return lambda t: first(t[..., :width]) - second(t[..., width:])


@dataclass
class _Cell:
    """One human row's per-user counts of its failure share (numerator, denominator), kept for the verdict."""

    row: PipelineRow
    per_user: pd.DataFrame  # index user_id, columns num, den
    system_kind: str | None = None
    judge_users: dict[str, pd.DataFrame] | None = None  # stage 3: judge -> per-user (positive, labelled)


def _ci(est: Estimate | None, low: float = -math.inf, high: float = math.inf) -> list[float | None]:
    # NaN bounds (no interval: too few users, an undefined figure) are null, in the model as in JSON. A figure that
    # cannot leave [low, high] (a share) has its symmetric interval cut there: it then covers at least as often.
    if est is None:
        return [None, None]
    lo, hi = (_num(float(np.clip(b, low, high))) for b in ci_list(est))
    # A zero-width interval (every user's leave-one-out figure the same) claims a certainty users cannot give.
    return [None, None] if lo is None or hi is None or lo == hi else [lo, hi]


def _share_ci(est: Estimate | None, quantity: str) -> list[float | None]:
    # A share of 0 or 1 gets no interval from the rule itself (it sits on its bound, :func:`_bounds`).
    return _ci(est, *_bounds(quantity))


def _opt(v: Any) -> str | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def _num(v: float) -> float | None:
    return None if math.isnan(v) else float(v)


def _users(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return frame.groupby("user_id", sort=True)[cols].sum().astype(float)


def _estimate(stat: Stat, per_user: pd.DataFrame, bounds: tuple[float, float] | None = None) -> Estimate:
    return interval(stat, per_user.to_numpy(dtype=float), bounds=bounds)


def _bounds(quantity: str) -> tuple[float, float]:
    # A failure share lies in [0, 1]; over-selection (selected / human-relevant) in [0, inf).
    return (0.0, math.inf) if quantity == "over_selection" else (0.0, 1.0)


def _by_keys(judges: pd.DataFrame, keys: list[str]) -> dict[tuple[Any, ...], pd.DataFrame]:
    """Judge counts split once by a row's keys (missing keys as None), so each row finds its judges by lookup."""
    return {tuple(k.values()): rows for k, rows in _groups(judges, keys)} if not judges.empty else {}


def _judges(judges: pd.DataFrame | None, naive: Stat, corrected: Stat, cols: list[str], *,
            clip_one: bool = True) -> list[JudgeRate]:
    """Per judge of a row (its judge counts, or None): naive and corrected rates from its per-user counts ``cols``."""
    if judges is None:
        return []
    out = []
    for (rater, condition), rows in judges.groupby(["rater", "condition"], sort=True):
        per_user = _users(rows, cols)
        has_ref = per_user.filter(regex="^(tp|fn|fp|tn)").to_numpy().sum() > 0
        est = _estimate(corrected, per_user) if has_ref else None
        out.append(JudgeRate(judge=judge_display(str(rater), str(condition)),
                             naive=_num(float(naive(per_user.to_numpy().sum(axis=0)))),
                             corrected=_num(est.value) if est else None,
                             corrected_ci=_ci(est, 0.0, 1.0 if clip_one else math.inf),
                             n_items=int(per_user.filter(regex="^j_n").to_numpy().sum())))
    return out


def _row(stage: int, keys: dict[str, Any], quantity: str, per_user: pd.DataFrame, stat: Stat, *, n_items: int,
         n_human: int, judges: list[JudgeRate]) -> PipelineRow:
    est = _estimate(stat, per_user, _bounds(quantity)) if n_human else None
    return PipelineRow(stage=stage, dataset=str(keys["dataset"]), system=_opt(keys.get("system")),
                       input_condition=_opt(keys.get("input_condition")), quantity=quantity,
                       human=_num(est.value) if est else None, human_ci=_share_ci(est, quantity),
                       n_items=n_items, n_human=n_human, n_users=len(per_user), judges=judges)


def _groups(frame: pd.DataFrame, keys: list[str]) -> Iterable[tuple[dict[str, Any], pd.DataFrame]]:
    for values, rows in frame.groupby(keys, sort=True, dropna=False):
        yield {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in zip(keys, values, strict=True)}, \
            rows


def _stage1(con: duckdb.DuckDBPyConnection) -> list[_Cell]:
    human, judges = stage1_counts(con)
    of = _by_keys(judges, ["dataset", "system"])
    cells = []
    for keys, rows in _groups(human, ["dataset", "system"]):
        pu = _users(rows, ["pos", "n_ref", "unsure", "n_items"])
        n_ref = int(pu["n_ref"].sum())
        if not n_ref:
            continue
        js = _judges(of.get(tuple(keys.values())), share(1, 0), corrected_rate, _JUDGE_COLS)
        row = _row(1, keys, "rejected_attributes", pu[["pos", "n_ref"]], share(0, 1), n_items=int(pu["n_items"].sum()),
                   n_human=n_ref, judges=js)
        unsure = _estimate(share(0, 1), pu[["unsure", "n_ref"]])
        row.unsure, row.unsure_ci = _num(unsure.value), _share_ci(unsure, "unsure")
        cells.append(_Cell(row, pu[["pos", "n_ref"]].set_axis(["num", "den"], axis=1)))
    return cells


_G1, _G0 = 0, 6  # column offsets of the selected / left-out groups' judge counts


def s2_naive(quantity: str) -> Stat:
    """A judge's own stage-2 rate of ``quantity`` from its counts in the selected and the left-out attributes."""
    def stat(t: FloatArray) -> FloatArray:
        n1, y1, y0 = t[..., _G1], t[..., _G1 + 1], t[..., _G0 + 1]  # j_n and j_pos ("relevant") per group
        return {"irrelevant_selected": 1.0 - _div(y1, n1), "missed_relevant": _div(y0, y1 + y0),
                "over_selection": _div(n1, y1 + y0)}[quantity]
    return stat


def s2_corrected(quantity: str) -> Stat:
    """The stage-2 rate of ``quantity`` corrected by the judge's errors against humans (Rogan–Gladen per group)."""
    # Relevant shares among the selected (p1) and the left-out (p0) attributes, each corrected by the judge's own
    # sensitivity and specificity in that group; the human-relevant count is p1 n1 + p0 n0.
    def stat(t: FloatArray) -> FloatArray:
        p1, p0, n1, n0 = corrected_rate(t, _G1), corrected_rate(t, _G0), t[..., _G1], t[..., _G0]
        relevant = p1 * n1 + p0 * n0
        return {"irrelevant_selected": 1.0 - p1, "missed_relevant": _div(p0 * n0, relevant),
                "over_selection": _div(n1, relevant)}[quantity]
    return stat


_S2 = {  # quantity -> (numerator columns, denominator columns) of the selector's counts against humans
    "irrelevant_selected": (["fp"], ["tp", "fp"]),
    "missed_relevant": (["fn"], ["tp", "fn"]),
    "over_selection": (["tp", "fp"], ["tp", "fn"]),
}


def _stage2(con: duckdb.DuckDBPyConnection, counts: pd.DataFrame) -> list[_Cell]:
    sel, judges = stage2_counts(con, counts)
    # An LLM selector is judged by every other judge, as a pipeline's own selection is.
    llm = sel.loc[sel["system_kind"] == "llm", ["dataset", "system"]].rename(columns={"system": "rater"})
    pool = counts.loc[counts["stage"] == "relevance", ["rater", "condition"]]
    cross = cross_judges(con, llm, pool, reference=REFERENCE_TABLE, selected=SELECTED)
    judges = pd.concat([f for f in (judges, cross) if not f.empty], ignore_index=True) if not cross.empty else judges
    cols = [f"{c}_g1" for c in _JUDGE_COLS] + [f"{c}_g0" for c in _JUDGE_COLS]
    of = _by_keys(judges, ["dataset", "system"])
    cells = []
    counts = ["tp", "fp", "fn", "tn"]
    for keys, rows in _groups(sel, ["dataset", "system", "system_kind"]):
        pu = _users(rows, [*counts, "n_items", "n_linked", *(f"{c}_ok" for c in counts)])
        if not pu[counts].to_numpy().sum():
            continue
        kind = keys.pop("system_kind")
        # All the selector's attributes, then (an oracle input for stage 2) only those humans accepted at stage 1.
        inputs = [(None, "")] + ([(ORACLE, "_ok")] if pu["n_linked"].sum() else [])
        for condition, suffix in inputs:
            mine = pu[[f"{c}{suffix}" for c in counts]].set_axis(counts, axis=1)
            n_human = int(mine[counts].to_numpy().sum())
            for quantity, (num, den) in _S2.items():
                frac = pd.DataFrame({"num": mine[num].sum(axis=1), "den": mine[den].sum(axis=1)})
                js = [] if condition else _judges(of.get(tuple(keys.values())), s2_naive(quantity),
                                                  s2_corrected(quantity), cols, clip_one=quantity != "over_selection")
                row = _row(2, keys | {"input_condition": condition}, quantity, frac, share(0, 1),
                           n_items=int(pu["n_linked" if condition else "n_items"].sum()), n_human=n_human, judges=js)
                row.system_kind = str(kind)
                cells.append(_Cell(row, frac, str(kind)))
    return cells


def _stage3(con: duckdb.DuckDBPyConnection) -> list[_Cell]:
    human, judges = stage3_counts(con)
    of = _by_keys(judges, ["dataset", "system", "input_condition"])
    cells = []
    for keys, rows in _groups(human, ["dataset", "system", "input_condition"]):
        pu = _users(rows, ["no_better", "worse", "n_ref", "n_items"])
        for quantity, col, suffix in (("no_better_than_generic", "no_better", "_nb"), ("worse_than_generic", "worse",
                                                                                       "_w")):
            cols = [c + suffix for c in _JUDGE_COLS]
            mine = of.get(tuple(keys.values()))
            js = _judges(mine, share(1, 0), corrected_rate, cols)
            frac = pu[[col, "n_ref"]].set_axis(["num", "den"], axis=1)
            row = _row(3, keys, quantity, frac, share(0, 1), n_items=int(pu["n_items"].sum()),
                       n_human=int(pu["n_ref"].sum()), judges=js)
            naive = {} if mine is None else {
                judge_display(str(r), str(c)): _users(g, [f"j_pos{suffix}", f"j_n{suffix}"]).set_axis(
                    ["num", "den"], axis=1) for (r, c), g in mine.groupby(["rater", "condition"], sort=True)}
            cells.append(_Cell(row, frac, judge_users=naive))
    return cells


def labels_needed(halfwidth: float = TARGET_HALFWIDTH, level: float = 0.95) -> int:
    """Human verdicts for a share's CI of half-width ``halfwidth`` at worst (share 0.5, one verdict per user).

    ``n = z² · 0.25 / h²``, rounded up: the normal interval of a proportion, at the share where it is widest.
    """
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return math.ceil(z * z * 0.25 / (halfwidth * halfwidth))


def _headline(cells: list[_Cell], stage: int) -> pd.DataFrame | None:
    """The stage's headline failure share's per-user counts (num, den), pooled as the module docstring says."""
    mine = [c for c in cells if c.row.stage == stage and c.row.quantity == HEADLINE[stage] and c.row.n_human
            and (stage == 3 or c.row.input_condition is None)]
    own = [c for c in mine if c.system_kind in SYSTEM_KINDS and c.per_user["den"].sum() > 0]
    if stage == 2 and own:
        mine = own
    if stage == 3:
        mine = [c for c in mine if c.row.input_condition not in (ORACLE, NO_INPUT)]
    pooled = pd.concat([c.per_user for c in mine]).groupby(level=0).sum() if mine else None
    return pooled if pooled is not None and pooled["den"].sum() > 0 else None


def _compare(a: pd.DataFrame, b: pd.DataFrame, first: int, second: int) -> Comparison:
    est = _paired(a, b)
    return Comparison(first=first, second=second, difference=_num(est.value), ci=_ci(est),
                      n_users=len(a.index.union(b.index)), shared_users=len(a.index.intersection(b.index)))


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.0f}%"


def _ci_pct(ci: list[float | None]) -> str:
    lo, hi = ci
    return "(no CI)" if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) else \
        f"[{100 * lo:.0f}, {100 * hi:.0f}]"


def _verdict(cells: list[_Cell]) -> tuple[str, int | None, list[Comparison]]:
    heads = {s: h for s in (1, 2, 3) if (h := _headline(cells, s)) is not None}
    quiet = [f"stage {s} ({STAGE_NAMES[s]})" for s in (1, 2, 3) if s not in heads]
    rates = {s: (h["num"].sum() / h["den"].sum()) for s, h in heads.items()}
    if not heads:
        return "No stage has a human verdict yet: nothing says which stage fails.", None, []
    if len(heads) == 1:
        (s, h), = heads.items()
        est = _estimate(share(0, 1), h)
        return (f"Only stage {s} ({STAGE_NAMES[s]}) has a human verdict: {_pct(est.value)} of its outputs fail "
                f"{_ci_pct(_ci(est))}, {len(h)} users. Cannot tell which stage fails most: no human verdict on "
                f"{' or '.join(quiet)}."), None, []
    comps = [_compare(heads[a], heads[b], a, b) for a in heads for b in heads if a < b]

    def beats(s: int, c: Comparison) -> bool:
        lo, hi = c.ci
        if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
            return False
        return lo > 0 if c.first == s else hi < 0

    worst = next((s for s in heads if all(beats(s, c) for c in comps if s in (c.first, c.second))), None)
    shares = "; ".join(f"stage {s} {_pct(r)}" for s, r in rates.items())
    absent = f" No human verdict on {' or '.join(quiet)}." if quiet else ""
    if worst is None:
        open_ = [c for c in comps if not (beats(c.first, c) or beats(c.second, c))]
        if all(c.n_users < MIN_LABELLED_USERS for c in open_):
            users = max(c.n_users for c in open_)
            return (f"Cannot tell which stage fails most by human verdict ({shares}): too few users for a CI of "
                    f"their differences ({users} users; {MIN_LABELLED_USERS} needed).{absent}"), None, comps
        why = "; ".join(f"stage {c.first} − stage {c.second} = {_signed(c.difference)} {_ci_pct(c.ci)}"
                        for c in open_)
        return (f"Cannot tell which stage fails most by human verdict ({shares}): {why}: "
                f"{'each CI includes' if len(open_) > 1 else 'the CI includes'} 0. More human verdicts on these "
                f"stages would tell.{absent}"), None, comps
    others = [c for c in comps if worst in (c.first, c.second)]
    diffs = "; ".join(f"vs stage {c.second if c.first == worst else c.first}: "
                      f"{_signed(c.difference if c.first == worst else -(c.difference or 0.0))} "
                      f"{_ci_pct(c.ci if c.first == worst else [-(c.ci[1] or 0.0), -(c.ci[0] or 0.0)])}, "
                      f"{c.shared_users} users shared" for c in others)
    return (f"Stage {worst} ({STAGE_NAMES[worst]}) fails most by human verdict: {_pct(rates[worst])} of its outputs "
            f"fail ({shares}; {diffs}).{absent}"), worst, comps


def _signed(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:+.0f} pts"


def _paired(first: pd.DataFrame, second: pd.DataFrame) -> Estimate:
    """``num/den`` of ``first`` minus that of ``second``, paired over the users they share (union of users)."""
    both = pd.concat([first, second.add_suffix("_b")], axis=1).fillna(0.0)
    return _estimate(difference(share(0, 1), share(0, 1), 2), both[["num", "den", "num_b", "den_b"]])


def _upstream(cells: list[_Cell]) -> list[Upstream]:
    out = []
    rows = {(c.row.stage, c.row.dataset, c.row.system, c.row.input_condition, c.row.quantity): c for c in cells}
    for (stage, ds, system, cond, quantity), pipe in sorted(rows.items(), key=lambda kv: str(kv[0])):
        # The pipeline's own input: stage 3's answers written from its selection; stage 2's every extracted attribute.
        oracle = rows.get((stage, ds, system, ORACLE, quantity))
        if cond != (PIPELINE if stage == 3 else None) or oracle is None:
            continue
        human = _paired(pipe.per_user, oracle.per_user) if pipe.row.n_human and oracle.row.n_human else None
        diffs = []
        for name, mine in sorted((pipe.judge_users or {}).items()):
            other = (oracle.judge_users or {}).get(name)
            if other is not None:
                est = _paired(mine, other)
                diffs.append({"judge": name, "naive_difference": _num(est.value), "naive_difference_ci": _ci(est),
                              "n_users": est.n_clusters})
        users = pipe.per_user.index.union(oracle.per_user.index)
        out.append(Upstream(stage=stage, dataset=ds, system=system, quantity=quantity,
                            human=_num(human.value) if human else None, human_ci=_ci(human), n_users=len(users),
                            judges=diffs))
    return out


def _cascade(con: duckdb.DuckDBPyConnection) -> tuple[list[Cascade], list[dict[str, Any]]]:
    items = cascade_items(con)
    if items.empty:
        return [], []
    items["flagged"] = items["rejected"].map(len).gt(0) | items["irrelevant"].map(len).gt(0)
    items["failure"] = items["human"].notna() & (items["human"] != items["pers"])
    out = []
    for keys, rows in _groups(items, ["dataset", "system", "input_condition"]):
        out.append(Cascade(dataset=str(keys["dataset"]), system=_opt(keys["system"]),
                           input_condition=_opt(keys["input_condition"]), n_linked=len(rows),
                           n_flagged=int(rows["flagged"].sum()), n_rejected=int(rows["rejected"].map(len).gt(0).sum()),
                           n_irrelevant=int(rows["irrelevant"].map(len).gt(0).sum()),
                           n_failures=int(rows["failure"].sum()),
                           n_failures_traced=int((rows["failure"] & rows["flagged"]).sum())))
    flagged = [{"item_id": str(r.item_id), "dataset": str(r.dataset), "system": _opt(r.system),
                "input_condition": _opt(r.input_condition), "user_id": str(r.user_id),
                "rejected": [str(a) for a in r.rejected], "irrelevant": [str(a) for a in r.irrelevant],
                "rejected_text": [str(a) for a in r.rejected_text],
                "irrelevant_text": [str(a) for a in r.irrelevant_text]}
               for r in items[items["flagged"]].itertuples()]
    return out, flagged


_UNITS = {1: ("extracted attributes", "attributes"), 2: ("selections", "attributes"), 3: ("answers", "pairs")}


def _missing(rows: list[PipelineRow]) -> list[str]:
    k = labels_needed()
    out = []
    for r in rows:
        if r.n_human or r.quantity != HEADLINE[r.stage]:
            continue
        what, unit = _UNITS[r.stage]
        where = " · ".join(v for v in (r.dataset, r.system or "unnamed", r.input_condition) if v)
        out.append(f"{where}: no human verdict on these {r.n_items:,} {what}: label {min(k, r.n_items):,} {unit} on "
                   f"the Annotate page for a ±{TARGET_HALFWIDTH:g} estimate")
    return out


def _counted_once(dups: pd.DataFrame) -> list[str]:
    # The same answers stored twice (Re-Centering's task6 pairs are its oracle-condition pairs): one unit each.
    return [f"{r.dataset} · {r.system or 'unnamed'}: {r.n:,} pairs hold the same two answers as "
            f"{r.unit_dataset} · {r.unit_system or 'unnamed'} · {r.unit_condition or 'input not recorded'} pairs: "
            "counted once, there" for r in dups.itertuples()]


def pipeline_view(con: duckdb.DuckDBPyConnection, judge_counts: pd.DataFrame | None = None) -> PipelineView:
    """The pipeline view of a store: rows per stage and system, the verdict, oracle differences and the cascade.

    Args:
        con: An open store connection (read-only is enough).
        judge_counts: The judge frame of :func:`personagap.store.aggregates.label_counts` (blind reference, every
            stage or at least ``relevance``) when the caller has it (``diagnose`` and the dashboard count it once
            for the diagnosis too); None: counted here for stage 2.
    """
    if judge_counts is None:
        judge_counts = label_counts(con, "relevance", "blind")[0]
    with reference_table(con):
        cells = _stage1(con) + _stage2(con, judge_counts) + _stage3(con)
        cascade, flagged = _cascade(con)
        once = _counted_once(duplicate_pairs(con))
    verdict, worst, comps = _verdict(cells)
    rows = [c.row for c in cells]
    return PipelineView(rows=rows, verdict=verdict, worst_stage=worst, comparisons=comps,
                        upstream=_upstream(cells), cascade=cascade, flagged=flagged,
                        missing=_missing(rows), counted_once=once)


def pipeline_db(db: str | Path) -> PipelineView:
    """:func:`pipeline_view` of a database file, opened read-only."""
    from personagap.store import opened

    with opened(db, read_only=True) as con:
        return pipeline_view(con)
