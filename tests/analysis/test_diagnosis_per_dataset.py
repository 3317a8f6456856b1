"""Issue 31: each dataset's best judge beside its own ceiling, every figure of the dataset's one headline kind.

The defect: on a stage with an ordinal dataset (the only one with a ceiling) and nominal ones, the Overview card read
"Best judge: kappa vs humans 0.10" (unweighted), "Human ceiling 0.33" (weighted) and "Gap -0.02" (weighted), the
worst judge was the same judge, and nominal datasets whose judges reach kappa 0.9 were never shown, because only the
ranked dataset had a best judge. Here one stage holds an ordinal dataset with a ceiling and weak judges, a nominal one
with a ceiling and a strong judge, and a nominal one with a single human (no ceiling), imported through the public
API. Every expected figure is computed label by label here (sklearn's kappas, the majority reference), not by the
package.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score
from streamlit.testing.v1 import AppTest

from personagap.api import import_labels
from personagap.cli import cli
from tests.support.paths import REPO

LEVELS = ("1", "2", "3", "4", "5")
YES_NO = ("no", "yes")
APP = REPO / "dashboard" / "app.py"
# dataset -> (scale, categories, humans, judges as (name, how often it gives the truth))
DESIGN: dict[str, tuple[str, tuple[str, ...], list[str], list[tuple[str, float]]]] = {
    "stars": ("ordinal", LEVELS, ["r1", "r2", "r3"], [("weak-1", 0.0), ("weak-2", 0.35)]),
    "verdicts": ("nominal", YES_NO, ["v1", "v2", "v3"], [("sharp", 0.97)]),
    "solo": ("nominal", YES_NO, ["s1"], [("sharp-solo", 0.95), ("middling", 0.7)]),
}
N_USERS, PER_USER = 12, 6


def _rows(dataset: str, seed: int) -> pd.DataFrame:
    """Humans who give the hidden truth 85% of the time (else a neighbour), judges as designed (else at random)."""
    _, categories, humans, judges = DESIGN[dataset]
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(N_USERS):
        for k in range(PER_USER):
            item, truth = f"{dataset}-u{u}-{k}", int(rng.integers(len(categories)))
            for h in humans:
                pick = truth if rng.random() < 0.85 else int(np.clip(truth + rng.choice([-1, 1]), 0,
                                                                     len(categories) - 1))
                rows.append({"item_id": item, "user_id": f"user{u}", "rater": h, "rater_kind": "human",
                             "label": categories[pick]})
            for name, right in judges:
                pick = truth if rng.random() < right else int(rng.integers(len(categories)))
                rows.append({"item_id": item, "user_id": f"user{u}", "rater": name, "rater_kind": "llm",
                             "label": categories[pick]})
    return pd.DataFrame(rows).assign(prompt="a prompt", response="an answer")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, pd.DataFrame]]:
    db = tmp_path_factory.mktemp("per-dataset") / "store.duckdb"
    frames = {}
    for seed, (dataset, (scale, categories, _, _)) in enumerate(DESIGN.items()):
        frames[dataset] = _rows(dataset, seed)
        import_labels(frames[dataset], stage="response", dataset=dataset, db=db, scale=scale,  # type: ignore[arg-type]
                      categories=list(categories))
    return db, frames


# --------------------------------------------------------------------------- the oracle, label by label

def _kappa(a: list[str], b: list[str], ordinal: bool) -> float:
    if ordinal:
        return float(cohen_kappa_score([int(x) for x in a], [int(x) for x in b], labels=[1, 2, 3, 4, 5],
                                       weights="quadratic"))
    return float(cohen_kappa_score(a, b))


def _oracle(dataset: str, rows: pd.DataFrame) -> dict[str, Any]:
    """Per judge its headline vs the majority reference; the ceiling; the best judge and its gap."""
    scale, _, humans, judges = DESIGN[dataset]
    ordinal = scale == "ordinal"
    by = rows.pivot(index="item_id", columns="rater", values="label")
    reference = {}
    for item, labels in by[humans].iterrows():
        counts = Counter(labels).most_common()
        if len(counts) == 1 or counts[0][1] > counts[1][1]:
            reference[item] = counts[0][0]
    items = sorted(reference)
    headline = {name: _kappa([reference[i] for i in items], list(by.loc[items, name]), ordinal) for name, _ in judges}
    best = max(headline, key=lambda n: headline[n])
    out: dict[str, Any] = {"headline": headline, "best": best, "worst": min(headline, key=lambda n: headline[n])}
    if len(humans) >= 2:  # every human labelled every item: pairs weigh alike
        out["ceiling"] = float(np.mean([_kappa(list(by[a]), list(by[b]), ordinal)
                                        for a, b in combinations(humans, 2)]))
        out["judge_mean"] = float(np.mean([_kappa(list(by[best]), list(by[h]), ordinal) for h in humans]))
        out["gap"] = out["ceiling"] - out["judge_mean"]
    return out


def _cli(*args: str) -> str:
    out = CliRunner().invoke(cli, list(args))
    assert out.exit_code == 0, out.output
    return out.output


def test_diagnose_json_gives_each_datasets_best_judge_with_its_own_ceiling(
        store: tuple[Path, dict[str, pd.DataFrame]]) -> None:
    db, frames = store
    stage = json.loads(_cli("diagnose", "--db", str(db), "--json"))["stages"][2]
    rows = {b["dataset"]: b for b in stage["datasets"]}
    assert set(rows) == set(DESIGN)
    for dataset, row in rows.items():
        want = _oracle(dataset, frames[dataset])
        scale = DESIGN[dataset][0]
        metric = "weighted_kappa" if scale == "ordinal" else "kappa"
        assert (row["scale"], row["metric"], row["n_judges"]) == (scale, metric, len(DESIGN[dataset][3]))
        assert row["best"]["judge"] == want["best"]
        assert row["best"][metric] == pytest.approx(want["headline"][want["best"]])
        # One judge: no "worst" (it would be the best); several: the lowest of them.
        assert (row["worst"] or {}).get("judge") == (want["worst"] if len(DESIGN[dataset][3]) > 1 else None)
        if "ceiling" in want:
            assert row["ceiling"]["dataset"] == dataset and row["ceiling"]["metric"] == metric
            assert row["ceiling"]["mean_kappa"] == pytest.approx(want["ceiling"])
            assert row["gap"]["judge"] == want["best"] and row["gap"]["metric"] == metric
            assert row["gap"]["judge_kappa"] == pytest.approx(want["judge_mean"])
            assert row["gap"]["gap"] == pytest.approx(want["gap"])
            assert row["note"] is None
        else:
            assert row["ceiling"] is None and row["gap"] is None
            assert row["note"].startswith(f"{dataset}: no human ceiling")
    # The defect's shape: a nominal dataset's strong judge is shown beside the ordinal dataset's weak ones.
    assert rows["verdicts"]["best"]["kappa"] > 0.8 > rows["stars"]["best"]["weighted_kappa"]


def _blocks(text: str) -> dict[str, list[str]]:
    """diagnose's text of stage 3, per dataset block (its heading line, then its indented lines)."""
    stage3 = text.split("Stage 3 — personalised response")[1].split("\n\n")[0]
    blocks: dict[str, list[str]] = {}
    current = None
    for line in stage3.splitlines():
        head = re.match(r"^  (\S+) \((nominal|ordinal|pairwise) scale", line)
        if head:
            current = head.group(1)
            blocks[current] = [line]
        elif current and line.startswith("    "):
            blocks[current].append(line)
        else:
            current = None
    return blocks


