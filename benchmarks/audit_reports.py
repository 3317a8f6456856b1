"""End-to-end audit of the 95% intervals that `personagap report relevance|response --json` prints.

An independent check, written without the calibration harness's generators (benchmarks/calibration*.py):
three worlds of its own, each study imported through the public API (`personagap.api.import_labels`) into a
fresh DuckDB file and reported by the CLI (`personagap report relevance|response --json --db FILE`), exactly
as a user would. For every judge-row figure the script records whether the printed interval holds the truth.

Worlds (one blind human and one LLM judge per item; per-user prevalence and judge accuracy vary):
  unequal_like  yes/no relevance; 85% of users have 1 + Poisson(3) items, 15% are heavy users with 40-200
                items, drawn from the SAME per-user distribution as the rest (heavy users like the rest).
  tiny_users    yes/no relevance; 1-3 items per user.
  ab_ties       A/B/tie pairs (~40% human ties), 1 + Poisson(Exp(mean 5)) items per user; the judge errs
                towards "tie" on A/B items and towards "A" on ties.

Truth: the same figure on the pooled expected confusion table of 1,000,000 users of the world (item-weighted:
sum of n_u * P_u over users / sum of n_u), and for `by_weight.users` the user-weighted truth (the mean of the
per-user proportion tables P_u).

Run:  nice -n 10 python benchmarks/audit_reports.py [--studies 150] [--workers 2]
Writes benchmarks/audit_reports_table.md; raw per-study records go to /tmp/audit_reports_raw.jsonl.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "benchmarks" / "audit_reports_table.md"
RAW = Path("/tmp/audit_reports_raw.jsonl")
NS = (20, 50)
WORLDS = ("unequal_like", "tiny_users", "ab_ties")
POP = 1_000_000
HEAVY_MIN = 40  # items: a user with at least this many is "heavy" in unequal_like

# ---------------------------------------------------------------------------------------------------------------
# Worlds: per-user item counts and per-user expected confusion tables P_u (rows = human, cols = judge)
# ---------------------------------------------------------------------------------------------------------------


def categories(world: str) -> list[str]:
    return ["A", "B", "tie"] if world == "ab_ties" else ["no", "yes"]


def draw_users(world: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Item counts (n,) and expected confusion tables (n, K, K) of ``n`` users of ``world``."""
    if world in ("unequal_like", "tiny_users"):
        if world == "unequal_like":
            heavy = rng.random(n) < 0.15
            counts = np.where(heavy, rng.integers(HEAVY_MIN, 201, n), 1 + rng.poisson(3.0, n))
            p, se, sp = rng.beta(2, 5, n), rng.beta(7, 2, n), rng.beta(12, 2, n)
        else:
            counts = rng.integers(1, 4, n)
            p, se, sp = rng.beta(2, 5, n), rng.beta(6, 2, n), rng.beta(9, 2, n)
        tables = np.empty((n, 2, 2))
        tables[:, 0, 0] = (1 - p) * sp          # human no, judge no
        tables[:, 0, 1] = (1 - p) * (1 - sp)    # human no, judge yes
        tables[:, 1, 0] = p * (1 - se)          # human yes, judge no
        tables[:, 1, 1] = p * se                # human yes, judge yes
        return counts, tables
    if world == "ab_ties":
        counts = 1 + rng.poisson(rng.exponential(5.0, n))
        human = rng.dirichlet(4 * np.array([0.3, 0.3, 0.4]), n)          # P(A), P(B), P(tie)
        acc = rng.beta(5, 2.5, n)
        err = np.array([[0.0, 0.35, 0.65],   # human A: judge B or tie when wrong
                        [0.35, 0.0, 0.65],   # human B
                        [0.6, 0.4, 0.0]])    # human tie: judge A (position bias) or B
        cond = acc[:, None, None] * np.eye(3)[None] + (1 - acc)[:, None, None] * err[None]
        return counts, human[:, :, None] * cond
    raise ValueError(world)


