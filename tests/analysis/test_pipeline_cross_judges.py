"""Stage 2: every LLM selector's row carries what each OTHER judge says of its selection (naive and corrected)."""

from __future__ import annotations

from pathlib import Path

import pytest

from personagap.analysis.pipeline import pipeline_db
from personagap.analysis.pipeline_records import PipelineView
from tests.support.pipe_store import item, label, write_store

# Per attribute: (user, human relevance or None, LLM a, LLM b, LLM c or None: c did not label it).
S2 = {"x1": ("u1", "yes", "yes", "yes", "yes"), "x2": ("u1", "no", "yes", "no", "yes"),
      "x3": ("u1", "no", "yes", "yes", None), "x4": ("u1", "yes", "no", "yes", "no"),
      "x5": ("u2", "no", "yes", "no", "no"), "x6": ("u2", "yes", "no", "no", "yes"),
      "x7": ("u2", None, "yes", "yes", "yes"), "x8": ("u2", "no", "no", "yes", "no")}
LLMS = {"a": 2, "b": 3, "c": 4}


def _store(path: Path) -> Path:
    items, labels = [], []
    for x, (u, human, *said) in S2.items():
        items.append(item(x, "s2", "relevance", u, prompt_index=0, attribute=x))
        labels += [label(x, "hm", "human_majority", human)] if human else []
        labels += [label(x, rater, "llm", v) for rater, v in zip(LLMS, said, strict=True) if v]
    return write_store(path / "cross.duckdb", items, labels)


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> PipelineView:
    return pipeline_db(_store(tmp_path_factory.mktemp("cross")))


def _rg(naive: float, pos: list[bool], neg: list[bool]) -> float | None:
    # Undefined (no human-relevant or no human-irrelevant attribute in the group, or se + sp = 1): no figure.
    if not pos or not neg or sum(pos) / len(pos) + sum(neg) / len(neg) == 1:
        return None
    se, sp = sum(pos) / len(pos), sum(neg) / len(neg)
    return min(1.0, max(0.0, (naive + sp - 1) / (se + sp - 1)))


def _rate(selector: str, judge: str, selected: bool) -> tuple[float, float | None]:
    """The judge's "relevant" share (naive, corrected by its errors against humans) in one group of the selector."""
    rows = [v for v in S2.values() if (v[LLMS[selector]] == "yes") == selected and v[LLMS[selector]]
            and v[LLMS[judge]]]
    said = [v[LLMS[judge]] == "yes" for v in rows]
    pos = [v[LLMS[judge]] == "yes" for v in rows if v[1] == "yes"]
    neg = [v[LLMS[judge]] != "yes" for v in rows if v[1] == "no"]
    naive = sum(said) / len(said)
    return naive, _rg(naive, pos, neg)


def test_every_other_judge_on_each_llm_selector(view: PipelineView) -> None:
    for selector in LLMS:
        row = next(r for r in view.rows if r.system == selector and r.quantity == "irrelevant_selected"
                   and r.input_condition is None)
        assert sorted(j.judge for j in row.judges) == sorted(set(LLMS) - {selector})  # never its own judge
        for j in row.judges:
            naive, corrected = _rate(selector, j.judge, True)
            assert j.naive == pytest.approx(1 - naive)
            assert j.corrected == (None if corrected is None else pytest.approx(1 - corrected))
            # Outputs of the row the judge labelled: the selector's attributes, selected or left out.
            assert j.n_items == sum(bool(v[LLMS[selector]] and v[LLMS[j.judge]]) for v in S2.values())


def test_missed_share_uses_both_groups(view: PipelineView) -> None:
    row = next(r for r in view.rows if r.system == "a" and r.quantity == "missed_relevant")
    (b,) = [j for j in row.judges if j.judge == "b"]
    n1 = sum(v[2] == "yes" and bool(v[3]) for v in S2.values())
    n0 = sum(v[2] == "no" and bool(v[3]) for v in S2.values())
    p1, p0 = _rate("a", "b", True)[1], _rate("a", "b", False)[1]
    assert p1 is not None and p0 is not None
    assert b.corrected == pytest.approx(p0 * n0 / (p1 * n1 + p0 * n0))