def test_diagnose_text_never_puts_a_figure_beside_a_ceiling_of_another_kind(
        store: tuple[Path, dict[str, pd.DataFrame]]) -> None:
    db, frames = store
    blocks = _blocks(_cli("diagnose", "--db", str(db)))
    assert set(blocks) == set(DESIGN)
    for dataset, lines in blocks.items():
        want = _oracle(dataset, frames[dataset])
        ordinal = DESIGN[dataset][0] == "ordinal"
        name = "quadratic-weighted kappa" if ordinal else "kappa"
        best = next(line for line in lines if "best judge:" in line)
        assert f"best judge:  {want['best']} ({dataset}" in best
        assert f"): {name} {want['headline'][want['best']]:.2f}" in best
        ceiling = [line for line in lines if line.startswith("    human ceiling:")]
        gap = [line for line in lines if line.startswith("    best judge's gap to it:")]
        if "ceiling" in want:
            assert len(ceiling) == 1
            assert ceiling[0].startswith(f"    human ceiling: mean pairwise {name} {want['ceiling']:.2f} ")
            assert f"{want['best']} on {dataset}: mean {name} with each blind human {want['judge_mean']:.2f}" in gap[0]
        else:
            assert not ceiling and not gap and any("no human ceiling" in line for line in lines)
        if not ordinal:  # no weighted figure anywhere in a nominal block, so none beside its ceiling
            assert not any("weighted" in line for line in lines)