def truth_tables(world: str, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    counts, tables = draw_users(world, POP, rng)
    item_w = (counts[:, None, None] * tables).sum(0) / counts.sum()
    user_w = tables.mean(0)
    return item_w, user_w


# ---------------------------------------------------------------------------------------------------------------
# Figures on a (K, K) table (counts or proportions); rows = human reference, cols = judge
# ---------------------------------------------------------------------------------------------------------------


def figures(t: np.ndarray, binary: bool) -> dict[str, float]:
    t = np.asarray(t, float)
    t = t / t.sum()
    k = t.shape[0]
    rows, cols, pa = t.sum(1), t.sum(0), float(np.trace(t))
    pe = float(rows @ cols)
    out: dict[str, float] = {"accuracy": pa}
    out["kappa"] = (pa - pe) / (1 - pe) if pe < 1 else math.nan
    pi = (rows + cols) / 2
    pe1 = float((pi * (1 - pi)).sum() / (k - 1))
    out["ac1"] = (pa - pe1) / (1 - pe1) if pe1 < 1 else math.nan
    out["pabak"] = (k * pa - 1) / (k - 1)
    den = (1 - float(rows @ rows)) * (1 - float(cols @ cols))
    out["mcc"] = (pa - pe) / math.sqrt(den) if den > 0 else math.nan
    out["balanced_accuracy"] = float(np.mean(np.diag(t) / rows)) if (rows > 0).all() else math.nan
    if binary:  # index 1 = "yes"
        tp, fp, fn = t[1, 1], t[0, 1], t[1, 0]
        out["precision"] = tp / (tp + fp) if tp + fp > 0 else math.nan
        out["recall"] = tp / (tp + fn) if tp + fn > 0 else math.nan
        out["f1"] = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn > 0 else math.nan
        out["over_selection"] = cols[1] / rows[1] if rows[1] > 0 else math.nan
    return out


ITEM_FIGS_BIN = ("kappa", "accuracy", "precision", "recall", "f1", "balanced_accuracy", "mcc", "ac1", "pabak",
                 "over_selection")
ITEM_FIGS_AB = ("kappa", "accuracy", "balanced_accuracy", "mcc", "ac1", "pabak")
USER_FIGS = ("kappa", "accuracy")

# ---------------------------------------------------------------------------------------------------------------
# One study: simulate, import through the API, report through the CLI
# ---------------------------------------------------------------------------------------------------------------


def simulate(world: str, n_users: int, seed: int) -> tuple[pd.DataFrame, np.ndarray, dict]:
    rng = np.random.default_rng([WORLDS.index(world), n_users, seed])
    cats = categories(world)
    k = len(cats)
    counts, tables = draw_users(world, n_users, rng)
    rows, per_user = [], np.zeros((n_users, k, k))
    for u in range(n_users):
        cells = rng.choice(k * k, size=counts[u], p=tables[u].ravel() / tables[u].sum())
        for i, c in enumerate(cells):
            h, j = divmod(int(c), k)
            per_user[u, h, j] += 1
            iid = f"u{u:03d}/i{i:03d}"
            rows.append({"item_id": iid, "user_id": f"u{u:03d}", "rater": "ann-1", "rater_kind": "human",
                         "label": cats[h]})
            rows.append({"item_id": iid, "user_id": f"u{u:03d}", "rater": "judge-x", "rater_kind": "llm",
                         "label": cats[j]})
    meta = {"n_items": int(counts.sum()), "n_heavy": int((counts >= HEAVY_MIN).sum()),
            "kish_eff": float(counts.sum() ** 2 / (counts ** 2).sum() / n_users)}
    return pd.DataFrame(rows), per_user, meta


def as_pair(v) -> tuple[float, float] | None:
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        return None
    lo, hi = v
    if lo is None or hi is None:
        return None
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return lo, hi


def num(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def scan_zero_width(obj, path="") -> list[str]:
    """Every printed 2-element interval (key ending in 'ci') whose width is zero, anywhere in the row."""
    bad = []
    if isinstance(obj, dict):
        for key, val in obj.items():
            p = f"{path}.{key}" if path else key
            if (key.endswith("_ci") or key == "ci") and as_pair(val) is not None:
                lo, hi = as_pair(val)
                if not hi - lo > 1e-12:
                    bad.append(f"{p}={val}")
            else:
                bad.extend(scan_zero_width(val, p))
    elif isinstance(obj, list):
        for i, val in enumerate(obj):
            bad.extend(scan_zero_width(val, f"{path}[{i}]"))
    return bad


def run_study(task: tuple[str, int, int]) -> dict:
    world, n_users, seed = task
    from personagap.api import import_labels  # in the worker: the public API

    cats = categories(world)
    binary = world != "ab_ties"
    df, per_user, meta = simulate(world, n_users, seed)
    stage, command = ("response", "response") if world == "ab_ties" else ("relevance", "relevance")
    rec: dict = {"world": world, "n_users": n_users, "seed": seed, **meta}
    with tempfile.TemporaryDirectory(prefix="pg_audit_") as tmp:
        db = os.path.join(tmp, "study.duckdb")
        import_labels(df, stage=stage, dataset="audit", db=db,
                      categories=None if world == "ab_ties" else cats)
        t0 = time.time()
        proc = subprocess.run(["personagap", "report", command, "--json", "--db", db],
                              capture_output=True, text=True, check=False)
        rec["report_seconds"] = time.time() - t0
    if proc.returncode != 0:
        rec["error"] = proc.stderr[-2000:]
        return rec
    report = json.loads(proc.stdout)
    rows = [r for r in report.get("judges", []) if r.get("judge") == "judge-x" and r.get("condition", "") == ""]
    rec["n_judge_rows"] = len(report.get("judges", []))
    rec["missing_estimand"] = sum(1 for r in report.get("judges", []) if not r.get("estimand"))
    if len(rows) != 1:
        rec["error"] = f"{len(rows)} rows for judge-x"
        return rec
    row = rows[0]
    rec["estimand"] = row.get("estimand")
    rec["row_n_users"] = row.get("n_users")
    rec["ci_notes"] = row.get("ci_notes") or {}
    rec["undefined_resamples"] = row.get("undefined_resamples")
    rec["zero_width"] = scan_zero_width(row)
    # my figures on the study's own counts: the printed points must equal them
    sample_items = figures(per_user.sum(0), binary)
    props = per_user / per_user.sum((1, 2), keepdims=True)
    sample_users = figures(props.mean(0), binary)
    figs = {}
    names = ITEM_FIGS_BIN if binary else ITEM_FIGS_AB
    for name in names:
        ci_key = f"{name}_ci"
        ci_raw = row.get(ci_key, "ABSENT")
        source = "row"
        if ci_raw == "ABSENT":  # bounds not on the row itself: fall back to by_weight.items
            ci_raw = (row.get("by_weight") or {}).get("items", {}).get(ci_key, "ABSENT")
            source = "by_weight.items" if ci_raw != "ABSENT" else "absent"
        point = num(row.get(name))
        figs[f"items:{name}"] = {"point": point, "ci": as_pair(ci_raw), "source": source,
                                 "mine": sample_items.get(name, math.nan)}
    byw = (row.get("by_weight") or {}).get("users") or {}
    for name in USER_FIGS:
        figs[f"users:{name}"] = {"point": num(byw.get(name)), "ci": as_pair(byw.get(f"{name}_ci")),
                                 "source": "by_weight.users", "mine": sample_users.get(name, math.nan)}
    # by_weight.items must repeat the row's own figures
    byi = (row.get("by_weight") or {}).get("items") or {}
    rec["by_weight_items_mismatch"] = [n for n in USER_FIGS
                                       if not _close(num(byi.get(n)), num(row.get(n)))
                                       or as_pair(byi.get(f"{n}_ci"))
                                       != as_pair(row.get(f"{n}_ci", byi.get(f"{n}_ci")))]
    rec["figs"] = figs
    return rec


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-9


# ---------------------------------------------------------------------------------------------------------------
# Aggregate
# ---------------------------------------------------------------------------------------------------------------


def aggregate(records: list[dict], truths: dict, studies: int, wall: float) -> str:
    lines = ["# Audit: coverage of the 95% intervals `personagap report --json` prints (end to end)", "",
             "Generated by `benchmarks/audit_reports.py` (independent generators; studies imported with "
             "`personagap.api.import_labels`, reported with `personagap report relevance|response --json`). "
             f"{studies} studies a cell; truth from {POP:,} users a world (item-weighted pooled table; "
             "`users:` rows = `by_weight.users`, truth = mean of per-user proportion tables). "
             "Coverage is among studies whose interval was printed; MC SE = sqrt(c(1-c)/printed). "
             "FLAG: coverage + 1.645 MC SE < 0.93.", "",
             f"Simulation wall time {wall / 60:.1f} min (2 processes at most, under nice).", ""]
    lines += ["## Truths", "", "| world | figure | item-weighted | user-weighted |", "|---|---|---|---|"]
    for world in WORLDS:
        ti, tu = truths[world]
        for name in (ITEM_FIGS_BIN if world != "ab_ties" else ITEM_FIGS_AB):
            lines.append(f"| {world} | {name} | {ti[name]:.4f} | {tu[name]:.4f} |")
    lines += ["", "## Coverage", "",
              "| world | N | figure | printed | coverage | MC SE | median width | where the bounds were read | flag |",
              "|---|---|---|---|---|---|---|---|---|"]
    flags = []
    cells = defaultdict(list)
    for r in records:
        if "figs" in r:
            cells[(r["world"], r["n_users"])].append(r)
    point_mismatch = defaultdict(int)
    for world in WORLDS:
        ti, tu = truths[world]
        for n in NS:
            recs = cells[(world, n)]
            if not recs:
                continue
            for key in recs[0]["figs"]:
                weight, name = key.split(":")
                truth = (ti if weight == "items" else tu)[name]
                printed = [r["figs"][key] for r in recs if r["figs"][key]["ci"] is not None]
                for r in recs:
                    f = r["figs"][key]
                    if not _close(f["point"], f["mine"]):
                        point_mismatch[(world, n, key)] += 1
                sources = sorted({r["figs"][key]["source"] for r in recs})
                if not printed:
                    lines.append(f"| {world} | {n} | {key} | 0/{len(recs)} | - | - | - | {', '.join(sources)} | |")
                    continue
                hit = np.array([f["ci"][0] <= truth <= f["ci"][1] for f in printed], float)
                c = hit.mean()
                se = math.sqrt(max(c * (1 - c), 1e-12) / len(hit))
                width = float(np.median([f["ci"][1] - f["ci"][0] for f in printed]))
                flag = "**FLAG**" if c + 1.645 * se < 0.93 else ""
                if flag:
                    flags.append((world, n, key, c, se, len(printed), len(recs)))
                lines.append(f"| {world} | {n} | {key} | {len(printed)}/{len(recs)} | {c:.3f} | {se:.3f} | "
                             f"{width:.3f} | {', '.join(sources)} | {flag} |")
    # world a: coverage by whether the study holds heavy users
    lines += ["", "## unequal_like: coverage of item-weighted kappa by heavy users in the study", "",
              "| N | heavy users in study | studies | printed | coverage |", "|---|---|---|---|---|"]
    for n in NS:
        recs = cells[("unequal_like", n)]
        ti, _ = truths["unequal_like"]
        for lo, hi, lab in ((0, 0, "0"), (1, 2, "1-2"), (3, 10**6, ">=3")):
            sub = [r for r in recs if lo <= r["n_heavy"] <= hi]
            pr = [r["figs"]["items:kappa"]["ci"] for r in sub if r["figs"]["items:kappa"]["ci"] is not None]
            cov = f"{np.mean([a <= ti['kappa'] <= b for a, b in pr]):.3f}" if pr else "-"
            lines.append(f"| {n} | {lab} | {len(sub)} | {len(pr)} | {cov} |")
    # checks
    lines += ["", "## Checks", ""]
    errors = [r for r in records if "error" in r]
    lines.append(f"- studies run: {len(records)}; failed (import/report error or no judge row): {len(errors)}")
    for r in errors[:5]:
        lines.append(f"  - {r['world']} N={r['n_users']} seed={r['seed']}: {r['error'][:300]!r}")
    zw = [(r["world"], r["n_users"], r["seed"], z) for r in records for z in r.get("zero_width", [])]
    lines.append(f"- zero-width printed intervals (any `*_ci`/`ci` in the judge row): {len(zw)}")
    for z in zw[:10]:
        lines.append(f"  - {z}")
    no_est = sum(r.get("missing_estimand", 0) for r in records)
    n_rows = sum(r.get("n_judge_rows", 0) for r in records)
    lines.append(f"- judge rows without `estimand`: {no_est} of {n_rows}")
    # withheld intervals at >= 10 users: need a reason
    withheld = defaultdict(int)
    withheld_points = defaultdict(list)
    unexplained = defaultdict(int)
    examples = {}
    for r in records:
        if "figs" not in r:
            continue
        for key, f in r["figs"].items():
            weight, name = key.split(":")
            if f["ci"] is None and math.isfinite(f["point"]) and r["n_users"] >= 10 and f["source"] != "absent":
                withheld[(r["world"], r["n_users"], key)] += 1
                withheld_points[(r["world"], r["n_users"], key)].append(f["point"])
                has_reason = (name in r["ci_notes"]) or (name == "kappa" and (r.get("undefined_resamples") or 0) > 0)
                if not has_reason:
                    unexplained[(r["world"], r["n_users"], key)] += 1
                    examples.setdefault(key, (r["world"], r["n_users"], r["seed"], r["ci_notes"],
                                              r.get("undefined_resamples")))
    lines.append(f"- intervals withheld for a defined figure at >= 10 users: {sum(withheld.values())}; "
                 f"without a reason on the row (ci_notes entry, or kappa's undefined_resamples > 0): "
                 f"{sum(unexplained.values())}")
    for k_, v in sorted(withheld.items()):
        pts = withheld_points[k_]
        lines.append(f"  - {k_[0]} N={k_[1]} {k_[2]}: withheld {v}, unexplained {unexplained.get(k_, 0)}; "
                     f"points {min(pts):.3f}-{max(pts):.3f}, {sum(p < 1 for p in pts)} of them inside the range")
    for key, ex in examples.items():
        lines.append(f"  - example without a reason, {key}: world={ex[0]} N={ex[1]} seed={ex[2]} "
                     f"ci_notes={ex[3]} undefined_resamples={ex[4]}")
    notes = defaultdict(int)
    for r in records:
        for fig, why in (r.get("ci_notes") or {}).items():
            notes[(fig, why[:90])] += 1
    if notes:
        lines.append("- ci_notes seen (figure: reason, studies):")
        for (fig, why), v in sorted(notes.items(), key=lambda kv: -kv[1])[:15]:
            lines.append(f"  - {fig}: {why!r} x{v}")
    absent = sorted({(r["world"], k) for r in records if "figs" in r for k, f in r["figs"].items()
                     if f["source"] != "row" and not k.startswith("users:")})
    lines.append(f"- item-weighted figures whose `*_ci` is not on the judge row itself: "
                 f"{', '.join(f'{w}:{k}' for w, k in absent) or 'none'}")
    mism = sum(len(r.get("by_weight_items_mismatch", [])) for r in records)
    lines.append(f"- by_weight.items differing from the row's own kappa/accuracy: {mism}")
    lines.append(f"- printed points differing from the same figure on the study's counts (this script's "
                 f"formulas): {sum(point_mismatch.values())}")
    for k_, v in sorted(point_mismatch.items()):
        lines.append(f"  - {k_}: {v}")
    secs = [r["report_seconds"] for r in records if "report_seconds" in r]
    lines.append(f"- median report call: {np.median(secs):.2f} s")
    lines += ["", "## Flagged cells", ""]
    if not flags:
        lines.append("None.")
    for world, n, key, c, se, p, tot in flags:
        lines.append(f"- {world}, N={n}, {key}: coverage {c:.3f} +- {se:.3f} ({p}/{tot} printed)")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--studies", type=int, default=150)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reuse", action="store_true", help="aggregate the raw records of an earlier run")
    args = ap.parse_args()
    t0 = time.time()
    truths = {}
    for world in WORLDS:
        ti, tu = truth_tables(world)
        truths[world] = (figures(ti, world != "ab_ties"), figures(tu, world != "ab_ties"))
    meta = RAW.with_suffix(".meta.json")
    if args.reuse:
        records = [json.loads(line) for line in RAW.read_text().splitlines()]
        wall = json.loads(meta.read_text())["wall"] if meta.exists() else math.nan
    else:
        tasks = [(w, n, s) for w in WORLDS for n in NS for s in range(args.studies)]
        records = []
        with Pool(min(args.workers, 2)) as pool, RAW.open("w") as fh:
            for i, rec in enumerate(pool.imap_unordered(run_study, tasks, chunksize=4)):
                records.append(rec)
                fh.write(json.dumps(rec, default=str) + "\n")
                if (i + 1) % 50 == 0:
                    print(f"{i + 1}/{len(tasks)} studies, {(time.time() - t0) / 60:.1f} min", file=sys.stderr,
                          flush=True)
        wall = time.time() - t0
        meta.write_text(json.dumps({"wall": wall}))
    TABLE.write_text(aggregate(records, truths, args.studies, wall))
    print(TABLE.read_text())


if __name__ == "__main__":
    main()