def _walk(node: Any) -> Iterator[Any]:
    yield node
    for child in getattr(node, "children", {}).values():
        yield from _walk(child)


def _seen(element: Any) -> str:
    if element.type == "metric":
        return f"{element.label}: {element.value}"
    return str(getattr(element, "value", ""))


def test_overview_card_shows_each_datasets_best_judge_and_own_ceiling(
        store: tuple[Path, dict[str, pd.DataFrame]], monkeypatch: pytest.MonkeyPatch) -> None:
    db, frames = store
    monkeypatch.setenv("PERSONAGAP_DB", str(db))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.run()  # the judges' part: the run the browser's timer asks for once the pipeline view is in
    assert not at.exception, [e.value for e in at.exception]
    card = [_seen(e) for e in _walk(at.columns[2]) if e.type in ("markdown", "metric", "caption")]
    text = "\n".join(card)
    assert "datasets are not ranked against each other" in text
    # Split the card at each dataset's heading; each part holds figures of that dataset's kind only.
    starts = [i for i, line in enumerate(card) if re.match(r"^\*\*[\w-]+\*\* · \w+ scale · ", line)]
    parts = {card[i].split("**")[1]: card[i:j] for i, j in zip(starts, [*starts[1:], len(card)], strict=True)}
    assert set(parts) == set(DESIGN)
    for dataset, lines in parts.items():
        want = _oracle(dataset, frames[dataset])
        name = "quadratic-weighted kappa" if DESIGN[dataset][0] == "ordinal" else "kappa"
        assert lines[0].endswith(f"· {name}")
        assert f"Best judge: {name} vs the human reference: {want['headline'][want['best']]:.2f}" in lines
        assert any(line.startswith(f"{want['best']}, ") for line in lines)
        ceiling = [line for line in lines if line.startswith("Human ceiling")]
        if "ceiling" in want:
            assert len(ceiling) == 1 and ceiling[0].startswith(f"Human ceiling: **{want['ceiling']:.2f}** ")
            assert ceiling[0].endswith(f"the mean pairwise {name} of 3 blind humans")
            (gap,) = [line for line in lines if line.startswith("Gap to it")]
            assert f"**{want['gap']:.2f}**" in gap and f"mean pairwise {name} with each blind human" in gap
            assert f"{want['judge_mean']:.2f} vs the humans' {want['ceiling']:.2f}" in gap
        else:
            assert not ceiling and any("no human ceiling" in line for line in lines)
        if name == "kappa":
            assert not any("weighted" in line for line in lines)
        worst = [line for line in lines if line.startswith("Lowest of")]
        assert len(worst) == (1 if len(DESIGN[dataset][3]) > 1 else 0)  # never the best judge again as "worst"
